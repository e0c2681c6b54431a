"""Core part of ``bench hover``: one hover event of :class:`~dmlviewer.core.explain.hover.HoverRenderer`
(partial map at a point, bilinear upsampling to the image size, 256-entry RGBA colour map) on one
CPU core, for 7x7, 14x14 and 28x28 feature grids. Targets: p50 under 1 ms for 7x7 and 14x14,
under 3 ms for 28x28.
"""

from __future__ import annotations

import time
from typing import Any

import cv2
import numpy as np

from dmlviewer.core.explain.hover import HoverRenderer

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


def run_core(events: int = 2000, grids: tuple[int, ...] = (7, 14, 28), image_size: int = 224) -> dict[str, Any]:
    """All grid sizes on one thread; top-level ``p50_ms``/``p95_ms`` are the 14x14 figures."""
    import torch

    threads_torch, threads_cv = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    try:
        per_grid = [measure_hover(g, image_size, events) for g in grids]
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
    }
