"""Heads that are positively homogeneous of degree 1, for which gradient x activation is exact
(issue 22 item 5).

If the head ``f`` (feature map ``A`` -> raw embedding) satisfies ``f(t A) = t f(A)`` for every
``t > 0`` near 1, Euler's theorem for homogeneous functions gives

    sum_c,ij A_c,ij df/dA_c,ij = f(A),

so the Jacobian decomposition of :mod:`.jacobian` (``C_ij = sum_c A_c,ij df/dA_c,ij``) sums to
the embedding with no remainder: the bias is zero and the rule is exact, not first order.
Generalized-mean (GeM) pooling ``(mean_ij A_ij^p)^(1/p)`` is such a head (seed 000 Sec. 4
decomposes it with its pooled value frozen; this is the same decomposition), and so are max
pooling, bias-free Linear and convolution layers, ReLU, and any composition of them.

:func:`head_degree` finds the degree by following the head's torch functions (a
``TorchFunctionMode``, as :class:`~.tail.TailRecorder` does): every tensor derived from ``A``
carries its degree; linear ops keep it, products add degrees, quotients subtract them, ``pow``
multiplies it by the exponent, an added constant (a Linear's bias, ``x + 1``) or an op that is
not homogeneous (LayerNorm, GELU, softmax, ...) ends it. A clamp from below at a floor of at most
``CLAMP_FLOOR`` (GeM's ``eps``) counts as ReLU: its share of the embedding is below float
precision. Masks and indices (``x > 0``, argmax) are constant near ``A`` and so keep degrees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from .output import EXACT, FIRST_ORDER
from .tail import FollowingMode, TailReport, tensors_in

#: the largest floor of a clamp from below that is taken as zero (GeM's eps is 1e-6)
CLAMP_FLOOR = 1e-6

#: a degree this close to 1 is 1: exponents held in float32 (GeM's ``1 / p`` with ``p`` a float32
#: parameter gives 1 + 3e-8), far below the precision of the embedding itself
DEGREE_TOLERANCE = 1e-6

#: one derived operand (the rest are shapes, indices, constants that multiply): degree kept
_KEEP = {
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "permute", "transpose", "t",
    "squeeze", "unsqueeze", "contiguous", "expand", "expand_as", "__getitem__", "narrow", "select",
    "split", "chunk", "unbind", "clone", "to", "float", "double", "half", "bfloat16", "type_as", "movedim",
    "moveaxis", "swapaxes", "repeat", "flip", "roll", "identity", "index_select", "gather", "take",
    "sum", "mean", "nansum", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
    "adaptive_avg_pool2d", "adaptive_avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices", "lp_pool1d",
    "lp_pool2d", "max", "amax", "min", "amin", "sort", "topk", "relu", "relu_", "leaky_relu", "leaky_relu_",
    "abs", "abs_", "neg", "__neg__", "norm", "vector_norm", "linalg_vector_norm", "dropout", "dropout1d",
    "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "interpolate", "upsample",
    "pixel_shuffle", "pixel_unshuffle", "unfold", "fold",
}
#: sums of derived operands of one degree; a nonzero constant operand ends homogeneity
_ADD = {"add", "__add__", "__radd__", "__iadd__", "add_", "sub", "__sub__", "__rsub__", "__isub__", "sub_",
        "maximum", "minimum", "fmax", "fmin", "where"}
_CONCAT = {"cat", "concat", "concatenate", "stack", "hstack", "vstack"}
#: products: degrees add (a constant operand has degree 0)
_PRODUCT = {"mul", "__mul__", "__rmul__", "__imul__", "mul_", "multiply", "matmul", "__matmul__", "__rmatmul__",
            "mm", "bmm", "einsum", "tensordot", "inner", "outer", "dot", "mv"}
#: ``op(input, weight, bias)``: a product, and a nonzero constant bias ends homogeneity
_AFFINE = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}
_DIVIDE = {"div", "__truediv__", "__itruediv__", "true_divide", "divide", "div_"}
_POWER = {"pow", "__pow__", "__ipow__", "pow_", "float_power"}
_CLAMP = {"clamp", "clamp_", "clamp_min", "clamp_min_", "clip", "clip_"}
_SCALE = {"sqrt": 0.5, "rsqrt": -0.5, "square": 2.0, "reciprocal": -1.0}


def _number(value) -> float | None:
    """A constant's value when it is one number (a Python number or a one-element tensor)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().reshape(()).item())
    return None


