"""A pair's forward pass and decomposition replayed from a CUDA graph (issue 32).

On a GPU a pair's preparation is bound by the host: a forward pass of a batch of two images
launches a few hundred small kernels, each costing the host more time than the GPU spends on
it, and the decomposition (for a live module, a backward pass through the head) adds as many.
:func:`forward_decomposed` records :func:`.decomposition.forward_decomposed` for one input
shape once as a CUDA graph and afterwards replays it: one launch for the whole pass, the same
kernels on the same weights, so the same numbers (``tests/gpu`` checks it against the eager
pass).

What a replay assumes, and how it is kept true:

- **The same weights at the same addresses.** The graph reads the parameters and buffers from
  the memory they had when it was recorded. Updates in place (an optimizer step, a
  ``load_state_dict``) are seen by the next replay; a parameter replaced by another tensor
  (``model.to(...)``, a swapped layer or parameter) is seen by :class:`_Weights` and the graph
  is recorded again. The recorded tensors are kept alive with the graph, so their memory
  cannot be handed to a new parameter at the same address.
- **The same Python decisions.** The head's rule, grid and what it freezes are decided while
  recording; they depend on the model's structure and the input shape, which key the graph.
- **One replay at a time per graph**: a lock; the outputs are copied out of the graph's
  buffers before the next replay may overwrite them.

Anything that cannot be recorded (a host synchronisation inside the model, an operation CUDA
graphs do not support) falls back to the eager pass, logged once per model; so does every call
off CUDA.

**On by default** since it ran on a GPU (an H100, 2026-11-28: ``tests/gpu/test_cuda_graph.py``
passed, and ``dmlviewer bench explain --device cuda`` measured resnet50 pairs at 0.71-0.85 of two
bare forwards replayed against 1.46-1.77 eagerly, ViT-S/16 at 0.89-0.93 against 1.89-2.02).
``DMLVIEWER_CUDA_GRAPHS=0`` (or :func:`replaying`) turns it off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
import weakref
from contextvars import ContextVar
from typing import Any, Iterator

import torch

from dmlviewer.core.explain.decomposition import forward_decomposed as eager_forward_decomposed
from dmlviewer.core.models import Linearization, ModelOutput

log = logging.getLogger(__name__)

#: input shapes kept per model (a pair view uses one; a second model or input size another)
SHAPES_PER_MODEL = 2
#: eager passes on a side stream before recording (autograd and cuDNN set themselves up)
WARMUP = 3

_graphs: "weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple, _Recorded | str]]" = weakref.WeakKeyDictionary()
_graphs_lock = threading.Lock()


_override: ContextVar[bool | None] = ContextVar("dmlviewer_cuda_graphs", default=None)


def enabled() -> bool:
    """Whether pairs on CUDA replay graphs: :func:`replaying`'s setting, else
    ``DMLVIEWER_CUDA_GRAPHS`` (``0``/``off`` turns them off; on by default, module docstring)."""
    chosen = _override.get()
    if chosen is not None:
        return chosen
    return os.environ.get("DMLVIEWER_CUDA_GRAPHS", "1").strip().lower() not in ("0", "off", "false", "no")


@contextlib.contextmanager
def replaying(on: bool = True) -> Iterator[None]:
    """Within the block (this thread or task), pairs replay CUDA graphs or not, whatever the
    environment says (the benchmark measures both ways in one run)."""
    token = _override.set(bool(on))
    try:
        yield
    finally:
        _override.reset(token)


@dataclasses.dataclass
class _Recorded:
    graph: torch.cuda.CUDAGraph
    static_input: torch.Tensor
    result: tuple[ModelOutput, Linearization]  # the graph's output buffers
    weights: _Weights
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    replays: int = 0


class _Weights:
    """Where a model's graph read its weights: every slot of every submodule (its child modules,
    parameters and buffers, with what each held) and each tensor's address, so that
    :meth:`unchanged` sees a replaced layer or parameter and a moved tensor (``model.to``) with a
    few hundred identity checks, not a walk of the module tree (1.2-1.6 ms for a resnet50 on the
    development CPU against 0.15 ms, paid by every replayed pair). The tensors as recorded are kept alive, so their memory is not
    handed to a new tensor at the same address."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.slots = [(table, name, value) for module in model.modules()
                      for table in (module._modules, module._parameters, module._buffers)
                      for name, value in table.items()]
        tensors = [v for _, _, v in self.slots if isinstance(v, torch.Tensor)]
        self.recorded = [(t, t.detach(), t.data_ptr()) for t in tensors]

    def unchanged(self) -> bool:
        return (all(table.get(name) is value for table, name, value in self.slots)
                and all(t.data_ptr() == address for t, _, address in self.recorded))


