"""``bench hover``: latency of one hover in the real pair view, from mouse event to repainted overlay.

The pair view (two panes, toolbar, colour bars) is shown at 1400 x 800 (offscreen when there is
no display) with a small_cnn model (random weights) on two 500 x 375 photographs (the size of
a CUB image). After the pair is prepared, real mouse-move events are sent to the query pane's
viewport (``QTest.mouseMove``) along a path over the image. One event is timed from before its
dispatch until every row's reference pane holds the new partial map and every viewport's
pending paint is done (the window's update requests sent synchronously: each row's overlay
and read-out, each query pane's crosshair strips, only the areas that changed, as the event
loop paints them; issue 40, which had the whole reference viewports repainted by
``viewport().repaint()``): event filter, coordinate mapping, the core's hover renderer (partial
map, upsampling, colour indices), the pane's table look-up, the item updates and the paints. The
move throttle is flushed inside the measurement (events are sent back to back, faster than a
mouse, so without the flush most would be coalesced away); the status line is not: it keeps the
app's pace (at most one every ``STATUS_INTERVAL_MS``, the first of a burst at once), so most
events are timed without wording it, as when a real mouse moves faster than that.

Reported: ``p50_ms``, ``p95_ms``, ``events`` (events that changed the overlay), ``target_ms``
(8 ms at the 95th percentile), ``target_ratio`` = p95 / target, and a baseline measured in the
same run: ``baseline_ms``, the median time of recomputing the pair's explanation (what a viewer
without the precomputed tensor pays per hover), with ``ratio`` = p50 / baseline. ``core``: the
renderer alone (:mod:`dmlviewer.bench.hover_core`). ``largest``: the same measurement at the
pair view's largest *Resolution* choice for these photographs (``input_size``, a finer grid, so a
larger point-to-point tensor per hover), its baseline recomputing the explanation at that size;
``largest_ratio`` and ``largest_p95_ms`` are printed with the others. ``two_models``: the same
measurement with a second model (B, other random weights) compared in the pair view (issue 24):
one event then draws both models' partial maps and both rows' crosshairs (in one view per side
since issue 40, so each side's viewport paints once); it is measured interleaved with the
one-model row (:func:`measure_rows`: both views made first, then ten turns each), so that a burst
of load on a shared machine falls on both alike. Its ``p50_ms``/``p95_ms`` are also given as
``two_models_p50_ms``/``two_models_p95_ms`` beside the one-model figures, and
``second_model_p50``/``second_model_p95`` = (two-model − one-model) / one-model at each
percentile, the second row's cost as a share of the first's (issue 40: at most 0.5). ``opengl``: one model and two models again with every pane drawn through an
OpenGL viewport (``gui/pair/gl_viewport.py``; measured right after the raster rows), with
``p50_ratio``, ``p95_ratio``, ``two_models_p50_ratio``, ``two_models_p95_ratio`` = OpenGL / raster
(below 1: OpenGL faster), or ``available: false`` and the ``reason`` where Qt has no OpenGL (the
offscreen platform). ``vit_s16_256`` and ``dinov2_reg4_518``: a timm ViT-S/16 at
256 px (16x16 tokens) and DINOv2 ViT-S/14 with registers at 518 px (37x37), when timm is
installed. ``gc``: a full garbage collection in the same process before and after the app's
start-up freeze (:func:`gc_pause`; the collector runs between hovers, so a long one is a hitch
the per-event times do not show). ``busy``: one model and two models again while a training job runs in the same
process (:func:`training_job`: small_cnn forward and backward passes on random batches, submitted
to the app's :class:`~dmlviewer.gui.jobs.runner.JobRunner` as a thread job, so it runs at the
priority and with the torch threads the app gives background work); its ``steps`` say how much
training went on during the measurement, and its ``second_model_p50``/``second_model_p95`` the
second row's cost under that load.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

TARGET_P95_MS = 8.0
IMAGE_SHAPE = (375, 500)


def _photo(seed: int) -> np.ndarray:
    """A smooth synthetic photograph (content does not change the cost of a hover)."""
    rng = np.random.default_rng(seed)
    h, w = IMAGE_SHAPE
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    image = np.empty((h, w, 3), dtype=np.float32)
    for c in range(3):
        fx, fy, phase = rng.uniform(0.005, 0.03, 2).tolist() + [rng.uniform(0, 6.3)]
        image[..., c] = 127 + 100 * np.sin(fx * x + phase) * np.cos(fy * y)
    return image.clip(0, 255).astype(np.uint8)


def _path(n: int, shape: tuple[int, int]) -> np.ndarray:
    """``n`` distinct points of a Lissajous curve inside an ``H x W`` image (x, y)."""
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    h, w = shape
    return np.stack([(0.5 + 0.45 * np.sin(3 * t)) * (w - 1), (0.5 + 0.45 * np.sin(2 * t + 0.5)) * (h - 1)], 1)


def timm_vit(name: str, image_size: int):
    """A timm vision transformer with random weights (no download) opened through the Python door,
    or None without timm: the token-grid rows of ``bench hover`` (16x16 for ViT-S/16 at 256 px,
    37x37 for DINOv2 with registers at 518 px)."""
    try:
        import timm
    except ImportError:
        return None
    import torch

    from dmlviewer.core.models import open_model

    torch.manual_seed(0)
    net = timm.create_model(name, pretrained=False, num_classes=0, img_size=image_size)
    model, _ = open_model(net, size=image_size)
    return model


def training_job(cancel, steps: list, batch: int = 32, size: int = 128):
    """A job generator that trains small_cnn on random batches until cancelled (the busy
    background of ``bench hover``'s ``busy`` rows); appends each finished step to ``steps``."""
    import torch

    from dmlviewer.core.models import build_model, default_config
    from dmlviewer.core.progress import Cancelled, Progress

    torch.manual_seed(2)
    model = build_model(default_config(backbone="small_cnn", dim=128, image_size=size)).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    images = torch.randn(batch, 3, size, size)
    while True:
        if cancel.cancelled:
            raise Cancelled()
        optimizer.zero_grad()
        model(images).embedding_raw.pow(2).mean().backward()
        optimizer.step()
        steps.append(time.perf_counter())
        yield Progress("step", len(steps), 0)


def busy_rows(events: int) -> dict[str, Any]:
    """One model and two models timed while :func:`training_job` runs in a job thread."""
    from dmlviewer.gui.jobs.runner import JobRunner
    from dmlviewer.gui.window.app import create_app

    app = create_app()
    runner = JobRunner()
    steps: list[float] = []
    runner.submit("bench training", lambda cancel: training_job(cancel, steps))
    deadline = time.monotonic() + 120
    while len(steps) < 2 and time.monotonic() < deadline:  # training is under way
        app.processEvents()
        time.sleep(0.01)
    try:
        start = len(steps)
        one, two = measure_rows(events=events)
        trained = len(steps) - start
    finally:
        runner.shutdown(30)
    return {**pair_row(one, two), "steps": trained}


def second_model_cost(one: dict[str, Any], two: dict[str, Any]) -> dict[str, float]:
    """What the second model row adds, as a share of one model's time, from one run (issue 40:
    "a second model costs at most half of the first"): (two-model − one-model) / one-model at
    the 50th and the 95th percentile."""
    return {f"second_model_{q}": round((two[f"{q}_ms"] - one[f"{q}_ms"]) / one[f"{q}_ms"], 3) for q in ("p50", "p95")}


def pair_row(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """One model's and two models' percentiles side by side, with the second model's cost."""
    return {"p50_ms": one["p50_ms"], "p95_ms": one["p95_ms"], "two_models_p50_ms": two["p50_ms"],
            "two_models_p95_ms": two["p95_ms"], **second_model_cost(one, two), "one_model": one, "two_models": two}


def opengl_rows(events: int, one: dict[str, Any] | None = None, two: dict[str, Any] | None = None) -> dict[str, Any]:
    """One model and two models with every pane drawn through an OpenGL viewport, or why not
    (``available: false``, ``reason``). ``one``/``two``: the raster rows of the same run, for
    the ratios OpenGL / raster (below 1: OpenGL faster)."""
    from dmlviewer.gui.pair.gl_viewport import opengl_problem
    from dmlviewer.gui.window.app import create_app

    create_app()
    problem = opengl_problem()
    if problem is not None:
        return {"available": False, "reason": problem}
    gl_one, gl_two = measure_rows(events=events, opengl=True)
    row = {"available": True, **pair_row(gl_one, gl_two)}
    for name, raster, gl in (("", one, gl_one), ("two_models_", two, gl_two)):
        if raster is not None:
            for q in ("p50", "p95"):
                row[f"{name}{q}_ratio"] = round(gl[f"{q}_ms"] / raster[f"{q}_ms"], 3)
    return row


def _ready_view(image_size: int = 224, largest: bool = False, compare: bool = False, model: Any = None,
                opengl: bool = False, host: Any = None):
    """A shown pair view (1400 x 800) with the pair prepared by a small CNN (or ``model``), and
    a second model's row with ``compare``: ``(app, view, model, images)``. ``host``: a shown
    ``QStackedWidget`` of that size to put the view in (shown when it is the current one)."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import torch

    from dmlviewer.core.models import build_model, default_config
    from dmlviewer.gui.window.app import create_app
    from dmlviewer.gui.pair.pair_view import PairImages, PairView

    app = create_app()
    torch.manual_seed(0)
    if model is None:
        model = build_model(default_config(backbone="small_cnn", dim=128, image_size=image_size)).eval()
    images = PairImages(_photo(1), _photo(2), "query", "reference")
    view = PairView()
    if host is None:
        view.resize(1400, 800)
        view.show()
    else:
        host.addWidget(view)
        host.setCurrentWidget(view)
    if opengl and not view.set_opengl(True):
        from dmlviewer.bench import BenchError
        from dmlviewer.gui.pair.gl_viewport import opengl_problem

        raise BenchError(f"no OpenGL viewport: {opengl_problem()}")
    view.set_model(model, "cpu")
    view.set_pair(images)
    if largest:
        view.set_input_size(view.size_combo.itemData(view.size_combo.count() - 1))
    if compare:
        torch.manual_seed(1)
        view.set_compare_model(build_model(default_config(backbone="small_cnn", dim=128, image_size=image_size)).eval(),
                               "cpu", "B")
    deadline = time.monotonic() + 120
    while any(row.state == "preparing" for row in view.rows) and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.005)
    states = [row.state for row in view.rows]
    if any(state != "ready" for state in states):
        raise RuntimeError(f"the pair was not prepared (states of the rows: {', '.join(states)})")
    for _ in range(5):
        app.processEvents()
    return app, view, model, images


def _hover_times(view, points: np.ndarray, warmup: int = 0, last=None) -> tuple[list[float], int, Any]:
    """Send a real mouse move to each of ``points`` over the query pane and time each from
    before its dispatch to the end of the window's pending paints (the first ``warmup`` are not
    kept); returns the times (ms), how many changed every row's overlay, and the last point drawn."""
    from PySide6.QtCore import QCoreApplication, QEvent, QPointF
    from PySide6.QtTest import QTest

    query = view.panes[0]
    viewport = query.graphics.viewport()
    times, changed = [], 0
    clock = time.perf_counter
    for k, (x, y) in enumerate(points):
        pos = query.graphics.mapFromScene(query.view.mapViewToScene(QPointF(x + 0.5, y + 0.5)))
        t0 = clock()
        QTest.mouseMove(viewport, pos)
        view.link.flush(status=False)
        QCoreApplication.sendPostedEvents(None, QEvent.UpdateRequest)  # every pending paint, now
        t1 = clock()
        hover = view.link.hover
        if k >= warmup:
            times.append((t1 - t0) * 1e3)
            drawn = all(row.panes[1].overlay_shown for row in view.rows)
            if hover is not None and hover != last and drawn:
                changed += 1
        last = hover
    return times, changed, last


def _row(app, view, model, images, times: list[float], changed: int, opengl: bool) -> dict[str, Any]:
    """The figures of one measured view, with the baseline (recomputing the explanation per
    hover, median of 5) measured now; closes the view."""
    from dmlviewer.core.explain.pair import explain_pair

    size = view.input_size
    base = []
    for _ in range(5):
        t0 = time.perf_counter()
        explain_pair(model, images.query, images.reference, size=size)
        base.append((time.perf_counter() - t0) * 1e3)
    models = len(view.rows)
    e = view.explanation
    view.shutdown()
    view.close()
    view.deleteLater()
    app.processEvents()
    p50, p95 = np.percentile(times, [50, 95])
    baseline = float(np.median(base))
    return {
        "p50_ms": round(float(p50), 3),
        "p95_ms": round(float(p95), 3),
        "events": changed,
        "sent": len(times),
        "target_ms": TARGET_P95_MS,
        "target_ratio": round(float(p95) / TARGET_P95_MS, 3),
        "meets_target": bool(p95 < TARGET_P95_MS),
        "baseline_ms": round(baseline, 2),
        "ratio": round(float(p50) / baseline, 5),
        "image": f"{IMAGE_SHAPE[1]}x{IMAGE_SHAPE[0]}",
        "grid": f"{e.grid_query[0]}x{e.grid_query[1]}",
        "input_size": size,
        "view": "1400x800",
        "models": models,
        "viewport": "opengl" if opengl else "raster",
        "platform": app.platformName(),
    }


def measure(events: int = 1000, image_size: int = 224, warmup: int = 30, largest: bool = False,
            compare: bool = False, model: Any = None, opengl: bool = False) -> dict[str, Any]:
    """Time ``events`` hovers in a shown :class:`~dmlviewer.gui.pair.pair_view.PairView` (``largest``:
    at its largest Resolution choice instead of the model's size; ``compare``: with a second
    model compared, both rows drawn per event; ``model``: this model instead of a small CNN;
    ``opengl``: every pane drawn through an OpenGL viewport, an error where there is none)."""
    app, view, model, images = _ready_view(image_size, largest, compare, model, opengl)
    times, changed, _ = _hover_times(view, _path(events + warmup, IMAGE_SHAPE), warmup)
    return _row(app, view, model, images, times, changed, opengl)


def measure_rows(events: int = 1000, warmup: int = 30, chunks: int = 10,
                 opengl: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """One model and two models timed as :func:`measure` does, interleaved: both views are
    made first, then ``chunks`` turns of ``events / chunks`` moves each, one view then the
    other, so that a burst of load on a shared machine falls on both alike and their ratio
    (:func:`second_model_cost`) is measured in one stretch of time."""
    from PySide6.QtWidgets import QStackedWidget

    from dmlviewer.gui.window.app import create_app

    app = create_app()
    host = QStackedWidget()  # one window, the view of the turn on top, so that the moves reach it
    host.resize(1400, 800)
    host.show()
    one = _ready_view(opengl=opengl, host=host)
    two = _ready_view(compare=True, opengl=opengl, host=host)
    points = _path(events + warmup, IMAGE_SHAPE)
    runs = [[[], 0, None], [[], 0, None]]

    def turn(run, view, part) -> None:
        host.setCurrentWidget(view)
        for _ in range(5):  # shown again: laid out and painted before the first timed move
            app.processEvents()
        times, changed, run[2] = _hover_times(view, part, last=run[2])
        run[0] += times
        run[1] += changed

    for run, (_, view, _, _) in zip(runs, (one, two)):  # the same warm-up for each, not kept
        turn([[], 0, None], view, points[:warmup])
    for part in np.array_split(points[warmup:], chunks):
        for run, (_, view, _, _) in zip(runs, (one, two)):
            turn(run, view, part)
    rows = tuple(_row(*ready, run[0], run[1], opengl) for ready, run in zip((one, two), runs))
    host.close()
    host.deleteLater()
    return rows


def gc_pause(repeats: int = 5) -> dict[str, Any]:
    """A full garbage collection in this process (torch, Qt and the pair view loaded), as the
    app's GUI-thread collector runs it between two hovers, before and after the start-up freeze
    (:func:`dmlviewer.gui.window.collector.freeze_startup`), median of ``repeats`` each; the
    freeze is undone afterwards."""
    import gc

    def median_ms() -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            gc.collect()
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times))

    objects = len(gc.get_objects())
    full = median_ms()
    gc.freeze()
    try:
        frozen = median_ms()
    finally:
        gc.unfreeze()
    return {"objects": objects, "full_ms": full, "after_freeze_ms": frozen,
            "ratio": frozen / full if full else float("nan")}


