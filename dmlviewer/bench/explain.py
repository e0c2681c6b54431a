"""``bench explain``: the cost of preparing a pair's explanation, and the point-to-point tensor
as one matrix product against the seed's four nested loops.

- ``prepare``: :func:`~dmlviewer.core.explain.explain_pair` (image to tensor, both forward passes,
  decomposition, the point-to-point tensor and its transpose for hovering, bias terms, the
  Decomposition and Decomposition+Bias maps of both images at full size; no Grad-CAM) against
  the two bare forward passes of the same images (one batch, tensors already made): ``ratio`` =
  prepare / bare (target at most 1.3). ``ratio_with_preprocessing`` compares against resizing
  and normalizing the two images (``core.data.to_tensor``) plus the forward passes, which any
  viewer pays too. small_cnn on 500x375 and 224x224 images, A-grouping, resnet50 (random
  weights), a live torchvision resnet50 module through the Python door (the Jacobian rule; its
  bare forward is the module itself), and ViT-S/16 with the class-token head (linearized with
  frozen attention, LayerNorm and GELU gates; target at most 1.5); the three timings of a row
  are interleaved so that load from other processes hits all alike, on one torch thread (on a
  shared machine, multi-threaded kernels stall on busy cores).
- ``tensor``: the 14x14 x 14x14 tensor from the contributions by one matrix product against
  four nested Python loops of dot products (the seed's demo code): ``loop_ms``, ``matmul_ms``,
  ``speedup``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import cv2
import numpy as np
import torch

from dmlviewer.bench.machine import describe


def _median_ms(fn: Callable[[], Any], repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def _interleaved(fns: dict[str, Callable[[], Any]], repeat: int, warmup: int = 2) -> dict[str, list[float]]:
    """Run the functions in turn ``repeat`` times; milliseconds per function."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return times


def live_resnet50() -> torch.nn.Module:
    """A user's own module through the Python door: torchvision resnet50 with ``fc`` replaced by
    a 512-d embedding layer, decomposed by the Jacobian rule (exact here: GAP + Linear)."""
    import torchvision

    from dmlviewer.core.models import open_model

    net = torchvision.models.resnet50(num_classes=512).eval()
    return open_model(net, feature_layer="layer4")[0]


def measure_prepare(spec: dict | tuple[str, Callable[[], torch.nn.Module]], image_shape: tuple[int, int],
                    device: str = "cpu", repeat: int = 15, size: int | None = None) -> dict:
    """Median times of explain_pair and of the bare forward passes for one model: a config for
    ``build_model``, or ``(label, factory)``. The bare forward is the network the user has (for
    a live module, the module itself, without dmlviewer's hooks). ``size``: input size override
    (the pair view's resolution choice)."""
    from dmlviewer.core.explain import explain_pair
    from dmlviewer.core.models import build_model, default_config

    torch.manual_seed(0)
    if isinstance(spec, dict):
        model = build_model(default_config(**spec), device).eval()
        label = f"{spec['backbone']}/{spec.get('pooling', 'gap')}/{spec.get('grouping', 'none')}"
    else:
        label, factory = spec
        model = factory().to(device).eval()
    network = getattr(model, "net", model) if type(model).__name__ == "ModuleModel" else model
    preprocess = model.preprocess
    size = int(size or preprocess.size)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (*image_shape, 3), dtype=np.uint8) for _ in range(2)]
    dev = torch.device(device)
    batch = torch.stack([preprocess(im, size) for im in images]).to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def bare() -> None:
        with torch.no_grad():
            network(batch)
        sync()

    def with_preprocessing() -> None:
        x = torch.stack([preprocess(im, size) for im in images]).to(dev)
        with torch.no_grad():
            network(x)
        sync()

    def prepare() -> None:
        explain_pair(model, images[0], images[1], device, size=size)
        sync()

    # interleaved, so that load from other processes hits all three alike
    times = _interleaved({"bare": bare, "pre": with_preprocessing, "prep": prepare}, repeat)
    bare_ms, pre_ms, prep_ms = (float(np.median(times[k])) for k in ("bare", "pre", "prep"))
    pair = explain_pair(model, images[0], images[1], device, size=size)
    grid = pair.grid_query
    return {
        "model": label,
        "rule": pair.rule,
        "input": size,
        "image": f"{image_shape[1]}x{image_shape[0]}",
        "grid": f"{grid[0]}x{grid[1]}",
        "bare_forward_ms": round(bare_ms, 3),
        "forward_with_preprocessing_ms": round(pre_ms, 3),
        "prepare_ms": round(prep_ms, 3),
        "ratio": round(prep_ms / bare_ms, 3),
        "ratio_with_preprocessing": round(prep_ms / pre_ms, 3),
        "ratio_of_minimums": round(min(times["prep"]) / min(times["bare"]), 3),
        "ratio_with_preprocessing_of_minimums": round(min(times["prep"]) / min(times["pre"]), 3),
    }