def _key(x: torch.Tensor, model: torch.nn.Module) -> tuple:
    return (tuple(x.shape), x.dtype, str(x.device), x.is_contiguous(memory_format=torch.channels_last),
            model.training, torch.is_autocast_enabled("cuda"))


def _copy(value: Any) -> Any:
    """``value`` with every tensor in it copied (dataclasses, dicts, lists and tuples walked)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _copy(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    return value


def _record(model: torch.nn.Module, x: torch.Tensor) -> _Recorded:
    """Warm up on a side stream, then record one pass into a new graph."""
    static_input = x.clone()
    stream = torch.cuda.Stream(device=x.device)
    stream.wait_stream(torch.cuda.current_stream(x.device))
    with torch.cuda.stream(stream):
        for _ in range(WARMUP):
            eager_forward_decomposed(model, static_input)
    torch.cuda.current_stream(x.device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    # thread-local: work other threads launch meanwhile (an extraction job) is not recorded
    # and does not break the recording
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        result = eager_forward_decomposed(model, static_input)
    return _Recorded(graph, static_input, result, _Weights(model))


def _replay(recorded: _Recorded, x: torch.Tensor) -> tuple[ModelOutput, Linearization]:
    with recorded.lock, torch.no_grad():
        recorded.static_input.copy_(x)
        recorded.graph.replay()
        recorded.replays += 1
        return _copy(recorded.result)


def forward_decomposed(model: torch.nn.Module, x: torch.Tensor) -> tuple[ModelOutput, Linearization]:
    """:func:`.decomposition.forward_decomposed` of ``x``, replayed from a CUDA graph recorded
    for this model and input shape when ``x`` is on a CUDA device (module docstring); the eager
    pass otherwise, or when recording failed for this model and shape."""
    if x.device.type != "cuda" or not enabled() or torch.cuda.is_current_stream_capturing():
        return eager_forward_decomposed(model, x)
    key = _key(x, model)
    with _graphs_lock:
        per_model = _graphs.setdefault(model, {})
        entry = per_model.get(key)
    if isinstance(entry, str):  # recording failed before: eager
        return eager_forward_decomposed(model, x)
    if entry is not None and not entry.weights.unchanged():
        log.info("%s: its weights moved since the pair graph was recorded: recording again", type(model).__name__)
        entry = None
    if entry is None:
        start = time.perf_counter()
        try:
            entry = _record(model, x)
        except Exception as exc:  # noqa: BLE001 - any failure to record means: run eagerly
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.info("%s: the pair's forward pass cannot be replayed from a CUDA graph (%s): it runs "
                     "eagerly", type(model).__name__, reason)
            torch.cuda.synchronize(x.device)  # a broken context raises here, not later
            with _graphs_lock:
                per_model[key] = reason
            return eager_forward_decomposed(model, x)
        with _graphs_lock:
            recorded = [k for k, v in per_model.items() if not isinstance(v, str) and k != key]
            while len(recorded) >= SHAPES_PER_MODEL:  # the oldest shape makes room
                del per_model[recorded.pop(0)]
            per_model[key] = entry
        log.debug("%s: pair graph recorded for %s in %.0f ms", type(model).__name__, tuple(x.shape),
                  (time.perf_counter() - start) * 1e3)
    return _replay(entry, x)


def state(model: torch.nn.Module) -> dict[tuple, str]:
    """Per recorded input key of ``model``: ``"replayed N times"`` or why recording failed
    (for tests, benchmarks and diagnostics)."""
    with _graphs_lock:
        entries = dict(_graphs.get(model, {}))
    return {k: v if isinstance(v, str) else f"replayed {v.replays} times" for k, v in entries.items()}


def forget(model: torch.nn.Module) -> None:
    """Drop ``model``'s graphs (their memory goes back to the allocator)."""
    with _graphs_lock:
        _graphs.pop(model, None)
