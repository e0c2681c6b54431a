"""Pairwise occlusion: a model-agnostic explanation of a similarity (no gradients, no
decomposition; only forward passes of the model).

For a pair ``(q, r)`` with normalized embeddings ``eq, er`` and cosine ``S = eq . er``, each cell
``i`` of the query's feature grid is replaced by the baseline (:mod:`.perturb`: blur, mean or
noise) in its own copy of the query, giving ``eq^(i)``. With ``dq_i = eq - eq^(i)``:

- overall map of the query: ``occlusion_q[i] = S - eq^(i) . er = dq_i . er`` — the similarity
  lost when cell ``i`` is hidden (positive: the cell supports the similarity, as in the
  decomposition's sign convention); the same for the reference with ``dr_x = er - er^(x)``;
- point-to-point map (occlude a query cell, see which reference cells lose similarity): the
  interaction ``I[i, x] = S - S(q^(i), r) - S(q, r^(x)) + S(q^(i), r^(x)) = dq_i . dr_x``, the
  part of the similarity that cells ``i`` and ``x`` hold only together. It needs no forward pass
  beyond the two overall maps: ``nq + nr + 2`` forward passes in all, and one ``nq x nr`` matrix
  product, the same cost as the overall maps (seed 000 Eq. 3 has the same bilinear form with
  the contributions in place of ``dq``, ``dr``).

Cost: one forward pass per cell and side and one of the occluded image itself, batched (a
14 x 14 grid: 197 per side), by the model with its batch norms folded
(:func:`.perturb.embed_kept`). Results are cached per pair (the model, the two input tensors,
baseline, seed and sides): asking again for a pair already computed costs nothing.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch

from dmlviewer.core.explain.inputs import ImageLike, as_device, as_rgb, eval_mode
from dmlviewer.core.explain.pair import SIDES, _input_sizes
from dmlviewer.core.explain.perturb import (BASELINES, baseline_input, batch_size_for, cell_labels, embed_kept,
                                            fast_layout, relay)
from dmlviewer.core.progress import CancelToken, EtaClock, Progress

log = logging.getLogger(__name__)

#: pairs kept per model in the cache
CACHE_SIZE = 32


@dataclass
class OcclusionMaps:
    """Occlusion of one pair (see the module docstring). ``delta_query`` (``nq x D``) holds
    ``eq - eq^(i)`` per query cell, ``delta_reference`` the same for the reference (``None`` for
    a side that was not occluded)."""

    similarity: float
    baseline: str
    grid_query: tuple[int, int]
    grid_reference: tuple[int, int]
    embedding_query: np.ndarray
    embedding_reference: np.ndarray
    delta_query: np.ndarray | None
    delta_reference: np.ndarray | None
    forward_passes: int
    seconds: float
    _cache: dict = field(default_factory=dict, repr=False)

    def overall_grid(self, side: str) -> np.ndarray:
        """``h x w`` similarity lost when each cell of ``side`` is occluded."""
        delta = self._delta(side)
        other = self.embedding_reference if side == "query" else self.embedding_query
        grid = self.grid_query if side == "query" else self.grid_reference
        return (delta @ other).reshape(grid).astype(np.float32)

    @property
    def point_to_point(self) -> np.ndarray:
        """``nq x nr`` interaction ``dq_i . dr_x`` (read-only float32, C-contiguous)."""
        if "p2p" not in self._cache:
            p2p = np.ascontiguousarray(self._delta("query") @ self._delta("reference").T, dtype=np.float32)
            p2p.flags.writeable = False
            self._cache["p2p"] = p2p
        return self._cache["p2p"]

    def _delta(self, side: str) -> np.ndarray:
        if side not in SIDES:
            raise ValueError(f"side must be 'query' or 'reference', got {side!r}")
        delta = self.delta_query if side == "query" else self.delta_reference
        if delta is None:
            raise ValueError(f"the {side} was not occluded (sides={self.sides})")
        return delta

    @property
    def sides(self) -> tuple[str, ...]:
        return tuple(s for s, d in zip(SIDES, (self.delta_query, self.delta_reference)) if d is not None)


class _Cache:
    """Per-model LRU of :class:`OcclusionMaps` (dropped with the model)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._per_model: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, model, key) -> OcclusionMaps | None:
        with self._lock:
            entries = self._per_model.get(model)
            if entries is None or key not in entries:
                return None
            entries.move_to_end(key)
            return entries[key]

    def put(self, model, key, value: OcclusionMaps) -> None:
        with self._lock:
            entries = self._per_model.setdefault(model, OrderedDict())
            entries[key] = value
            while len(entries) > self.size:
                entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._per_model = weakref.WeakKeyDictionary()


CACHE = _Cache(CACHE_SIZE)