def _is_zero(value) -> bool:
    if value is None:
        return True
    if isinstance(value, torch.Tensor):
        return not bool(value.detach().any())
    number = _number(value)
    return number == 0.0


class DegreeTracker(FollowingMode):
    """Follows the degree of homogeneity of every tensor derived from ``leaf`` (module
    docstring); ``degree(tensor)`` is a number, or None where homogeneity ended. ``leaf`` may be
    given later by :meth:`start` (the feature layer's output in the middle of a forward pass, so
    that the probe needs no pass of its own: :class:`~.module_model.ModuleModel`)."""

    def __init__(self, leaf: torch.Tensor | None = None) -> None:
        super().__init__()
        self._degree: dict[int, float | None] = {}
        self._keep: list[torch.Tensor] = []  # keeps ids unique while tracking
        if leaf is not None:
            self.start(leaf)

    def start(self, leaf: torch.Tensor) -> None:
        """Follow the tensors derived from ``leaf`` (degree 1) from now on."""
        self._degree[id(leaf)] = 1.0
        self._keep.append(leaf)

    def degree(self, tensor: torch.Tensor) -> float | None:
        return self._degree.get(id(tensor), 0.0) if isinstance(tensor, torch.Tensor) else None

    def _of(self, value) -> float | None:
        """A derived tensor's degree, 0.0 for anything else (a constant)."""
        return self._degree[id(value)] if isinstance(value, torch.Tensor) and id(value) in self._degree else 0.0

    def _derived(self, value) -> bool:
        return isinstance(value, torch.Tensor) and id(value) in self._degree

    def follows(self, tensor: torch.Tensor) -> bool:
        return id(tensor) in self._degree

    def on_op(self, name: str, args: tuple, kwargs: dict, inputs: list[torch.Tensor], result) -> None:
        try:
            degree = self._rule(name, args, kwargs, inputs)
        except Exception:  # noqa: BLE001 - arguments of an unforeseen kind: not known to be homogeneous
            degree = None
        if name == "__setitem__" and args and isinstance(args[0], torch.Tensor):
            self._degree[id(args[0])] = None  # written into: no longer follows one rule
            self._keep.append(args[0])
        for t in tensors_in(result, []):
            if t.is_floating_point() or t.is_complex():  # masks and indices stay constants
                self._degree[id(t)] = degree
                self._keep.append(t)

    def _rule(self, name: str, args: tuple, kwargs: dict, inputs: list) -> float | None:
        derived = [self._degree[id(t)] for t in inputs if id(t) in self._degree]
        if any(d is None for d in derived):
            return None
        if name in _KEEP:
            return derived[0] if len(derived) == 1 else None
        if name in _ADD or name in _CONCAT:
            if name in _CONCAT:
                operands = list(args[0]) if args and isinstance(args[0], (list, tuple)) else []
            elif name == "where":  # where(mask, a, b): the mask is a constant near A
                operands = list(args[1:3])
            else:
                operands = list(args[:2]) + ([kwargs["other"]] if "other" in kwargs else [])
            degrees = {self._of(o) for o in operands if self._derived(o)}
            if any(not self._derived(o) and not _is_zero(o) for o in operands) or len(degrees) != 1:
                return None
            return degrees.pop()
        if name in _PRODUCT:
            return sum(derived)
        if name in _AFFINE:
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if not self._derived(bias) and not _is_zero(bias):
                return None
            return sum(derived)
        if name in _DIVIDE:
            if kwargs.get("rounding_mode") is not None or len(args) < 2:
                return None
            return self._of(args[0]) - self._of(args[1])
        if name == "__rtruediv__":  # other / self
            return self._of(args[1]) - self._of(args[0]) if len(args) > 1 else None
        if name in _POWER:
            exponent = _number(args[1] if len(args) > 1 else kwargs.get("exponent"))
            if not self._derived(args[0]) or exponent is None or len(derived) != 1:
                return None
            return derived[0] * exponent
        if name in _SCALE:
            return derived[0] * _SCALE[name] if len(derived) == 1 else None
        if name in _CLAMP:
            low = args[1] if len(args) > 1 else kwargs.get("min")
            high = args[2] if len(args) > 2 else kwargs.get("max")
            floor = _number(low) if low is not None else 0.0
            if high is not None or floor is None or not 0.0 <= floor <= CLAMP_FLOOR or len(derived) != 1:
                return None
            return derived[0]
        if name == "threshold":
            if len(args) > 2 and _number(args[1]) == 0.0 and _number(args[2]) == 0.0:
                return derived[0]
            return None
        if name == "masked_fill":
            value = args[2] if len(args) > 2 else kwargs.get("value")
            return derived[0] if self._derived(args[0]) and _is_zero(value) and len(derived) == 1 else None
        if name == "pad":
            value = args[3] if len(args) > 3 else kwargs.get("value", 0.0)
            mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
            return derived[0] if mode == "constant" and _is_zero(value) and len(derived) == 1 else None
        if name == "normalize":  # x / max(|x|, eps): degree 0
            return 0.0 if len(derived) == 1 else None
        return None  # not homogeneous (or not known to be): LayerNorm, GELU, softmax, detach, ...