def run(args) -> dict[str, Any]:
    """The ``bench hover`` entry point (``--quick``: fewer events)."""
    from dmlviewer.bench.hover_core import run_core
    from dmlviewer.bench.machine import describe

    quick = bool(getattr(args, "quick", False))
    n = 200 if quick else 1000
    result, two = measure_rows(events=n)
    result["two_models"] = two
    result["two_models_p50_ms"], result["two_models_p95_ms"] = two["p50_ms"], two["p95_ms"]
    result.update(second_model_cost(result, two))
    opengl = opengl_rows(n, result, two)  # right after the raster rows it is compared with
    result["opengl"] = opengl
    if not opengl["available"]:
        result["opengl_viewport"] = f"unavailable ({opengl['reason']})"
    for key in ("p50_ratio", "p95_ratio", "two_models_p95_ratio"):
        if key in opengl:
            result[f"opengl_{key}"] = opengl[key]
    largest = measure(events=n, largest=True)
    result["largest"] = largest
    result["largest_ratio"], result["largest_p95_ms"] = largest["ratio"], largest["p95_ms"]
    for key, name, size in (("vit_s16_256", "vit_small_patch16_224", 256),
                            ("dinov2_reg4_518", "vit_small_patch14_reg4_dinov2", 518)):
        vit = timm_vit(name, size)
        if vit is not None:  # the token grids of issue 22: 16x16 and 37x37
            row = measure(events=n, image_size=size, model=vit)
            result[key] = row
            result[f"{key}_p95_ms"] = row["p95_ms"]
    busy = busy_rows(events=n)
    result["busy"] = busy
    result["busy_p95_ms"], result["busy_two_models_p95_ms"] = busy["p95_ms"], busy["two_models_p95_ms"]
    result["busy_second_model_p95"] = busy["second_model_p95"]
    result["core"] = run_core(events=300 if quick else 2000)
    result["gc"] = gc_pause()
    result["gc_full_ms"], result["gc_after_freeze_ms"] = result["gc"]["full_ms"], result["gc"]["after_freeze_ms"]
    result["machine"] = describe()
    return result
