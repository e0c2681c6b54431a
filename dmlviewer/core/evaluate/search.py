"""Nearest neighbours over stored embeddings: exact search (the reference) and an approximate
faiss index for interactive retrieval over large feature files.

**Exact** (:func:`exact_search`): cosine similarity (the stored embeddings are L2-normalized,
so a dot product) of the queries with every row, in chunks of rows (an in-memory array or a
:class:`~dmlviewer.core.evaluate.store.FeatureFile` streamed from disk), keeping each chunk's
best ``k``; ties are broken by the lower row, so the result equals a full sort by
``(-similarity, row)``. Memory is one chunk, whatever the file's size. Metrics always use
exact search (``metrics.py``).

**Approximate** (:func:`build_index`, :func:`load_index`; needs the optional extra
``dmlviewer[search]``, i.e. ``faiss-cpu``, or a faiss build with GPUs, which is then used for
building and searching): an inverted-file index (faiss ``IVF<nlist>,Flat``, inner product)
with ``nlist`` about ``sqrt(N)`` cells, trained by k-means on a sample of the rows and filled
chunk by chunk from the file, in the worker with progress and cancellation between chunks.
``nprobe`` (cells visited per query) is then tuned on the file itself: the smallest power of
two whose recall@10 against exact search, over up to 200 of the file's rows as queries,
reaches ``target_recall`` (0.95); the measured recall is stored with it. Files of fewer
than :data:`MIN_IVF_ROWS` rows get an exact flat index.

The index is saved beside the feature file (``F.h5.faiss``) with a JSON sidecar
(``F.h5.faiss.json``) naming what it belongs to: the feature file's ``checkpoint_sha256``,
``created``, row count, dimension and a hash of 64 of its embedding rows, and the index
file's own SHA-256. :func:`index_state` compares them with the feature file: an index of
another checkpoint, another extraction or a changed file is ``stale`` and is rebuilt. The
index file is only handed to faiss's reader when its SHA-256 is the one the sidecar records
(a truncated or replaced file is not parsed). Both are written to temporary files and
renamed into place, the sidecar last.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from dmlviewer.core.progress import CancelToken, EtaClock, Progress

log = logging.getLogger(__name__)

INDEX_SUFFIX = ".faiss"
META_SUFFIX = ".faiss.json"
INDEX_FORMAT = 1
#: recall@10 against exact search that the tuned ``nprobe`` must reach on the file's own rows
TARGET_RECALL = 0.95
#: rows used as queries to tune ``nprobe``
TUNE_QUERIES = 200
TUNE_K = 10
#: below this many rows the "index" is exact (faiss IndexFlatIP)
MIN_IVF_ROWS = 20_000
#: rows per chunk when streaming embeddings (about 64 MB at D = 512)
CHUNK_ROWS = 32768


# ------------------------------------------------------------------------------------ exact


def _chunks(source: Any, chunk_rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, rows x D float32)`` chunks of an array, ``Features`` or ``FeatureFile``."""
    if hasattr(source, "iter_chunks"):
        yield from source.iter_chunks("embeddings", chunk_rows)
        return
    array = source.embeddings if hasattr(source, "embeddings") else source
    for start in range(0, len(array), chunk_rows):
        yield start, np.asarray(array[start:start + chunk_rows], dtype=np.float32)


