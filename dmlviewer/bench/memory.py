"""``bench memory``: peak resident memory of the app with a 120,000-image listing open, and of
feature extraction over 60,000 images.

Every figure comes from a fresh child process (``python -c``, JSON on its last stdout line),
so neither this process's imports nor an earlier measurement count:

- ``app``: the real :class:`~dmlviewer.gui.window.main_window.MainWindow` (offscreen Qt, temporary
  XDG config/data/cache folders, so no user setting is read or written) opens an SOP-style
  listing (:func:`dmlviewer.bench.index.write_sop_listing`, 120,053 images; the image files do
  not exist), is shown, and the event loop runs until the browser's visible rows have all had
  their thumbnails requested and failed (placeholders drawn). The same window with no dataset
  gives the baseline, so ``app_rss_mb - app_empty_rss_mb`` is the listing's own cost. No model
  is loaded, so the retrieval panel's automatic extraction cannot start; the child checks that
  no job ran.
- ``extract``: :func:`~dmlviewer.core.evaluate.extract_features` with a small_cnn (64 px,
  512-d) over a 60,000-row :class:`~dmlviewer.core.data.records.Dataset` whose paths cycle over
  a 10 x 20 synthetic demo set, into a temporary HDF5 file. DataLoader workers are separate
  processes; ``extract_worker_rss_mb`` is the largest one's peak (``RUSAGE_CHILDREN``), which
  also counts the pages it shares with the main process after ``fork``.

Peak RSS is ``VmHWM`` of ``/proc/self/status`` where it exists (Linux): a child's
``ru_maxrss`` also carries the high-water mark of the process image it was exec'd from (the
forked or vforked copy of this, torch-importing, process), so it would never read below this
process's size. Elsewhere ``ru_maxrss`` is used (kilobytes on Linux, bytes on macOS). The
``*_anon_mb`` figures split the resident memory at the end of a child into private memory
(``RssAnon``) and the rest, mostly torch's shared libraries (``RssFile``, shared between
processes), which are most of an otherwise empty app's figure.
- ``large``: the same window with a 1,000,000-image SOP-style listing and a feature file of
  it open (1,000,000 x 512, :func:`write_feature_file`; its faiss index, when faiss is
  installed, built beforehand in the parent): the peak after the listing, after opening the
  features and an exact retrieval (the file is read lazily: paths and labels, embeddings
  streamed; the index is held back until then so that it does not count here), after the
  index is loaded and a retrieval through it, and after a PCA of every row in the embedding
  view (``large_*``).

``--quick``: 6,000 extraction rows and a 100,000-image large app (the 120,053 listing stays at
full size: it takes seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from dmlviewer.bench.child import _MB, _maxrss_mb, peak_rss_mb, rss_parts_mb, run_child  # noqa: F401 - re-exported
from dmlviewer.bench.machine import describe

#: Rows of the extraction run by default (the issue's N) and with ``--quick``.
EXTRACT_IMAGES = 60_000
EXTRACT_IMAGES_QUICK = 6_000
#: The synthetic images the extraction rows cycle over (classes x per_class, pixels).
DEMO_CLASSES, DEMO_PER_CLASS, DEMO_SIZE = 10, 20, 64
#: The listing and 512-d feature file of the large app measurement (``--quick``: smaller).
LARGE_IMAGES = 1_000_000
LARGE_IMAGES_QUICK = 100_000
#: Seconds the app child lets the event loop run after the window is settled (paints, timers).
SETTLE_S = 0.5

def write_listing(root: Path, images: int | None = None) -> int:
    """An SOP-style listing in ``root``: the full 120,053 images of :func:`write_sop_listing`,
    its first ``images`` rows (half from each split file), or, above 120,053, the layout
    scaled to ``images``. Returns the number listed."""
    from dmlviewer.bench.index import SPLITS, write_sop_listing

    full = sum(n for _, n, _ in SPLITS)
    if images is not None and images > full:
        return write_sop_listing(root, images=images)
    total = write_sop_listing(root)
    if images is None or images >= total:
        return total
    if images < 2:
        raise ValueError(f"a listing needs at least 2 images (one per split), got {images}")
    for (name, _, _), keep in zip(SPLITS, (images // 2, images - images // 2)):
        lines = (root / name).read_text().splitlines()
        (root / name).write_text("\n".join(lines[:1 + keep]) + "\n")
    return images


def write_feature_file(path: Path, root: Path, dim: int = 512) -> int:
    """A feature file for the listing in ``root``: one row per listed image (same paths and
    labels), with the clustered unit vectors of ``bench search`` as embeddings (also stored
    as ``embeddings_raw``, as an extraction writes both). Returns the number of rows."""
    from dmlviewer.bench import search
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.evaluate import FeatureWriter

    dataset = open_dataset(root)
    centre = search.centres(dim)
    with FeatureWriter(path, {"checkpoint_sha256": "0" * 64, "dataset_root": str(root), "dataset_format": "sop",
                              "model_config": "{}"}) as writer:
        for start, x in search.chunks(len(dataset), centre):
            rows = slice(start, start + len(x))
            writer.append(embeddings_raw=x, embeddings=x, labels=dataset.labels[rows],
                          paths=dataset.paths[rows], split=[str(v) for v in dataset.split[rows]])
    return len(dataset)


# -- children --------------------------------------------------------------------------------

def _app_child(spec: dict) -> None:
    """Child: open the window (on ``spec["root"]`` if given), wait for the first rows, report."""
    from dmlviewer.gui.window.app import create_app
    from dmlviewer.gui.window.main_window import MainWindow

    app = create_app()
    window = MainWindow()
    root = spec.get("root")
    if root is not None and not window.open_dataset(root):
        raise RuntimeError(f"MainWindow.open_dataset({root!r}) failed")
    window.show()
    browser, loader = window.browser, window.loader
    start = time.perf_counter()

    def rows_shown() -> list[int]:
        rows = browser.visible_rows()
        return browser.model.rows[rows.start:rows.stop].tolist()

    def settled() -> bool:
        if not window.isVisible():
            return False
        if root is None:
            return True
        shown = rows_shown()
        return bool(shown) and not loader.busy and all(
            loader.cached(i) is not None or loader.broken_reason(i) is not None for i in shown)

    while not settled():
        if time.perf_counter() - start > spec["timeout_s"]:
            raise RuntimeError(f"the browser showed no settled rows within {spec['timeout_s']} s")
        app.processEvents()
        time.sleep(0.005)
    settle_end = time.perf_counter() + SETTLE_S
    while time.perf_counter() < settle_end:
        app.processEvents()
        time.sleep(0.005)
    shown = rows_shown()
    jobs = len(window.runner.jobs) + len(window.runner.history)
    if jobs:
        raise RuntimeError(f"{jobs} job(s) ran in the window (automatic feature extraction?): "
                           "the figure would include them")
    listing_rss = peak_rss_mb()
    features = _features_in_window(app, window, spec) if spec.get("features") else {}
    result = {
        "listing_rss_mb": listing_rss,
        **features,
        "rss_mb": peak_rss_mb(),
        **{f"rss_{k}_mb": v for k, v in rss_parts_mb().items()},
        "images": 0 if window.dataset is None else len(window.dataset),
        "rows_shown": len(shown),
        "placeholders": sum(loader.broken_reason(i) is not None for i in shown),
        "jobs": jobs,
        "seconds": time.perf_counter() - start,
    }
    window.shutdown()
    sys.stdout.write(json.dumps(result) + "\n")


def _wait(app, condition, timeout_s: float, what: str) -> float:
    """Run the event loop until ``condition()``; seconds it took."""
    start = time.perf_counter()
    while not condition():
        if time.perf_counter() - start > timeout_s:
            raise RuntimeError(f"{what} did not happen within {timeout_s} s")
        app.processEvents()
        time.sleep(0.002)
    return time.perf_counter() - start


def _features_in_window(app, window, spec: dict) -> dict:
    """Open ``spec["features"]`` in the window, retrieve for two queries (exact, then through
    the index when one is kept), project the file (PCA over every row) in the embedding view;
    times and peak RSS after each step."""
    from dmlviewer.gui.retrieval.embedding_view import EmbeddingView, projection_job

    from dmlviewer.gui.retrieval import search_index

    report: dict = {}
    start = time.perf_counter()
    threshold, search_index.INDEX_MIN_ROWS = search_index.INDEX_MIN_ROWS, 2**62  # exact first, alone
    try:
        if not window.open_features(spec["features"]):
            raise RuntimeError(f"MainWindow.open_features({spec['features']!r}) failed")
    finally:
        search_index.INDEX_MIN_ROWS = threshold
    report["features_open_s"] = time.perf_counter() - start
    report["features_rows"] = len(window.features)
    panel = window.retrieval

    def retrieve(query: int) -> float:
        panel.results = []
        start = time.perf_counter()
        panel.set_query(query)
        _wait(app, lambda: bool(panel.results), spec["timeout_s"], "retrieval")
        return time.perf_counter() - start

    report["exact_retrieval_s"] = retrieve(int(spec["queries"][0]))
    report["features_rss_mb"] = peak_rss_mb()
    keeper = window.index_keeper
    keeper.set_features(window.features)  # now the index (a job, when faiss is installed)
    if keeper.job is not None:
        report["index_wait_s"] = _wait(app, lambda: keeper.job is None, spec["timeout_s"], "the index job")
        if panel.index is None:
            raise RuntimeError("the index job ended without an index")
        report["index_retrieval_s"] = retrieve(int(spec["queries"][1]))
        report["index_rss_mb"] = peak_rss_mb()
    view = EmbeddingView(window.runner)
    start = time.perf_counter()
    result = None
    for event in projection_job(spec["features"], "pca"):
        if event.kind == "done":
            result = event.data["result"]
    view.show_projection(result)
    view.resize(900, 760)
    view.show()
    app.processEvents()
    report["pca_s"] = time.perf_counter() - start
    report["pca_points"] = result["projected"]
    report["pca_drawn"] = len(result["xy"])
    report["embedding_rss_mb"] = peak_rss_mb()
    view.close()
    return report


def _extract_child(spec: dict) -> None:
    """Child: extract features of ``spec["images"]`` rows cycling over a small demo set."""
    import numpy as np
    import torch

    from dmlviewer.core.data import make_demo_data, open_dataset
    from dmlviewer.core.evaluate.extract import default_workers, extract_features
    from dmlviewer.core.models import build_model, default_config
    from dmlviewer.core.progress import run_to_end

    tmp = Path(spec["tmp"])
    demo = open_dataset(make_demo_data(tmp / "data", classes=DEMO_CLASSES, per_class=DEMO_PER_CLASS,
                                       size=DEMO_SIZE)).select_split("all")
    n = int(spec["images"])
    dataset = demo.subset(np.arange(n) % len(demo))  # paths and labels cycle together
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", image_size=DEMO_SIZE), spec["device"]).eval()
    workers = default_workers() if spec["num_workers"] is None else int(spec["num_workers"])
    out = tmp / "features.h5"
    before = peak_rss_mb()
    start = time.perf_counter()
    result = run_to_end(extract_features(model, dataset, out, batch_size=spec["batch_size"],
                                         device=spec["device"], num_workers=workers))
    seconds = time.perf_counter() - start
    if result["num_images"] != n:
        raise RuntimeError(f"extraction wrote {result['num_images']} of {n} rows ({result['skipped']} skipped)")
    report = {
        "rss_mb": peak_rss_mb(),
        **{f"rss_{k}_mb": v for k, v in rss_parts_mb().items()},
        "rss_before_mb": before,
        "worker_rss_mb": _maxrss_mb(children=True) if workers else 0.0,
        "images": n,
        "num_workers": workers,
        "seconds": seconds,
        "file_mb": out.stat().st_size / _MB,
    }
    sys.stdout.write(json.dumps(report) + "\n")


# -- measurements ----------------------------------------------------------------------------

def app_memory(images: int | None = None, dataset: bool = True, timeout_s: float = 120,
               features: bool = False) -> dict:
    """Peak RSS of a fresh app process with the window shown: with an SOP-style listing of
    ``images`` rows (None: the full 120,053) or, with ``dataset=False``, with nothing open.
    With ``features``, a feature file of the listing (:func:`write_feature_file`, 512-d) is
    opened too, retrieved from and projected (:func:`_features_in_window`); when faiss is
    installed its index is built beforehand in this process, so the window only loads it.
    Returns the child's report (``rss_mb``, ``listing_rss_mb``, ``images``, ``rows_shown``,
    ``placeholders``, ``jobs``, ``seconds``, and the features' figures)."""
    with tempfile.TemporaryDirectory(prefix="dmlviewer-bench-memory-") as tmp:
        tmp = Path(tmp)
        env = {"QT_QPA_PLATFORM": "offscreen"}
        for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
            env[name] = str(tmp / name.lower())
            Path(env[name]).mkdir()
        root = None
        spec: dict = {"timeout_s": timeout_s}
        if dataset:
            root = tmp / "sop"
            root.mkdir()
            n = write_listing(root, images)
            if features:
                from dmlviewer.core.evaluate import search
                from dmlviewer.core.progress import run_to_end
                from dmlviewer.gui.retrieval.search_index import INDEX_MIN_ROWS

                path = tmp / "features.h5"
                write_feature_file(path, root)
                if search.faiss_module() is not None and n >= INDEX_MIN_ROWS:
                    spec["index_build_s"] = run_to_end(search.build_index(path))["seconds"]
                spec.update(features=str(path), queries=[n // 3, (2 * n) // 3])
        spec["root"] = None if root is None else str(root)
        report = run_child(__name__, "_app_child", spec, env, timeout_s + 600)
        if "index_build_s" in spec:
            report["index_build_s"] = spec["index_build_s"]
        return report


def extract_memory(images: int = EXTRACT_IMAGES, device: str = "cpu", batch_size: int = 128,
                   num_workers: int | None = None, timeout_s: float = 1800) -> dict:
    """Peak RSS of a fresh process running ``extract_features`` over ``images`` rows (see the
    module docstring). Returns the child's report (``rss_mb``, ``rss_before_mb``,
    ``worker_rss_mb``, ``images``, ``num_workers``, ``seconds``, ``file_mb``)."""
    with tempfile.TemporaryDirectory(prefix="dmlviewer-bench-memory-") as tmp:
        spec = {"tmp": tmp, "images": images, "device": device, "batch_size": batch_size,
                "num_workers": num_workers}
        return run_child(__name__, "_extract_child", spec, timeout_s=timeout_s)


def run(args: argparse.Namespace | None = None) -> dict:
    """The three children (empty window, window with the full listing, extraction of
    ``EXTRACT_IMAGES`` rows, or ``EXTRACT_IMAGES_QUICK`` with ``--quick``) and their figures."""
    quick = bool(getattr(args, "quick", False))
    device = getattr(args, "device", "cpu") or "cpu"
    empty = app_memory(dataset=False)
    listing = app_memory()
    extract = extract_memory(EXTRACT_IMAGES_QUICK if quick else EXTRACT_IMAGES, device)
    large = app_memory(LARGE_IMAGES_QUICK if quick else LARGE_IMAGES, features=True, timeout_s=1200)

    def mb(report: dict, key: str) -> float | None:
        return None if report.get(key) is None else round(report[key], 1)

    return {
        "benchmark": "memory",
        "app_rss_mb": mb(listing, "rss_mb"),
        "app_empty_rss_mb": mb(empty, "rss_mb"),
        "listing_rss_mb": round(listing["rss_mb"] - empty["rss_mb"], 1),
        "listing_images": listing["images"],
        "rows_shown": listing["rows_shown"],
        "app_rss_anon_mb": mb(listing, "rss_anon_mb"),
        "app_empty_rss_anon_mb": mb(empty, "rss_anon_mb"),
        "app_rss_file_mb": mb(listing, "rss_file_mb"),
        "extract_rss_mb": mb(extract, "rss_mb"),
        "extract_rss_before_mb": mb(extract, "rss_before_mb"),
        "extract_rss_anon_mb": mb(extract, "rss_anon_mb"),
        "extract_worker_rss_mb": mb(extract, "worker_rss_mb"),
        "extract_images": extract["images"],
        "extract_seconds": round(extract["seconds"], 2),
        "images_per_s": round(extract["images"] / extract["seconds"], 1),
        "extract_file_mb": mb(extract, "file_mb"),
        "large_images": large["images"],
        "large_listing_rss_mb": mb(large, "listing_rss_mb"),
        "large_features_rss_mb": mb(large, "features_rss_mb"),
        "large_index_rss_mb": mb(large, "index_rss_mb"),
        "large_embedding_rss_mb": mb(large, "embedding_rss_mb"),
        "large_rss_mb": mb(large, "rss_mb"),
        "large_listing_open_s": round(large["seconds"], 2),
        "large_features_open_s": round(large["features_open_s"], 2),
        "large_exact_retrieval_s": round(large["exact_retrieval_s"], 3),
        "large_index_retrieval_s": None if "index_retrieval_s" not in large else round(large["index_retrieval_s"], 3),
        "large_index_build_s": None if "index_build_s" not in large else round(large["index_build_s"], 1),
        "large_index_load_s": None if "index_wait_s" not in large else round(large["index_wait_s"], 1),
        "large_pca_s": round(large["pca_s"], 2),
        "large_pca_drawn": large["pca_drawn"],
        "model": f"small_cnn@{DEMO_SIZE}",
        "device": device,
        "num_workers": extract["num_workers"],
        "rss_source": "VmHWM" if Path("/proc/self/status").exists() else "ru_maxrss",
        "machine": describe(),
    }
