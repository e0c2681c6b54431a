"""Step 4 of an import: fold the head's layers exactly into dmlviewer's head ``[BN] -> [Linear(hidden)
-> ReLU] -> Linear(dim)`` (projection.py).

Consecutive affine layers (Linear, eval BatchNorm) compose into one; a ReLU right after the
pooling is dropped when the backbone's last map is the output of a ReLU (the pooled feature is
then non-negative), and otherwise becomes an identity hidden layer so that it stays exact. A
head holding a LayerNorm (ConvNeXt's ``head.norm``, eps from the architecture) or a
Hardswish/GELU/Tanh (MobileNetV3's classifier) cannot fold: it is kept layer by layer (config
``head_layers``, projection.LayerStack; the same function) and the report's ``decomposition
rule`` line says how explanations decompose it. Other heads with two ReLU layers or a trailing
ReLU are refused with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .errors import LayoutError
from .head import BN_EPS, STACK_KINDS, Layer

@dataclass
class FoldedHead:
    """dmlviewer's head stack for the layers: ``pooling``, ``gem_p``, ``bn`` (BatchNorm tensors or
    None), ``hidden``/``out`` ((W, b) float64 or None), the source modules each came from
    (``sources``: target -> module names) and what folding did (``notes``)."""

    pooling: str
    gem_p: float | None
    bn: dict[str, torch.Tensor] | None
    hidden: tuple[torch.Tensor, torch.Tensor] | None
    out: tuple[torch.Tensor, torch.Tensor] | None
    notes: list[str]
    sources: dict[str, list[str]] = field(default_factory=dict)
    stack: list[Layer] | None = None      # a head kept layer by layer (LayerNorm, Hardswish, ...)
    stack_spec: list[str] = field(default_factory=list)  # its ``head_layers`` config value

    @property
    def dim(self) -> int:
        """The embedding's width (0: the pooled feature)."""
        if self.stack is not None:
            linears = [la for la in self.stack if la.kind == "linear"]
            return int(linears[-1].params["weight"].shape[0]) if linears else 0
        return int(self.out[0].shape[0]) if self.out is not None else 0


def _stack_head(layers: list[Layer], pooling: str, gem_p: float | None, notes: list[str]) -> FoldedHead:
    """The layers kept one by one (projection.LayerStack) when one is not piecewise linear: a
    LayerNorm on the pooled vector or a Hardswish/GELU/Tanh between Linears cannot fold into
    dmlviewer's exact head, and explanations decompose it by the first-order rule."""
    ops = [la for la in layers if la.kind != "identity"]
    spec, sources = [], {}
    for i, layer in enumerate(ops):
        if layer.kind == "linear":
            spec.append(f"linear:{layer.params['weight'].shape[0]}")
        elif layer.kind == "layernorm":
            spec.append(f"layernorm:{layer.eps!r}")
        elif layer.kind == "bn":
            spec.append(f"batchnorm:{BN_EPS!r}")
        else:
            spec.append(layer.kind)
        if layer.module is not None:
            sources[f"layers.{i}"] = [layer.module]
    kept = list(dict.fromkeys(la.kind for la in ops if la.kind in STACK_KINDS))
    nonlinear = [k for k in kept if k != "layernorm"]
    how = ("explanations decompose it by the first-order rule (gradient x activation at each input, the "
           f"remainder in the bias; {', '.join(nonlinear)} not piecewise linear), not exactly" if nonlinear else
           "explanations decompose it exactly with the LayerNorm scale frozen at each input")
    notes.append(f"the head holds {', '.join(kept)}, which dmlviewer's folded head cannot: it is kept layer by "
                 f"layer (head.projection.layers, the same function) and {how}")
    return FoldedHead(pooling, gem_p, None, None, None, notes, sources, ops, spec)


