"""``bench explain``: the cost of preparing a pair's explanation, and the point-to-point tensor
as one matrix product against the seed's four nested loops.

- ``prepare``: :func:`~dmlviewer.core.explain.explain_pair` (image to tensor, both forward passes,
  decomposition, the point-to-point tensor and its transpose for hovering, bias terms, the
  Decomposition and Decomposition+Bias grid maps) and the first view's maps at full size (the
  Decomposition map of both images, what the viewer draws first; no Grad-CAM) against
  the two bare forward passes of the same images (one batch, tensors already made): ``ratio`` =
  prepare / bare (target at most 1.3). ``ratio_with_preprocessing`` compares against resizing
  and normalizing the two images (``core.data.to_tensor``) plus the forward passes, which any
  viewer pays too. small_cnn on 500x375 and 224x224 images, A-grouping, resnet50 (random
  weights); the three timings of a row are interleaved so that load from other processes hits
  all alike, on one torch thread (on a shared machine, multi-threaded kernels stall on busy
  cores). On a GPU each row also times the preparation with the pair's forward pass and
  decomposition replayed from a CUDA graph (:mod:`dmlviewer.core.explain.cuda_graph`, the
  default on a GPU; ``prepare_ms`` is then the eager pass): ``prepare_graph_ms`` and
  ``ratio_graph`` (over the bare forward), ``pair_graph`` (recorded and replayed, or why not),
  and the stricter baseline ``bare_forward_graph_ms``, the bare forward replayed from a graph
  too (the GPU's own time, no launches), with ``ratio_graph_to_graphed_bare``.
- the doors (issue 22 item 5): a torchvision resnet50 (``fc`` a 512-d embedding layer) and a
  timm ViT-S/16 (``vit_small_patch16_224``, a 512-d Linear head, class token; linearized with
  frozen attention, LayerNorm and GELU gates), random weights, each opened through every door:
  ``checkpoint`` (imported by ``import-model``'s analysis and loaded), ``python``
  (``open_model(module)``) and ``code`` (``--model ENTRY --weights FILE``). One row per door,
  the bare forward being the user's module itself; the bare, preprocessing and three doors'
  timings interleaved in one loop (each round starting one later), so ``ratio_to_checkpoint``
  (the door's prepare time over the checkpoint door's, target at most 1.2) is measured in one
  run.
- ``tensor``: the 14x14 x 14x14 tensor from the contributions by one matrix product against
  four nested Python loops of dot products (the seed's demo code): ``loop_ms``, ``matmul_ms``,
  ``speedup``.
"""

from __future__ import annotations

import functools
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


