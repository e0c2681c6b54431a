"""Core part of ``bench hover``: one hover event of :class:`~dmlviewer.core.explain.hover.HoverRenderer`
(partial map at a point, bilinear upsampling to the image size, 256-entry RGBA colour map) on one
CPU core, for 7x7, 14x14 and 28x28 feature grids. Targets: p50 under 1 ms for 7x7 and 14x14,
under 3 ms for 28x28.

``per_row``: what each model row of the pair view costs per event on a 500 x 375 photograph
(:meth:`~dmlviewer.core.explain.hover.HoverRenderer.hover` and the look-up of its indices into a
uint32 buffer through :func:`~dmlviewer.core.explain.hover.take_pairs`) against the plain path it
replaced (float clip and cast, ``np.take`` of a 256-entry table), alternated in batches in one run:
medians of the per-event means and ``ratio`` = new / plain, for 7x7, 14x14 and 37x37 grids.
"""

from __future__ import annotations

import time
from typing import Any

import cv2
import numpy as np

from dmlviewer.core.explain.hover import HoverRenderer, pair_table, premultiplied_table, take_pairs

TARGET_MS = {7: 1.0, 14: 1.0, 28: 3.0}


def measure_hover(grid: int, image_size: int = 224, events: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Median and 95th percentile of one render call over ``events`` random points."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(grid * grid, grid * grid)).astype(np.float32)
    shape = (image_size, image_size)
    renderer = HoverRenderer(rows, shape, (grid, grid), shape, (grid, grid))
    points = rng.uniform(0, image_size - 1, size=(events + 50, 2))
    for x, y in points[:50]:  # warm-up: caches, lazy OpenCV initialisation
        renderer.render(x, y)
    times = np.empty(events)
    clock = time.perf_counter
    for k, (x, y) in enumerate(points[50:]):
        t0 = clock()
        renderer.render(x, y)
        times[k] = clock() - t0
    p50, p95 = np.percentile(times * 1e3, [50, 95])
    return {
        "grid": f"{grid}x{grid}",
        "image": f"{image_size}x{image_size}",
        "p50_ms": round(float(p50), 4),
        "p95_ms": round(float(p95), 4),
        "events": events,
        "target_p50_ms": TARGET_MS.get(grid),
        "meets_target": bool(p50 < TARGET_MS.get(grid, float("inf"))),
    }


def measure_row(grid: int, shape: tuple[int, int] = (375, 500), rounds: int = 30, batch: int = 40,
                seed: int = 0) -> dict[str, Any]:
    """One model row's hover work per event, new against plain (see the module's docstring), each
    on its own renderer (so neither reuses the other's blend), the same points for both."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(grid * grid, grid * grid)).astype(np.float32)
    new, plain = (HoverRenderer(rows, shape, (grid, grid), shape, (grid, grid)) for _ in range(2))
    table = premultiplied_table(new.lut, 0.6)
    pairs, out = pair_table(table), np.empty(shape, np.uint32)
    scaled, up = np.empty((grid, grid), np.float32), np.empty(shape, np.float32)
    index = np.empty(shape, np.uint8)

    def new_row(x: float, y: float) -> None:
        take_pairs(pairs, new.hover(x, y).index, out)

    def plain_row(x: float, y: float) -> None:
        g = plain.grid_map(x, y)
        np.multiply(g, 255.0 / (float(g.max()) or 1.0), out=scaled)
        cv2.resize(scaled, (shape[1], shape[0]), dst=up, interpolation=cv2.INTER_LINEAR)
        np.clip(up, 0.0, 255.0, out=up)
        np.copyto(index, up, casting="unsafe")
        np.take(table, index, out=out, mode="clip")

    points = rng.uniform(0, min(shape) - 1, size=(rounds + 1, batch, 2))
    times: dict[str, list[float]] = {"new": [], "plain": []}
    clock = time.perf_counter
    for k, batch_points in enumerate(points):
        for name, row in (("plain", plain_row), ("new", new_row))[::1 if k % 2 else -1]:
            t0 = clock()
            for x, y in batch_points:
                row(x, y)
            if k:  # the first round warms up
                times[name].append((clock() - t0) / batch * 1e3)
    new_ms, plain_ms = float(np.median(times["new"])), float(np.median(times["plain"]))
    return {"grid": f"{grid}x{grid}", "image": f"{shape[1]}x{shape[0]}", "plain_ms": round(plain_ms, 4),
            "new_ms": round(new_ms, 4), "ratio": round(new_ms / plain_ms, 3)}


def run_core(events: int = 2000, grids: tuple[int, ...] = (7, 14, 28), image_size: int = 224) -> dict[str, Any]:
    """All grid sizes on one thread; top-level ``p50_ms``/``p95_ms`` are the 14x14 figures;
    ``per_row``: :func:`measure_row` for 7x7, 14x14 and 37x37."""
    import torch

    threads_torch, threads_cv = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    try:
        per_grid = [measure_hover(g, image_size, events) for g in grids]
        per_row = [measure_row(g, rounds=max(10, events // 60)) for g in (7, 14, 37)]
    finally:
        torch.set_num_threads(threads_torch)
        cv2.setNumThreads(threads_cv)
    main = next((r for r in per_grid if r["grid"] == "14x14"), per_grid[0])
    return {
        "p50_ms": main["p50_ms"],
        "p95_ms": main["p95_ms"],
        "events": events,
        "threads": 1,
        "grids": per_grid,
        "per_row": per_row,
    }