def _affine(layer: Layer, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, b) float64 of a linear or eval-mode BatchNorm layer (BN eps ``BN_EPS``)."""
    p = {k: v.detach().double() for k, v in layer.params.items()}
    if layer.kind == "linear":
        w = p["weight"].reshape(p["weight"].shape[0], -1)
        return w, p.get("bias", torch.zeros(w.shape[0], dtype=torch.float64))
    scale = torch.rsqrt(p["running_var"] + BN_EPS) * p.get("weight", torch.ones(dim, dtype=torch.float64))
    shift = p.get("bias", torch.zeros(dim, dtype=torch.float64)) - p["running_mean"] * scale
    return torch.diag(scale), shift


def _compose(run: list[Layer], dim: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    w = torch.eye(dim, dtype=torch.float64)
    b = torch.zeros(dim, dtype=torch.float64)
    for layer in run:
        lw, lb = _affine(layer, w.shape[0])
        w, b = lw @ w, lw @ b + lb
    return w, b, w.shape[0]


def fold_head(layers: list[Layer], channels: int, pooling: str, nonnegative: bool) -> FoldedHead:
    """Fold the layer sequence into dmlviewer's head (module docstring, step 4); ``LayoutError``
    when its sizes do not chain or its shape cannot be represented exactly."""
    notes: list[str] = []
    gem_p = None
    layers = list(layers)
    if layers and layers[0].kind in ("gap", "gmp", "gem"):
        first = layers.pop(0)
        pooling = first.kind
        if first.kind == "gem":
            gem_p = float(first.params["p"].reshape(-1)[0])
    dim = channels
    for layer in layers:
        if layer.kind == "linear":
            w = layer.params["weight"]
            if w.shape[1] != dim:
                raise LayoutError(f"head layer {layer.module} takes {w.shape[1]} inputs but receives {dim}"
                                  + (" (the pooled feature)" if dim == channels else ""))
            dim = w.shape[0]
        elif layer.kind == "bn" and layer.params["running_mean"].numel() != dim:
            raise LayoutError(f"head layer {layer.module} normalizes {layer.params['running_mean'].numel()} "
                              f"features but receives {dim}")
        elif layer.kind == "layernorm" and layer.params["weight"].numel() != dim:
            raise LayoutError(f"head layer {layer.module} normalizes {layer.params['weight'].numel()} "
                              f"features but receives {dim}")
        elif layer.kind in ("gem", "gap", "gmp"):
            raise LayoutError(f"a pooling ({layer.kind}) can only come first in the head")
    if any(la.kind in STACK_KINDS for la in layers):
        if any(la.kind == "bn" for la in layers):
            notes.append(f"BatchNorm eps assumed {BN_EPS:g} (PyTorch's default; weights files do not store it)")
        return _stack_head(layers, pooling, gem_p, notes)
    ops = [la for la in layers if la.kind != "identity"]
    if any(la.kind == "bn" for la in ops):
        notes.append(f"BatchNorm eps assumed {BN_EPS:g} (PyTorch's default; weights files do not store it)")
    if ops and ops[0].kind == "relu" and (nonnegative or pooling == "gem"):
        why = "GeM output" if pooling == "gem" else "pooled output of a ReLU"
        notes.append(f"the ReLU right after the pooling changes nothing on the non-negative {why}: left out")
        ops.pop(0)
    runs: list[list[Layer]] = [[]]
    for layer in ops:
        if layer.kind == "relu":
            if runs[-1] or len(runs) == 1:
                runs.append([])
        else:
            runs[-1].append(layer)
    if len(runs) > 2:
        raise LayoutError(f"the head has {len(runs) - 1} ReLU layers: dmlviewer's head holds at most one "
                          "hidden FC+ReLU layer, so it cannot reproduce this one exactly")
    bn = None
    first = runs[0]
    sources: dict[str, list[str]] = {}
    if first and first[0].kind == "bn" and any(la.kind == "linear" for la in first[1:] + sum(runs[1:], [])):
        if len(first) == 1 or any(la.kind == "linear" for la in first[1:]) or len(runs) == 1:
            bn = dict(first[0].params)
            sources["bn"] = [first[0].module]
            first = first[1:]

    def fold(run: list[Layer], width: int, target: str) -> tuple[torch.Tensor, torch.Tensor]:
        sources[target] = [la.module for la in run]
        if len(run) > 1:
            notes.append(f"{' + '.join(la.module or la.kind for la in run)} folded exactly into "
                         f"head.projection.{target}")
        w, b, _ = _compose(run, width)
        return w, b

    if len(runs) == 1:
        if not first:
            return FoldedHead(pooling, gem_p, bn, None, None, notes, sources)
        if all(la.kind == "bn" for la in first) and bn is None:  # dim 0 with BatchNorm
            sources["bn"] = [la.module for la in first]
            if len(first) == 1:
                return FoldedHead(pooling, gem_p, dict(first[0].params), None, None, notes, sources)
            w, b, _ = _compose(first, channels)
            notes.append(f"{' + '.join(sources['bn'])} folded exactly into one BatchNorm")
            return FoldedHead(pooling, gem_p, _bn_from_affine(w, b), None, None, notes, sources)
        return FoldedHead(pooling, gem_p, bn, None, fold(first, channels, "out"), notes, sources)
    second = runs[1]
    if not second:
        raise LayoutError("the head ends with a ReLU: dmlviewer's head ends with a linear layer, so it cannot "
                          "reproduce this one exactly")
    if not first:
        hidden = (torch.eye(channels, dtype=torch.float64), torch.zeros(channels, dtype=torch.float64))
        sources["hidden"] = []
        notes.append("the ReLU right after the pooling is kept exactly as an identity hidden layer "
                     f"({channels} units): the pooled feature may be negative")
    else:
        hidden = fold(first, channels, "hidden")
    return FoldedHead(pooling, gem_p, bn, hidden, fold(second, hidden[0].shape[0], "out"), notes, sources)


def _bn_from_affine(w: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    """BatchNorm tensors computing ``diag(w) z + b`` (running_var = 1 - eps, so the scale is 1)."""
    scale = torch.diagonal(w)
    return {"weight": scale.float(), "bias": b.float(), "running_mean": torch.zeros_like(scale).float(),
            "running_var": torch.full_like(scale, 1.0 - BN_EPS).float()}


def reference_head(layers: list[Layer], z: torch.Tensor) -> torch.Tensor:
    """The source layers applied one after another to pooled features ``z`` (float32, eval mode)."""
    for layer in layers:
        p = {k: v.float() for k, v in layer.params.items()}
        if layer.kind == "linear":
            z = nn.functional.linear(z, p["weight"].reshape(p["weight"].shape[0], -1), p.get("bias"))
        elif layer.kind == "bn":
            z = nn.functional.batch_norm(z, p["running_mean"], p["running_var"], p.get("weight"),
                                         p.get("bias"), False, 0.0, BN_EPS)
        elif layer.kind == "layernorm":
            z = nn.functional.layer_norm(z, z.shape[-1:], p.get("weight"), p.get("bias"), layer.eps)
        elif layer.kind == "relu":
            z = torch.relu(z)
        elif layer.kind == "hardswish":
            z = nn.functional.hardswish(z)
        elif layer.kind == "gelu":
            z = nn.functional.gelu(z)
        elif layer.kind == "tanh":
            z = torch.tanh(z)
    return z