def _digest(x: torch.Tensor) -> str:
    return hashlib.sha1(x.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def _branches(model: torch.nn.Module, size) -> tuple[tuple, tuple, tuple]:
    """``(networks, preprocessings, sizes)`` of the query and the reference image: a two-branch
    model's own branches at their input shapes (``size``: ``None`` or a ``(query, reference)``
    pair, as :func:`.explain_pair`), any other model twice."""
    from dmlviewer.core.models.two_branch import TwoBranchModel

    if isinstance(model, TwoBranchModel):
        if size is not None and not (isinstance(size, (tuple, list)) and len(size) == 2):
            raise ValueError(f"size for a two-branch model must be None or a (query, reference) pair, got {size!r}")
        return ((model.branch("query"), model.branch("reference")),
                (model.preprocess_of("query"), model.preprocess_of("reference")),
                (None, None) if size is None else tuple(size))
    return (model, model), (model.preprocess, model.preprocess), _input_sizes(model, size)


def occlusion(
    model: torch.nn.Module,
    image_q: ImageLike,
    image_r: ImageLike,
    baseline: str = "blur",
    sides: Sequence[str] = SIDES,
    device: str | torch.device = "cpu",
    size: int | tuple[int, int] | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    use_cache: bool = True,
    cancel: CancelToken | None = None,
) -> Iterator[Progress]:
    """Occlusion maps of a pair (module docstring); the ``done`` event's result is an
    :class:`OcclusionMaps`. ``sides``: which images to occlude (the point-to-point map needs
    both). Images and ``size`` as in :func:`.explain_pair`; ``seed`` seeds the noise baseline.
    A two-branch model occludes and embeds each image with its own branch at its own input shape
    (the street panorama's copies by the query branch, the aerial image's by the reference one)."""
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose from {', '.join(BASELINES)}")
    sides = tuple(s for s in SIDES if s in set(sides))
    if not sides:
        raise ValueError("occlude at least one side ('query', 'reference')")
    dev = as_device(device)
    batch_size = batch_size_for(dev, batch_size)
    nets, preprocess, sizes = _branches(model, size)
    inputs = tuple(pre(as_rgb(image), s).to(dev) for pre, image, s in zip(preprocess, (image_q, image_r), sizes))
    key = (tuple(_digest(x) for x in inputs), baseline, int(seed), sides)
    if use_cache:
        cached = CACHE.get(model, key)
        if cached is not None:
            yield Progress("done", 1, 1, data={"result": cached})
            return
    start = time.perf_counter()
    with eval_mode(model):
        with torch.inference_mode():
            outs = [net(fast_layout(x[None])) for net, x in zip(nets, inputs)]  # the layout of the occluded copies
        embeddings = [o.embedding[0].float() for o in outs]
        grids = [tuple(o.feature_map.shape[-2:]) for o in outs]
        total = sum(grids[k][0] * grids[k][1] + 1 for k, s in enumerate(SIDES) if s in sides)
        clock = EtaClock(total)
        done = 0
        deltas: list[np.ndarray | None] = [None, None]
        for k, side in enumerate(SIDES):
            if side not in sides:
                continue
            x, grid = inputs[k], grids[k]
            n = grid[0] * grid[1]
            labels = torch.from_numpy(cell_labels(x.shape[1:], grid)).to(dev)
            base = baseline_input(x, baseline, grid, seed=seed + k)
            # row 0: the image itself, by the same passes as the copies (embed_kept folds batch
            # norms: a cell that does not matter gets 0, not the folding's rounding); row 1 + i:
            # every cell but i
            keep = np.concatenate([np.ones((1, n), bool), ~np.eye(n, dtype=bool)])
            job = embed_kept(nets[k], x, base, labels, keep, batch_size, cancel, f"occlusion ({side})")
            occluded = yield from relay(job, done, total, clock)
            done += n + 1
            deltas[k] = (occluded[:1] - occluded[1:]).cpu().numpy().astype(np.float32)
    eq, er = (e.cpu().numpy().astype(np.float32) for e in embeddings)
    result = OcclusionMaps(
        similarity=float(np.dot(eq.astype(np.float64), er.astype(np.float64))),
        baseline=baseline,
        grid_query=grids[0],
        grid_reference=grids[1],
        embedding_query=eq,
        embedding_reference=er,
        delta_query=deltas[0],
        delta_reference=deltas[1],
        forward_passes=2 + total,
        seconds=time.perf_counter() - start,
    )
    log.debug("occlusion (%s, %s) of a pair: %d forward passes in %.2f s", baseline, "+".join(sides),
              result.forward_passes, result.seconds)
    if use_cache:
        CACHE.put(model, key, result)
    yield Progress("done", total, total, data={"result": result})
