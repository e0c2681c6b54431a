"""What changed between two models on one split (issue 41): the queries a new checkpoint broke
and fixed, and how their neighbourhoods moved.

Both models embed the same images in the same order (``N x D`` each); every query is ranked
against the gallery as :func:`~.metrics.retrieval_metrics` ranks it for Recall@1 (the query
itself excluded, the dataset's query/gallery protocol, only queries with at least one other
image of their class: the ``num_queries`` that ``evaluate`` prints), with the same exact
search (:func:`~.metrics.iter_nearest_neighbors`: chunked matrix product and ``topk``, so ties
at the top-1 fall as Recall@1's do). One pass per chunk of queries finds each model's top
:data:`DEPTH`; nothing of size ``N x N`` is ever held. From it:

- **the change table**: each query's top-1 correct under A and under B, counted as
  ``both_right``, ``a_only`` (right under A only), ``b_only`` and ``both_wrong``; so
  ``both_right + a_only = recall@1(A) * num_queries``;
- **neighbour overlap** ``overlap[k]``: the mean over queries of ``|top_k(A) ∩ top_k(B)| / k``
  for k = 1, 4, 16 (k capped at the gallery size less one), 1 for a model against itself;
- **per class**: each class's Recall@1 under A and B and its change;
- **broken** (right under A, wrong under B) and **fixed** (the reverse) queries, each with
  both models' top-1 and both **margins**: the most similar image of another class minus the
  most similar image of the query's class (seed 000 Sec. 5.2's diagnosis of a retrieval; the
  report's failure margin, :mod:`dmlviewer.core.report.failures`), positive when the top-1 is
  wrong. They are ranked by how far the margin moved the wrong way: ``margin B - margin A``
  for a broken query, ``margin A - margin B`` for a fixed one, largest first. Each margin is
  read from the top :data:`DEPTH` when both of its images are there (exact: the list is
  sorted), else from one exact row of similarities for that query only.
"""

from __future__ import annotations

import logging
from typing import Iterator, Sequence

import numpy as np
import torch

from dmlviewer.core.progress import CancelToken, EtaClock, Progress

from .metrics import CHUNK_BYTES, _as_tensor, _query_setup, iter_nearest_neighbors

log = logging.getLogger(__name__)

#: the neighbour-overlap depths (JSON keys ``"1"``, ``"4"``, ``"16"``)
OVERLAP_KS = (1, 4, 16)
#: neighbours searched per query and model
DEPTH = max(OVERLAP_KS)
COUNT_KEYS = ("both_right", "a_only", "b_only", "both_wrong")