def head_degree(run_head: Callable[[torch.Tensor], torch.Tensor], feature_map: torch.Tensor) -> float | None:
    """The degree of homogeneity of the head ``run_head`` (feature map -> raw embedding), seen
    in one pass on ``feature_map``; None when it is not homogeneous."""
    leaf = feature_map.detach().clone()
    tracker = DegreeTracker(leaf)
    with torch.no_grad(), tracker:
        raw = run_head(leaf)
    return tracker.degree(raw)


def is_degree_one(degree: float | None) -> bool:
    """True for a head of degree 1 (:func:`head_degree`, :meth:`DegreeTracker.degree`): then
    gradient x activation is its exact decomposition (Euler's theorem, module docstring)."""
    return degree is not None and abs(degree - 1.0) < DEGREE_TOLERANCE


def is_homogeneous_head(run_head: Callable[[torch.Tensor], torch.Tensor], feature_map: torch.Tensor) -> bool:
    """True when the head is positively homogeneous of degree 1, so that gradient x activation
    is its exact decomposition (Euler's theorem, module docstring)."""
    return is_degree_one(head_degree(run_head, feature_map))


@dataclass
class EulerReport(TailReport):
    """A :class:`~.tail.TailReport` of a head that :func:`is_homogeneous_head` found positively
    homogeneous of degree 1: exact although its ops are not piecewise linear (unless something
    ran in training mode)."""

    @property
    def rule(self) -> str:
        return FIRST_ORDER if self.training_ops else EXACT

    def explain(self) -> str:
        if self.training_ops:
            return super().explain()
        held = f"; {', '.join(self.frozen)} frozen at this input" if self.frozen else ""
        return ("exact (the head is positively homogeneous of degree 1, so gradient x activation sums to the "
                f"embedding: Euler's theorem{held})")


def euler_report(report: TailReport) -> EulerReport:
    """``report`` relabelled for a degree-1 homogeneous head (see :class:`EulerReport`)."""
    return EulerReport(**{f.name: getattr(report, f.name) for f in fields(report)})
