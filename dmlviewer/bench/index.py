"""``bench index``: time to read a Stanford-Online-Products-sized listing (120,053 images), and
the browser on a listing of a million.

Writes ``Ebay_train.txt`` / ``Ebay_test.txt`` with the real dataset's counts (59,551 training
images of 11,318 products, 60,502 test images of 11,316 products) into a temporary folder (the
image files need not exist: indexing opens none) and times :func:`open_dataset` on it, best of
a few runs. The target is one second; ``ratio`` is seconds / target (below 1 meets it).

The same layout scaled to 1,000,000 images (188,533 products) is timed the same way (target
5 s, ``million_ratio``), then opened in the real main window (offscreen Qt, 1600 x 1000, in a
fresh process: ``browser_*``): the time ``MainWindow.open_dataset`` takes (index, browser,
filters, retrieval panel), the time of each filter and name search until the grid has been
repainted (target 200 ms), scrolling (the scroll bar moved to 100 random positions and by 100
single steps, each followed by a synchronous repaint of the grid: p50 / p95 / max frame), and
the process's peak resident memory. Every time is also given as the CPU time the process used
(``*_cpu_*``, all its threads), which a machine shared with other work inflates far less than
the wall time. ``--quick``: 200,000 images.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from dmlviewer.bench.machine import describe
from dmlviewer.core.data import open_dataset

TARGET_S = 1.0
MILLION, MILLION_QUICK, MILLION_TARGET_S = 1_000_000, 200_000, 5.0
FILTER_TARGET_MS = 200.0
SUPER_CLASSES = ("bicycle", "cabinet", "chair", "coffee_maker", "fan", "kettle",
                 "lamp", "mug", "sofa", "stapler", "table", "toaster")
SPLITS = (("Ebay_train.txt", 59_551, 11_318), ("Ebay_test.txt", 60_502, 11_316))


def write_sop_listing(root: Path, seed: int = 0, images: int | None = None) -> int:
    """Write an SOP-style listing into ``root``; returns the number of images listed. With
    ``images``, the same layout scaled to that many images (classes scaled alike: about 5.3
    images per product, as in SOP)."""
    rng = np.random.default_rng(seed)
    total = sum(n for _, n, _ in SPLITS)
    splits = SPLITS if images is None else tuple(
        (name, round(n * images / total), max(1, round(c * images / total))) for name, n, c in SPLITS)
    image_id, class_id = 1, 1
    for name, count, classes in splits:
        counts = np.full(classes, count // classes)
        counts[rng.choice(classes, count - counts.sum(), replace=False)] += 1
        lines = ["image_id class_id super_class_id path"]
        for n in counts:
            sc = int(rng.integers(len(SUPER_CLASSES)))
            product = int(rng.integers(10**11, 10**12))
            for k in range(n):
                lines.append(f"{image_id} {class_id} {sc + 1} {SUPER_CLASSES[sc]}_final/{product}_{k}.JPG")
                image_id += 1
            class_id += 1
        (root / name).write_text("\n".join(lines) + "\n")
    return image_id - 1


def _time_open(root: Path, repeats: int, expected: int, cpu: list | None = None) -> list[float]:
    """Wall seconds of each of ``repeats`` openings (their CPU seconds appended to ``cpu``)."""
    times = []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        dataset = open_dataset(root)
        times.append(time.perf_counter() - start)
        if cpu is not None:
            cpu.append(time.process_time() - start_cpu)
    if len(dataset) != expected or dataset.format != "sop":
        raise RuntimeError(f"index benchmark read {len(dataset)} {dataset.format} images, expected {expected} sop")
    return times


def _browser_child(spec: dict) -> None:
    """Child: the main window on ``spec["root"]``; filter, search and scroll timings."""
    import json
    import sys

    from dmlviewer.bench.child import peak_rss_mb
    from dmlviewer.gui.window.app import create_app
    from dmlviewer.gui.window.main_window import MainWindow

    app = create_app()
    window = MainWindow()
    window.resize(1600, 1000)
    window.show()
    app.processEvents()
    start, start_cpu = time.perf_counter(), time.process_time()
    if not window.open_dataset(spec["root"]):
        raise RuntimeError("open_dataset failed")
    app.processEvents()
    report: dict = {"open_s": time.perf_counter() - start, "open_cpu_s": time.process_time() - start_cpu}
    browser = window.browser
    view = browser.view

    cpu: dict[str, float] = {}

    def timed(action, name: str = "") -> float:
        start, start_cpu = time.perf_counter(), time.process_time()
        action()
        browser._apply_filter()  # what the search field's timer does after typing stops
        app.processEvents()
        view.viewport().repaint()
        cpu[name] = (time.process_time() - start_cpu) * 1000
        return (time.perf_counter() - start) * 1000

    filters = {
        "split_test": lambda: browser.split_combo.setCurrentIndex(browser.split_combo.findData("test")),
        "class": lambda: browser.set_class_filter(int(window.dataset.labels[len(window.dataset) // 2])),
        "all": lambda: (browser.split_combo.setCurrentIndex(0), browser.set_class_filter(None)),
    }
    report["filter_ms"] = {name: timed(action, name) for name, action in filters.items()}
    searches = {}
    for text in ("1234", "_3.jpg", "chair", "00000000"):
        searches[text] = timed(lambda t=text: browser.search.setText(t), text)
        searches[text + ":rows"] = browser.model.count()
    report["search_ms"] = {k: v for k, v in searches.items() if not k.endswith(":rows")}
    report["search_rows"] = {k[:-5]: v for k, v in searches.items() if k.endswith(":rows")}
    report["filter_cpu_ms"] = dict(cpu)
    timed(lambda: browser.search.setText(""))
    bar = view.verticalScrollBar()
    rng = np.random.default_rng(0)
    frames = []
    for value in rng.integers(0, bar.maximum() + 1, size=100):
        start = time.perf_counter()
        bar.setValue(int(value))
        view.viewport().repaint()
        frames.append((time.perf_counter() - start) * 1000)
    for _ in range(100):
        start = time.perf_counter()
        bar.setValue(bar.value() + bar.singleStep())
        view.viewport().repaint()
        frames.append((time.perf_counter() - start) * 1000)
    report.update({"scroll_p50_ms": float(np.median(frames)), "scroll_p95_ms": float(np.percentile(frames, 95)),
                   "scroll_max_ms": float(np.max(frames)), "images": len(window.dataset),
                   "columns": browser.model.columns, "rss_mb": peak_rss_mb()})
    window.shutdown()
    sys.stdout.write(json.dumps(report) + "\n")


def browser_timings(root: Path, timeout_s: float = 600) -> dict:
    """Run :func:`_browser_child` on the listing in ``root`` (own settings folders)."""
    import os

    from dmlviewer.bench.child import run_child

    env = {"QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen")}
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        env[name] = str(root.parent / name.lower())
        Path(env[name]).mkdir(exist_ok=True)
    return run_child(__name__, "_browser_child", {"root": str(root)}, env, timeout_s)


def run(args: argparse.Namespace | None = None) -> dict:
    quick = getattr(args, "quick", False)
    repeats = 2 if quick else 5
    with tempfile.TemporaryDirectory(prefix="dmlviewer-bench-index-") as tmp:
        root = Path(tmp) / "sop"
        root.mkdir()
        n = write_sop_listing(root)
        times = _time_open(root, repeats, n)
        big = Path(tmp) / "sop-million"
        big.mkdir()
        million = write_sop_listing(big, images=MILLION_QUICK if quick else MILLION)
        million_cpu: list[float] = []
        million_times = _time_open(big, 3, million, million_cpu)
        browser = browser_timings(big)
    best = min(times)
    worst_filter = max([*browser["filter_ms"].values(), *browser["search_ms"].values()])
    return {
        "benchmark": "index",
        "images": n,
        "seconds": best,
        "median_seconds": float(np.median(times)),
        "target_s": TARGET_S,
        "ratio": best / TARGET_S,
        "million_images": million,
        "million_seconds": min(million_times),
        "million_target_s": MILLION_TARGET_S,
        "million_ratio": min(million_times) / MILLION_TARGET_S,
        "million_cpu_seconds": min(million_cpu),
        "browser_open_s": round(browser["open_s"], 3),
        "browser_open_cpu_s": round(browser["open_cpu_s"], 3),
        "browser_filter_cpu_ms": {k: round(v, 1) for k, v in browser["filter_cpu_ms"].items()},
        "browser_filter_ms": {k: round(v, 1) for k, v in browser["filter_ms"].items()},
        "browser_search_ms": {k: round(v, 1) for k, v in browser["search_ms"].items()},
        "browser_search_rows": browser["search_rows"],
        "browser_filter_worst_ms": round(worst_filter, 1),
        "browser_filter_ratio": round(worst_filter / FILTER_TARGET_MS, 3),
        "browser_scroll_p50_ms": round(browser["scroll_p50_ms"], 2),
        "browser_scroll_p95_ms": round(browser["scroll_p95_ms"], 2),
        "browser_scroll_max_ms": round(browser["scroll_max_ms"], 2),
        "browser_columns": browser["columns"],
        "browser_rss_mb": round(browser["rss_mb"], 1),
        "machine": describe(),
    }