def _best(sims: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of one query's candidates by ``(-similarity, row)``."""
    if len(sims) > k:
        kth = np.partition(sims, len(sims) - k)[len(sims) - k]
        keep = sims >= kth  # ties at the k-th value are all kept, then ordered by row
        sims, rows = sims[keep], rows[keep]
    order = np.lexsort((rows, -sims))[:k]
    return sims[order], rows[order]


def exact_search(source: Any, queries: np.ndarray, k: int, exclude: np.ndarray | None = None,
                 chunk_rows: int = CHUNK_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows of ``source`` most similar (dot product) to each query, best first, ties
    by row: ``(similarities, rows)``, each ``len(queries) x k'`` with ``k' = min(k, rows
    available)``. ``source``: an N x D array, a ``Features`` or a ``FeatureFile`` (streamed in
    chunks of ``chunk_rows``). ``exclude[q]``: a row left out for query ``q`` (itself), or -1."""
    queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
    m = len(queries)
    exclude = np.full(m, -1, np.int64) if exclude is None else np.asarray(exclude, np.int64).reshape(m)
    best_s = [np.zeros(0, np.float32) for _ in range(m)]
    best_r = [np.zeros(0, np.int64) for _ in range(m)]
    for start, chunk in _chunks(source, chunk_rows):
        sims = queries @ chunk.T  # m x rows
        rows = np.arange(start, start + len(chunk), dtype=np.int64)
        inside = (exclude >= start) & (exclude < start + len(chunk))
        sims[np.flatnonzero(inside), exclude[inside] - start] = -np.inf
        for q in range(m):
            cand_s = np.concatenate([best_s[q], sims[q]])
            cand_r = np.concatenate([best_r[q], rows])
            best_s[q], best_r[q] = _best(cand_s, cand_r, k)
    for q in range(m):  # the excluded row never counts, even when fewer than k rows remain
        keep = np.isfinite(best_s[q]) | (best_r[q] != exclude[q])
        best_s[q], best_r[q] = best_s[q][keep], best_r[q][keep]
    width = min(len(s) for s in best_s) if m else 0
    return (np.stack([s[:width] for s in best_s]) if m else np.zeros((0, 0), np.float32),
            np.stack([r[:width] for r in best_r]) if m else np.zeros((0, 0), np.int64))


# ------------------------------------------------------------------------------- the index


def faiss_module():
    """The ``faiss`` module, or ``None`` when the ``search`` extra is not installed."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def index_paths(features_path: str | os.PathLike) -> tuple[Path, Path]:
    """``(index file, sidecar)`` beside a feature file."""
    path = Path(features_path)
    return path.with_name(path.name + INDEX_SUFFIX), path.with_name(path.name + META_SUFFIX)


def default_nlist(n: int) -> int:
    """Inverted lists for ``n`` rows: about ``sqrt(n)`` (1,024 at a million), at least 1."""
    return max(1, min(n // 39, 2 ** round(math.log2(max(1.0, math.sqrt(n))))))


def fingerprint(features) -> dict:
    """What an index belongs to: the feature file's checkpoint hash, creation time, size and
    a SHA-256 of 64 evenly spaced embedding rows (``features``: a ``FeatureFile``)."""
    n = len(features)
    rows = np.unique(np.linspace(0, max(0, n - 1), num=min(64, n)).astype(np.int64)) if n else np.zeros(0, np.int64)
    sample = features.read("embeddings", rows) if n else np.zeros((0, features.dim), np.float32)
    return {
        "checkpoint_sha256": str(features.attrs.get("checkpoint_sha256", "")),
        "created": features.created,
        "rows": n,
        "dim": int(features.dim),
        "sample_sha256": hashlib.sha256(np.ascontiguousarray(sample, dtype=np.float32).tobytes()).hexdigest(),
    }


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_meta(meta_path: Path) -> dict | None:
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def index_state(features) -> tuple[str, str]:
    """``(state, reason)`` of the index beside ``features`` (a ``FeatureFile``): ``ready``,
    ``missing``, ``stale`` (another checkpoint, extraction or file; reason says which) or
    ``unavailable`` (faiss not installed)."""
    if faiss_module() is None:
        return "unavailable", "faiss is not installed (pip install 'dmlviewer[search]')"
    index_file, meta_file = index_paths(features.path)
    if not index_file.exists() or not meta_file.exists():
        return "missing", "no index beside the feature file"
    meta = _read_meta(meta_file)
    if meta is None or meta.get("format") != INDEX_FORMAT:
        return "stale", "unreadable index description"
    want = fingerprint(features)
    have = meta.get("belongs_to") or {}
    if have.get("checkpoint_sha256") != want["checkpoint_sha256"]:
        return "stale", "built for another checkpoint"
    for key, what in (("created", "another extraction"), ("rows", "another row count"),
                      ("dim", "another dimension"), ("sample_sha256", "other embeddings")):
        if have.get(key) != want[key]:
            return "stale", f"built for {what}"
    return "ready", f"{meta.get('kind', 'index')}, nprobe {meta.get('nprobe')}, recall@10 {meta.get('recall', float('nan')):.3f}"


class ApproximateIndex:
    """A loaded faiss index with its tuned ``nprobe``: :meth:`search` as :func:`exact_search`."""

    def __init__(self, index, meta: dict) -> None:
        self.index = index
        self.meta = meta
        self.nprobe = int(meta.get("nprobe") or 1)
        _set_nprobe(index, self.nprobe)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, k: int, exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(similarities, rows)`` of the approximately ``k`` nearest rows of each query, best
        first, ``exclude[q]`` left out; rows the index could not fill are dropped."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        m = len(queries)
        extra = 0 if exclude is None else 1
        k_ask = max(1, min(len(self), int(k) + extra))
        sims, rows = self.index.search(queries, k_ask)
        out_s, out_r = [], []
        for q in range(m):
            keep = rows[q] >= 0
            if exclude is not None:
                keep &= rows[q] != int(np.asarray(exclude).reshape(m)[q])
            out_s.append(sims[q][keep][:k])
            out_r.append(rows[q][keep][:k].astype(np.int64))
        width = min((len(s) for s in out_s), default=0)
        return (np.stack([s[:width] for s in out_s]).astype(np.float32) if m else np.zeros((0, 0), np.float32),
                np.stack([r[:width] for r in out_r]) if m else np.zeros((0, 0), np.int64))


def _set_nprobe(index, nprobe: int) -> None:
    faiss = faiss_module()
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:  # a flat index has no cells
        return
    ivf.nprobe = int(nprobe)


def _use_gpu(index):
    """The index on GPU 0 when this faiss build has GPUs (faiss-gpu), else the index itself."""
    faiss = faiss_module()
    if getattr(faiss, "get_num_gpus", lambda: 0)() > 0:
        return faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    return index


def _to_cpu(index):
    faiss = faiss_module()
    return faiss.index_gpu_to_cpu(index) if type(index).__name__.startswith("Gpu") else index


def _recall(approx: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each query's exact top-k found in its approximate top-k."""
    hits = [len(set(a.tolist()) & set(e.tolist())) / max(1, len(e)) for a, e in zip(approx, exact)]
    return float(np.mean(hits)) if hits else float("nan")


def build_ivf(chunks: Callable[[], Iterator[tuple[int, np.ndarray]]], n: int, dim: int,
              cancel: CancelToken | None = None, target_recall: float = TARGET_RECALL,
              nlist: int | None = None, seed: int = 0) -> Iterator[Progress]:
    """Generator: build and tune an index over ``n`` rows of width ``dim`` that ``chunks()``
    yields as ``(start, rows x dim float32)`` (called twice: sampling, then adding). Result:
    ``{"index", "kind", "nlist", "nprobe", "recall", "train_s", "add_s", "tune_s"}``."""
    faiss = faiss_module()
    if faiss is None:
        raise RuntimeError("the approximate index needs faiss: pip install 'dmlviewer[search]'")
    if n == 0:
        raise ValueError("cannot index an empty feature file")
    rng = np.random.default_rng(seed)
    ivf = n >= MIN_IVF_ROWS
    nlist = (nlist or default_nlist(n)) if ivf else 1
    train_n = min(n, 40 * nlist) if ivf else 0
    train_rows = np.sort(rng.choice(n, train_n, replace=False)) if train_n else np.zeros(0, np.int64)
    tune_rows = np.sort(rng.choice(n, min(n, TUNE_QUERIES), replace=False))
    clock = EtaClock(2 * n)

    def check() -> None:
        if cancel is not None:
            cancel.raise_if_cancelled()

    # pass 1: the training sample and the tuning queries
    train = np.empty((train_n, dim), np.float32)
    queries = np.empty((len(tune_rows), dim), np.float32)
    for start, chunk in chunks():
        check()
        stop = start + len(chunk)
        for rows, out in ((train_rows, train), (tune_rows, queries)):
            lo, hi = np.searchsorted(rows, [start, stop])
            out[lo:hi] = chunk[rows[lo:hi] - start]
        yield Progress("step", stop, 2 * n, "sampling rows", eta_s=clock.eta(stop))
    start_t = time.perf_counter()
    if ivf:
        yield Progress("log", n, 2 * n, f"training {nlist} cells on {train_n} rows")
        index = faiss.index_factory(dim, f"IVF{nlist},Flat", faiss.METRIC_INNER_PRODUCT)
        index = _use_gpu(index)
        index.train(train)
    else:
        index = _use_gpu(faiss.IndexFlatIP(dim))
    del train
    train_s = time.perf_counter() - start_t

    # pass 2: add every row; the tuning queries' exact neighbours on the way
    start_t = time.perf_counter()
    k = min(TUNE_K, n - 1)
    best_s = [np.zeros(0, np.float32) for _ in tune_rows]
    best_r = [np.zeros(0, np.int64) for _ in tune_rows]
    for start, chunk in chunks():
        check()
        chunk = np.ascontiguousarray(chunk, dtype=np.float32)
        index.add(chunk)
        if k > 0:
            s, r = exact_search(chunk, queries, k, exclude=tune_rows - start, chunk_rows=len(chunk) or 1)
            for q in range(len(tune_rows)):
                best_s[q], best_r[q] = _best(np.concatenate([best_s[q], s[q]]),
                                             np.concatenate([best_r[q], r[q] + start]), k)
        done = n + start + len(chunk)
        yield Progress("step", done, 2 * n, "adding rows to the index", eta_s=clock.eta(done))
    add_s = time.perf_counter() - start_t

    # tune nprobe: the smallest power of two reaching the target recall
    start_t = time.perf_counter()
    exact = [r for r in best_r]
    nprobe, recall = 1, 1.0
    if ivf and k > 0:
        probe = 1
        while True:
            check()
            _set_nprobe(index, probe)
            _, rows = index.search(queries, k + 1)
            approx = [r[(r >= 0) & (r != self_row)][:k] for r, self_row in zip(rows, tune_rows)]
            nprobe, recall = probe, _recall(approx, exact)
            if recall >= target_recall or probe >= nlist:
                break
            probe = min(nlist, probe * 2)
    tune_s = time.perf_counter() - start_t
    kind = f"IVF{nlist},Flat" if ivf else "Flat"
    yield Progress("log", 2 * n, 2 * n, f"{kind}: nprobe {nprobe} gives recall@10 {recall:.3f} on {len(tune_rows)} rows")
    yield Progress("done", 2 * n, 2 * n, data={"result": {
        "index": index, "kind": kind, "nlist": nlist, "nprobe": nprobe, "recall": recall,
        "train_s": train_s, "add_s": add_s, "tune_s": tune_s}})


def build_index(features_path: str | os.PathLike, cancel: CancelToken | None = None,
                target_recall: float = TARGET_RECALL, threads: int | None = None) -> Iterator[Progress]:
    """Generator: build the approximate index of a feature file, streamed chunk by chunk
    (:func:`build_ivf`), and save it beside the file (module docstring). ``threads``: faiss's
    OpenMP threads during the build (the GUI leaves one core free). Result: ``{"path",
    "kind", "nprobe", "recall", "seconds"}``."""
    from .store import open_features

    faiss = faiss_module()
    if faiss is None:
        raise RuntimeError("the approximate index needs faiss: pip install 'dmlviewer[search]'")
    features = open_features(features_path)
    before = faiss.omp_get_max_threads()
    if threads:
        faiss.omp_set_num_threads(int(threads))
    start = time.perf_counter()
    try:
        result = None
        for event in build_ivf(lambda: features.iter_chunks("embeddings", CHUNK_ROWS), len(features),
                               features.dim, cancel, target_recall):
            if event.kind == "done":
                result = event.data["result"]
            else:
                yield event
    finally:
        faiss.omp_set_num_threads(before)
    index_file, meta_file = index_paths(features.path)
    meta = {
        "format": INDEX_FORMAT,
        "belongs_to": fingerprint(features),
        "kind": result["kind"], "nlist": result["nlist"], "nprobe": result["nprobe"],
        "recall": result["recall"], "target_recall": target_recall,
        "faiss": getattr(faiss, "__version__", ""),
    }
    tmp_index = index_file.with_name(f".{index_file.name}.tmp-{os.getpid()}")
    tmp_meta = meta_file.with_name(f".{meta_file.name}.tmp-{os.getpid()}")
    try:
        faiss.write_index(_to_cpu(result["index"]), str(tmp_index))
        meta["index_sha256"] = _file_sha256(tmp_index)
        tmp_meta.write_text(json.dumps(meta, indent=1), encoding="utf-8")
        os.replace(tmp_index, index_file)
        os.replace(tmp_meta, meta_file)
    finally:
        for tmp in (tmp_index, tmp_meta):
            if tmp.exists():
                tmp.unlink()
    seconds = time.perf_counter() - start
    log.info("built %s index of %s in %.1f s (nprobe %d, recall@10 %.3f)", result["kind"], features.path,
             seconds, result["nprobe"], result["recall"])
    yield Progress("done", 1, 1, data={"result": {
        "path": str(index_file), "kind": result["kind"], "nprobe": result["nprobe"],
        "recall": result["recall"], "seconds": seconds}})


def load_index(features) -> ApproximateIndex | None:
    """The index beside ``features`` (a ``FeatureFile``) when it is ``ready`` and its file is
    the one its sidecar describes; ``None`` otherwise (missing, stale, faiss absent)."""
    state, reason = index_state(features)
    if state != "ready":
        log.info("no approximate index for %s: %s", features.path, reason)
        return None
    index_file, meta_file = index_paths(features.path)
    meta = _read_meta(meta_file) or {}
    if _file_sha256(index_file) != meta.get("index_sha256"):
        log.warning("%s is not the index its description names; ignoring it", index_file)
        return None
    index = faiss_module().read_index(str(index_file))
    if index.ntotal != len(features) or index.d != features.dim:
        log.warning("%s holds %d rows of %d, the feature file %d of %d; ignoring it",
                    index_file, index.ntotal, index.d, len(features), features.dim)
        return None
    return ApproximateIndex(_use_gpu(index), meta)


def search(features, queries: np.ndarray, k: int, exclude: np.ndarray | None = None,
           index: ApproximateIndex | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(similarities, rows)``: through ``index`` when given, else exact (:func:`exact_search`
    over ``features``: an array, ``Features`` or ``FeatureFile``)."""
    if index is not None:
        return index.search(queries, k, exclude)
    return exact_search(features, queries, k, exclude)


def prepare_index(features_path: str | os.PathLike, cancel: CancelToken | None = None,
                  threads: int | None = None) -> Iterator[Progress]:
    """Generator for the app's worker: the file's index, built (or rebuilt when stale) first
    if needed, then loaded. Result: an :class:`ApproximateIndex` (``RuntimeError`` without
    faiss; ``PermissionError`` when the folder cannot hold the index)."""
    from .store import open_features

    features = open_features(features_path)
    state, reason = index_state(features)
    if state == "unavailable":
        raise RuntimeError(reason)
    if state != "ready":
        folder = Path(features_path).parent
        if not os.access(folder, os.W_OK):
            raise PermissionError(f"cannot write the search index beside {features_path}: {folder} is read-only")
        yield Progress("log", message=f"building the search index ({reason})")
        yield from (e for e in build_index(features_path, cancel, threads=threads) if e.kind != "done")
    yield Progress("log", message="loading the search index")
    index = load_index(features)
    if index is None:
        raise RuntimeError(f"the search index of {features_path} could not be loaded")
    yield Progress("done", 1, 1, data={"result": index})