def _interleaved(fns: dict[str, Callable[[], Any]], repeat: int, warmup: int = 2,
                 rotate: bool = False) -> dict[str, list[float]]:
    """Run the functions in turn ``repeat`` times; milliseconds per function. ``rotate``: each
    round starts one function later, so that none always follows the same one."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for round_ in range(repeat):
        shift = round_ % len(names) if rotate else 0
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return times


def _graphed(network: torch.nn.Module, batch: torch.Tensor) -> Callable[[], None] | None:
    """On a GPU, the bare forward replayed from a CUDA graph: the GPU's own time for the two
    images, without the host's launches (the strictest baseline); ``None`` off CUDA or when
    the network cannot be recorded."""
    if batch.device.type != "cuda":
        return None
    try:
        static = batch.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(3):
                network(static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            network(static)
    except Exception:  # noqa: BLE001 - no graphed baseline for this network
        return None

    def replay() -> None:
        graph.replay()
        torch.cuda.synchronize()
    return replay


def _on_gpu(fns: dict[str, Callable[[], None]], network: torch.nn.Module, batch: torch.Tensor,
            prepares: dict[str, Callable[[], None]]) -> None:
    """On a GPU, add to ``fns`` the bare forward replayed from a graph (``graphed``) and each
    preparation with the pair's graph replayed (``NAME graph``; :mod:`~dmlviewer.core.explain.cuda_graph`),
    the plain ``NAME`` being the eager pass."""
    from dmlviewer.core.explain import cuda_graph

    graphed = _graphed(network, batch)
    if graphed is None:
        return
    fns["graphed"] = graphed
    for name, fn in prepares.items():
        def replayed(fn=fn, on=True) -> None:
            with cuda_graph.replaying(on):
                fn()
        fns[name] = functools.partial(replayed, on=False)
        fns[f"{name} graph"] = replayed


def _graph_fields(med: dict[str, float], key: str, model) -> dict:
    """A row's GPU fields: the bare forward replayed from a graph, the preparation with the
    pair's graph replayed, their ratios, and whether the pair's graph was recorded."""
    from dmlviewer.core.explain import cuda_graph

    if "graphed" not in med:
        return {}
    replayed = med[f"{key} graph"]
    return {"bare_forward_graph_ms": round(med["graphed"], 3),
            "prepare_graph_ms": round(replayed, 3),
            "ratio_graph": round(replayed / med["bare"], 3),
            "ratio_graph_to_graphed_bare": round(replayed / med["graphed"], 3),
            "pair_graph": "; ".join(sorted(set(cuda_graph.state(model).values()))) or "none"}


#: the networks measured through every door: (label, builder entry for the code door, its arguments)
DOOR_NETWORKS = (
    ("torchvision resnet50", "torchvision.models:resnet50", {"num_classes": 512}),
    ("timm vit_small_patch16_224", "timm:create_model",
     {"model_name": "vit_small_patch16_224", "pretrained": False, "num_classes": 512}),
)
DOORS = ("checkpoint", "python", "code")


def door_models(entry: str, args: dict, folder: str, device: str = "cpu") -> tuple[torch.nn.Module, dict]:
    """``(module, door -> model)``: one network with random weights (``entry(**args)``, seed 0)
    opened through each door: ``checkpoint`` (its state dict saved, imported by ``import-model``'s
    analysis, written and loaded as a dmlviewer checkpoint), ``python`` (``open_model(module)``)
    and ``code`` (the code-and-weights door: ``entry`` with ``args`` and the saved weights)."""
    import os

    from dmlviewer.core.models import open_model
    from dmlviewer.core.models.code_door import build_module, open_code_model
    from dmlviewer.core.models.importing import analyze, write_checkpoint
    from dmlviewer.core.progress import run_to_end

    torch.manual_seed(0)
    module = build_module(entry, args)[0].eval()
    weights = os.path.join(folder, "weights.pth")
    torch.save(module.state_dict(), weights)
    checkpoint = os.path.join(folder, "imported.pt")
    write_checkpoint(run_to_end(analyze([weights])), checkpoint)
    models = {
        "checkpoint": open_model(checkpoint, device)[0],
        "python": open_model(module, device)[0],
        "code": open_code_model(entry, args, weights=weights, device=device)[0],
    }
    return module.to(device), models


def _first_view(pair) -> None:
    """What the viewer draws first besides the hover data: the Decomposition map of both images
    at full size."""
    for side in ("query", "reference"):
        pair.overall("decomposition", side)


def measure_doors(label: str, module: torch.nn.Module, models: dict, image_shape: tuple[int, int],
                  device: str = "cpu", repeat: int = 15) -> list[dict]:
    """One row per door: explain_pair through that door's model against the bare forward of the
    user's module (the same network), all interleaved in one loop; ``ratio_to_checkpoint`` is the
    door's prepare time over the checkpoint door's, measured in the same run."""
    from dmlviewer.core.explain import explain_pair

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (*image_shape, 3), dtype=np.uint8) for _ in range(2)]
    dev = torch.device(device)
    preprocess = models["python"].preprocess
    size = int(preprocess.size)
    batch = torch.stack([preprocess(im, size) for im in images]).to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def bare() -> None:
        with torch.no_grad():
            module(batch)
        sync()

    def with_preprocessing() -> None:
        x = torch.stack([preprocess(im, size) for im in images]).to(dev)
        with torch.no_grad():
            module(x)
        sync()

    def prepare(model) -> Callable[[], None]:
        def run() -> None:
            _first_view(explain_pair(model, images[0], images[1], device, size=size))
            sync()
        return run

    prepares = {door: prepare(m) for door, m in models.items()}
    fns = {"bare": bare, "pre": with_preprocessing, **prepares}
    _on_gpu(fns, module, batch, prepares)
    times = _interleaved(fns, repeat, rotate=True)
    med = {k: float(np.median(v)) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}
    rows = []
    for door, model in models.items():
        pair = explain_pair(model, images[0], images[1], device, size=size)
        rows.append({
            "model": f"{label} ({door} door)",
            "door": door,
            "rule": pair.rule,
            "input": size,
            "image": f"{image_shape[1]}x{image_shape[0]}",
            "grid": f"{pair.grid_query[0]}x{pair.grid_query[1]}",
            "bare_forward_ms": round(med["bare"], 3),
            "forward_with_preprocessing_ms": round(med["pre"], 3),
            "prepare_ms": round(med[door], 3),
            "ratio": round(med[door] / med["bare"], 3),
            "ratio_with_preprocessing": round(med[door] / med["pre"], 3),
            "ratio_of_minimums": round(low[door] / low["bare"], 3),
            "ratio_with_preprocessing_of_minimums": round(low[door] / low["pre"], 3),
            "ratio_to_checkpoint": round(med[door] / med["checkpoint"], 3),
            "ratio_to_checkpoint_of_minimums": round(low[door] / low["checkpoint"], 3),
            **_graph_fields(med, door, model),
        })
    return rows


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
        _first_view(explain_pair(model, images[0], images[1], device, size=size))
        sync()

    # interleaved, so that load from other processes hits all three alike
    fns = {"bare": bare, "pre": with_preprocessing, "prep": prepare}
    _on_gpu(fns, network, batch, {"prep": prepare})
    times = _interleaved(fns, repeat)
    med = {k: float(np.median(v)) for k, v in times.items()}
    bare_ms, pre_ms, prep_ms = med["bare"], med["pre"], med["prep"]
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
        **_graph_fields(med, "prep", model),
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
    """Both measurements; ``ratio`` is the worst prepare / bare-forward ratio over the models;
    ``python_door_to_checkpoint_door``: per network, the Python door's prepare time over the
    checkpoint door's (issue 22 item 5: at most 1.2)."""
    import tempfile

    quick = bool(getattr(args, "quick", False))
    device = getattr(args, "device", "cpu") or "cpu"
    small = dict(backbone="small_cnn", pooling="gap", dim=128, image_size=224)
    cases = [(small, (375, 500))]
    networks = []
    if not quick:
        cases += [
            (small, (224, 224)),
            (dict(backbone="small_cnn", pooling="gmp", grouping="a", groups=4, dim=128, image_size=224), (375, 500)),
            (dict(backbone="resnet50", pooling="gmp", dim=512, image_size=224), (375, 500)),
        ]
        networks = [n for n in DOOR_NETWORKS if n[1].startswith("torchvision") or _has_timm()]
    threads, cv_threads = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(1)  # one thread: stable ratios on a shared machine (no OpenMP waits)
    cv2.setNumThreads(1)
    try:
        prepare = [
            measure_prepare(c, shape, device, repeat=5 if quick else (30 if isinstance(c, dict) and
                                                                      c["backbone"] == "small_cnn" else 10))
            for c, shape in cases
        ]
        for label, entry, net_args in networks:
            with tempfile.TemporaryDirectory() as folder:
                module, models = door_models(entry, net_args, folder, device)
                prepare += measure_doors(label, module, models, (375, 500), device)
        tensor = measure_tensor(14, 512, repeat=1 if quick else 3)
    finally:
        torch.set_num_threads(threads)
        cv2.setNumThreads(cv_threads)
    return {
        "ratio": max(p["ratio"] for p in prepare),
        "python_door_to_checkpoint_door": {p["model"].rsplit(" (", 1)[0]: p["ratio_to_checkpoint"]
                                           for p in prepare if p.get("door") == "python"},
        "prepare": prepare,
        "tensor": tensor,
        "machine": describe(),
        "threads": 1,
    }