def _first(match: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Per row, ``values`` at the first True of ``match`` (NaN where there is none)."""
    has = match.any(dim=1)
    first = match.to(torch.uint8).argmax(dim=1)
    picked = values.gather(1, first[:, None])[:, 0].to(torch.float64)
    return torch.where(has, picked, torch.full_like(picked, float("nan")))


class _Model:
    """One model's search results over the used queries (filled chunk by chunk)."""

    def __init__(self, m: int) -> None:
        self.top = np.zeros(m, np.int64)  # gallery position of the top-1
        self.similarity = np.zeros(m, np.float64)
        self.correct = np.zeros(m, bool)
        self.best_same = np.full(m, np.nan)  # most similar same-class image (NaN: not in the top DEPTH)
        self.best_other = np.full(m, np.nan)  # most similar image of another class

    def fill(self, lo: int, sims: torch.Tensor, idx: torch.Tensor, g_lab: torch.Tensor, q_lab: torch.Tensor) -> None:
        hi = lo + len(idx)
        match = g_lab[idx] == q_lab[:, None]
        self.top[lo:hi] = idx[:, 0].cpu().numpy()
        self.similarity[lo:hi] = sims[:, 0].double().cpu().numpy()
        self.correct[lo:hi] = match[:, 0].cpu().numpy()
        self.best_same[lo:hi] = _first(match, sims).cpu().numpy()
        self.best_other[lo:hi] = _first(~match, sims).cpu().numpy()


def _complete_margins(state: _Model, emb_q: torch.Tensor, emb_g: torch.Tensor, wanted: np.ndarray,
                      self_row: np.ndarray, q_lab: np.ndarray, g_lab: np.ndarray) -> None:
    """Fill the missing best same-class / other-class similarities of the ``wanted`` queries
    from exact rows of similarities (only those queries; chunked)."""
    missing = wanted[np.isnan(state.best_same[wanted]) | np.isnan(state.best_other[wanted])]
    if len(missing) == 0:
        return
    g_lab_t = torch.from_numpy(g_lab).to(emb_g.device)
    chunk = max(1, CHUNK_BYTES // max(1, 4 * len(emb_g)))
    for start in range(0, len(missing), chunk):
        rows = missing[start:start + chunk]
        sims = (emb_q[torch.from_numpy(rows).to(emb_q.device)] @ emb_g.T).double()
        own = self_row[rows]
        inside = np.flatnonzero(own >= 0)
        sims[torch.from_numpy(inside), torch.from_numpy(own[inside])] = -np.inf
        same = g_lab_t[None, :] == torch.from_numpy(q_lab[rows]).to(emb_g.device)[:, None]
        neg = torch.full_like(sims, -np.inf)
        state.best_same[rows] = torch.where(same, sims, neg).max(dim=1).values.cpu().numpy()
        other = torch.where(~same, sims, neg).max(dim=1).values.cpu().numpy()
        state.best_other[rows] = np.where(np.isfinite(other), other, np.nan)  # a split of one class: no other


def change_table(embeddings_a: np.ndarray | torch.Tensor, embeddings_b: np.ndarray | torch.Tensor,
                 labels: np.ndarray, paths: Sequence[str] | None = None, index_of: np.ndarray | None = None,
                 queries: np.ndarray | None = None, gallery: np.ndarray | None = None,
                 class_names: Sequence[str] | None = None, device: str | torch.device = "cpu",
                 chunk_size: int | None = None, cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Generator: the change table of two models' embeddings of the same images (module
    docstring). ``index_of[row]``: the index reported for an embedding row (default the row:
    pass the dataset indices of the rows); ``paths[row]`` its path; ``queries``/``gallery`` the
    dataset's protocol (:func:`~.evaluation.query_gallery`). One ``step`` event per chunk of
    queries; the cancel token is checked between chunks.

    Result (``done`` event and return value): ``num_queries``, ``both_right``, ``a_only``,
    ``b_only``, ``both_wrong``, ``recall@1`` ``[A, B]``, ``overlap`` (``{"1", "4", "16"}``),
    ``classes`` (classes whose Recall@1 changed: ``label``, ``name``, ``num_queries``,
    ``recall@1`` ``[A, B]``, ``change`` = B - A; the largest gain first), ``broken`` and
    ``fixed`` (``index``, ``path``, ``label``, ``top1`` ``[A, B]`` each ``index path label
    similarity``, ``margin`` ``[A, B]``, ``margin_change``; ranked, largest first)."""
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    for name, emb in (("embeddings_a", embeddings_a), ("embeddings_b", embeddings_b)):
        if emb.ndim != 2 or emb.shape[0] != n:
            raise ValueError(f"{name}: expected {n} rows (one per label) of a 2-d matrix, got shape "
                             f"{tuple(emb.shape)}")
    paths = list(paths) if paths is not None else [str(i) for i in range(n)]
    index_of = np.arange(n, dtype=np.int64) if index_of is None else np.asarray(index_of, np.int64)
    dev = torch.device(device)
    q_pos, g_pos, self_row, r = _query_setup(labels, queries, gallery)
    used = r > 0
    q_pos, self_row = q_pos[used], self_row[used]
    m = len(q_pos)
    depth = min(DEPTH, len(g_pos) - 1)
    if m == 0 or depth < 1:
        raise ValueError("no query has another image of its class in the gallery: nothing to compare")
    g_lab_np, q_lab_np = labels[g_pos], labels[q_pos]
    g_lab, q_lab = torch.from_numpy(g_lab_np).to(dev), torch.from_numpy(q_lab_np).to(dev)
    q_idx, g_idx = torch.from_numpy(q_pos).to(dev), torch.from_numpy(g_pos).to(dev)
    self_index = torch.from_numpy(self_row).to(dev)
    every = np.arange(n)
    q_all, g_all = np.array_equal(q_pos, every), np.array_equal(g_pos, every)
    q_emb, g_emb = {}, {}
    for key, raw in (("a", embeddings_a), ("b", embeddings_b)):
        emb = torch.nn.functional.normalize(_as_tensor(raw, torch.float32, dev), dim=1)
        q_emb[key] = emb if q_all else emb[q_idx]  # no copies when every image is a query and in the gallery
        g_emb[key] = emb if g_all else emb[g_idx]
    if chunk_size is None:
        chunk_size = max(1, min(m, CHUNK_BYTES // max(1, 4 * len(g_pos))))
    state = {"a": _Model(m), "b": _Model(m)}
    shared = {k: 0.0 for k in OVERLAP_KS}
    clock = EtaClock(m)
    searches = {key: iter_nearest_neighbors(q_emb[key], g_emb[key], depth, self_index, chunk_size)
                for key in ("a", "b")}
    for (start, sims_a, idx_a), (_, sims_b, idx_b) in zip(searches["a"], searches["b"]):
        if cancel is not None:
            cancel.raise_if_cancelled()
        lab = q_lab[start:start + len(idx_a)]
        state["a"].fill(start, sims_a, idx_a, g_lab, lab)
        state["b"].fill(start, sims_b, idx_b, g_lab, lab)
        for k in OVERLAP_KS:
            kk = min(k, depth)
            common = (idx_a[:, :kk, None] == idx_b[:, None, :kk]).any(dim=2).sum(dim=1)
            shared[k] += float(common.sum()) / kk
        done = start + len(idx_a)
        yield Progress("step", done, m, "comparing the two models' neighbours", eta_s=clock.eta(done))

    a, b = state["a"], state["b"]
    broken = np.flatnonzero(a.correct & ~b.correct)
    fixed = np.flatnonzero(~a.correct & b.correct)
    changed = np.concatenate([broken, fixed])
    for key in ("a", "b"):
        if cancel is not None:
            cancel.raise_if_cancelled()
        _complete_margins(state[key], q_emb[key], g_emb[key], changed, self_row, q_lab_np, g_lab_np)
    margin_a, margin_b = a.best_other - a.best_same, b.best_other - b.best_same

    def top1(s: _Model, q: int) -> dict:
        row = int(g_pos[s.top[q]])
        return {"index": int(index_of[row]), "path": paths[row], "label": int(labels[row]),
                "similarity": float(s.similarity[q])}

    def entries(which: np.ndarray, change: np.ndarray) -> list[dict]:
        order = which[np.lexsort((which, -np.nan_to_num(change[which], nan=-np.inf)))]
        out = []
        for q in order:
            row = int(q_pos[q])
            out.append({"index": int(index_of[row]), "path": paths[row], "label": int(labels[row]),
                        "top1": [top1(a, q), top1(b, q)],
                        "margin": [float(margin_a[q]), float(margin_b[q])],
                        "margin_change": float(change[q])})
        return out

    classes = []
    values, inverse, counts = np.unique(q_lab_np, return_inverse=True, return_counts=True)
    right_a = np.bincount(inverse, weights=a.correct, minlength=len(values))
    right_b = np.bincount(inverse, weights=b.correct, minlength=len(values))
    for k in np.flatnonzero(right_a != right_b):
        label = int(values[k])
        name = class_names[label] if class_names is not None and 0 <= label < len(class_names) else str(label)
        ra, rb = right_a[k] / counts[k], right_b[k] / counts[k]
        classes.append({"label": label, "name": name, "num_queries": int(counts[k]),
                        "recall@1": [float(ra), float(rb)], "change": float(rb - ra)})
    classes.sort(key=lambda c: (-c["change"], c["label"]))
    result = {
        "num_queries": m,
        "both_right": int((a.correct & b.correct).sum()),
        "a_only": len(broken),
        "b_only": len(fixed),
        "both_wrong": int((~a.correct & ~b.correct).sum()),
        "recall@1": [float(a.correct.mean()), float(b.correct.mean())],
        "overlap": {str(k): shared[k] / m for k in OVERLAP_KS},
        "classes": classes,
        "broken": entries(broken, margin_b - margin_a),
        "fixed": entries(fixed, margin_a - margin_b),
    }
    log.info("change table over %d queries: %d broken, %d fixed", m, len(broken), len(fixed))
    yield Progress("done", m, m, data={"result": result})
    return result


def _relay(job: Iterator[Progress]) -> Iterator[Progress]:
    """Re-yield a sub-job's events but its ``done``; return its result."""
    result = None
    for event in job:
        if event.kind == "done":
            result = event.data.get("result")
        else:
            yield event
    return result


def same_images(paths_a: Sequence[str], paths_b: Sequence[str], name_a: str, name_b: str,
                fingerprints: tuple[str, str] = ("", "")) -> None:
    """``ValueError`` (one line naming both) unless the two embeddings are of the same images in
    the same order: the change table compares row ``i`` of A with row ``i`` of B."""
    fa, fb = fingerprints
    if fa and fb and fa != fb and len(paths_a) == len(paths_b):
        raise ValueError(f"{name_a} and {name_b} are features of different datasets (their dataset fingerprints "
                         "differ): compare features of the same split of one dataset")
    if len(paths_a) != len(paths_b):
        raise ValueError(f"{name_a} holds {len(paths_a)} images and {name_b} {len(paths_b)}: compare features of "
                         "the same split of one dataset")
    differ = [i for i, (p, q) in enumerate(zip(paths_a, paths_b)) if p != q]
    if differ:
        what = "in another order" if sorted(paths_a) == sorted(paths_b) else "other images"
        raise ValueError(f"{name_b} holds {what} than {name_a} (row {differ[0]}: {paths_b[differ[0]]!r} against "
                         f"{paths_a[differ[0]]!r}): compare features of the same split of one dataset")


def compare_feature_files(path_a, path_b, split: str | None = None, device: str | torch.device = "cpu",
                          cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Generator: :func:`change_table` of two feature files of the same images (``evaluate
    --out``), every image of ``split`` (default: all the file holds) a query against all the
    others; refused in one ``ValueError`` line naming the files when they hold different images
    (:func:`same_images`) or labels. ``index`` in the result is the file's row."""
    from .store import read_features

    files = [read_features(p, include_raw=False, include_groups=False) for p in (path_a, path_b)]
    names = [f"feature file {p}" for p in (path_a, path_b)]
    same_images(files[0].paths, files[1].paths, *names,
                fingerprints=tuple(str(f.attrs.get("dataset_fingerprint") or "") for f in files))
    if not np.array_equal(files[0].labels, files[1].labels):
        raise ValueError(f"{names[1]} labels its images differently from {names[0]}: compare features of one dataset")
    rows = files[0].indices(split)
    if len(rows) == 0:
        raise ValueError(f"{names[0]} holds no {split!r} images")
    result = yield from _relay(change_table(files[0].embeddings[rows], files[1].embeddings[rows],
                                            files[0].labels[rows], [files[0].paths[i] for i in rows], rows,
                                            class_names=files[0].class_names, device=device, cancel=cancel))
    yield Progress("done", 1, 1, data={"result": result})
    return result


def compare_models_changes(models: Sequence[tuple[str, torch.nn.Module, str, object]], dataset, split: str = "test",
                           device: str | torch.device = "cpu", num_workers: int | None = None,
                           cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Generator: the change table of two models ``(name, model, sha256, feature file or
    None)`` on ``split`` of ``dataset`` (each model's embeddings from
    :func:`.embed_split.model_split`: a given file that does not fit is one ``ValueError`` line),
    over the images both embedded. Result: :func:`change_table`'s, ``index`` being dataset
    indices, plus ``from_file`` ``[A, B]``."""
    from .embed_split import model_split
    from .evaluation import query_gallery

    if dataset.branches is not None:
        raise ValueError("the change table compares retrieval within classes; cross-view data pairs street and "
                         "aerial images instead (compare two-branch models with orientation and evaluate)")
    if len(dataset.indices(split)) < 2:
        raise ValueError(f"the dataset has fewer than two {split!r} images")
    parts = []
    for name, model, sha256, features in models:
        parts.append((yield from model_split(model, dataset, split, device, features, sha256, name, num_workers,
                                             cancel)))
    common = np.intersect1d(parts[0]["indices"], parts[1]["indices"])
    if len(common) < len(dataset.indices(split)):
        log.warning("the change table covers the %d of %d images both models embedded", len(common),
                    len(dataset.indices(split)))
    emb = []
    for p in parts:
        row_of = {int(i): k for k, i in enumerate(p["indices"])}
        emb.append(p["embeddings"][np.array([row_of[int(i)] for i in common], dtype=np.int64)])
    queries, gallery = query_gallery(dataset, common)
    result = yield from _relay(change_table(emb[0], emb[1], dataset.labels[common],
                                            [dataset.paths[i] for i in common], common, queries, gallery,
                                            dataset.class_names, device, cancel=cancel))
    result["from_file"] = [p["from_file"] for p in parts]
    yield Progress("done", 1, 1, data={"result": result})
    return result