def reference_loops(cq: np.ndarray, cr: np.ndarray, z: float) -> np.ndarray:
    """The seed's demo computation: four nested loops over (i, j, x, y), one dot product each.
    ``cq``: hq x wq x D, ``cr``: hr x wr x D."""
    hq, wq, _ = cq.shape
    hr, wr, _ = cr.shape
    out = np.zeros((hq, wq, hr, wr), dtype=np.float32)
    for i in range(hq):
        for j in range(wq):
            for x in range(hr):
                for y in range(wr):
                    out[i, j, x, y] = np.dot(cq[i, j], cr[x, y]) / z
    return out


def measure_tensor(grid: int = 14, dim: int = 512, repeat: int = 3) -> dict:
    """Four nested loops against one matrix product for a ``grid x grid`` pair of ``dim``-d
    contributions (checked equal)."""
    from dmlviewer.core.explain.pairwise import pair_terms

    rng = np.random.default_rng(0)
    cq = rng.normal(size=(grid * grid, dim)).astype(np.float32)
    cr = rng.normal(size=(grid * grid, dim)).astype(np.float32)
    bq, br = np.zeros(dim, np.float32), np.zeros(dim, np.float32)
    z = float(np.linalg.norm(cq.sum(0)) * np.linalg.norm(cr.sum(0)))
    tq, tr, tbq, tbr = (torch.from_numpy(a) for a in (cq, cr, bq, br))
    loop_ms = _median_ms(lambda: reference_loops(cq.reshape(grid, grid, dim), cr.reshape(grid, grid, dim), z), repeat, 1)
    matmul_ms = _median_ms(lambda: pair_terms(tq, tbq, tr, tbr), 20 * repeat)
    ours = pair_terms(tq, tbq, tr, tbr).point_to_point.numpy().reshape(grid, grid, grid, grid)
    ref = reference_loops(cq.reshape(grid, grid, dim), cr.reshape(grid, grid, dim), z)
    return {
        "grid": f"{grid}x{grid}",
        "dim": dim,
        "loop_ms": round(loop_ms, 2),
        "matmul_ms": round(matmul_ms, 3),
        "speedup": round(loop_ms / matmul_ms, 1),
        "max_abs_difference": float(np.abs(ours - ref).max()),
    }


def _has_timm() -> bool:
    try:
        import timm  # noqa: F401
    except ImportError:
        return False
    return True


def run(args=None) -> dict:
    """Both measurements; ``ratio`` is the worst prepare / bare-forward ratio over the models."""
    quick = bool(getattr(args, "quick", False))
    device = getattr(args, "device", "cpu") or "cpu"
    small = dict(backbone="small_cnn", pooling="gap", dim=128, image_size=224)
    cases = [(small, (375, 500))]
    if not quick:
        cases += [
            (small, (224, 224)),
            (dict(backbone="small_cnn", pooling="gmp", grouping="a", groups=4, dim=128, image_size=224), (375, 500)),
            (dict(backbone="resnet50", pooling="gmp", dim=512, image_size=224), (375, 500)),
            (("module:resnet50/layer4 (Jacobian rule)", live_resnet50), (375, 500)),
        ]
        if _has_timm():
            cases.append((dict(backbone="timm:vit_small_patch16_224", pooling="token", dim=0, image_size=224),
                          (375, 500)))
    threads, cv_threads = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(1)  # one thread: stable ratios on a shared machine (no OpenMP waits)
    cv2.setNumThreads(1)
    try:
        prepare = [
            measure_prepare(c, shape, device, repeat=5 if quick else (30 if isinstance(c, dict) and
                                                                      c["backbone"] == "small_cnn" else 10))
            for c, shape in cases
        ]
        tensor = measure_tensor(14, 512, repeat=1 if quick else 3)
    finally:
        torch.set_num_threads(threads)
        cv2.setNumThreads(cv_threads)
    return {
        "ratio": max(p["ratio"] for p in prepare),
        "prepare": prepare,
        "tensor": tensor,
        "machine": describe(),
        "threads": 1,
    }
