"""What a module computes after its feature layer, observed op by op (issue 11, the Python door).

A user's ``nn.Module`` is opaque: its forward may call any torch function after the layer whose
output is the feature map ``A``. :class:`TailRecorder` is a ``TorchFunctionMode`` entered when
that layer has run; it follows every tensor derived from ``A`` (taint) and classifies each torch
function applied to one:

- linear in ``A`` (``linear``, convolutions and matrix products with one derived operand, sums,
  means, scaling by a constant, average pooling, reshapes, eval-mode BatchNorm, eval-mode
  dropout): the decomposition needs nothing frozen;
- piecewise linear (ReLU and its relatives, max pooling, ``max``, clamps): exact once their masks
  are frozen at this input (seed 000 Sec. 4.2, App. A.3);
- a final L2 normalization of the output (``F.normalize``, or ``v / v.norm(...)``): stripped, so
  the raw embedding is the vector before it (cosine similarity does not change);
- anything else (softmax, LayerNorm, GELU, ``pow``, ...): not piecewise linear, so the Jacobian
  decomposition is first order there.

The result decides the decomposition rule shown in the UI and stored in the npz
(:data:`~.output.EXACT` or :data:`~.output.FIRST_ORDER`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode

from .output import EXACT, FIRST_ORDER

log = logging.getLogger(__name__)

#: Linear in the derived operands, however many (sums, concatenations, reshapes, reductions).
_ADDITIVE = {
    "add", "__add__", "__radd__", "__iadd__", "sub", "__sub__", "__rsub__", "__isub__", "neg",
    "__neg__", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "sum", "mean", "nansum",
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "permute", "transpose",
    "t", "squeeze", "unsqueeze", "contiguous", "expand", "expand_as", "__getitem__", "narrow",
    "select", "split", "chunk", "unbind", "clone", "to", "float", "double", "half", "type_as",
    "movedim", "moveaxis", "swapaxes", "repeat", "flip", "roll", "detach", "identity", "dropout",
    "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d", "pad",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "__setitem__", "masked_fill", "index_select", "gather",
}
#: Linear when exactly one operand derives from ``A`` (the other is a weight or a constant).
_BILINEAR = {
    "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "matmul",
    "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "mul", "__mul__", "__rmul__", "__imul__",
    "multiply", "addmm", "baddbmm", "tensordot", "inner", "outer", "dot", "mv",
}
#: Linear when only the numerator derives from ``A``.
_DIVISION = {"div", "__truediv__", "__itruediv__", "true_divide", "divide"}
#: Piecewise linear: exact with the named quantity frozen at this input.
_PIECEWISE = {
    "relu": "ReLU masks", "relu_": "ReLU masks", "relu6": "ReLU masks", "leaky_relu": "ReLU masks",
    "leaky_relu_": "ReLU masks", "prelu": "ReLU masks", "rrelu": "ReLU masks", "threshold": "ReLU masks",
    "hardtanh": "clamp masks", "hardtanh_": "clamp masks", "clamp": "clamp masks", "clip": "clamp masks",
    "clamp_min": "clamp masks", "clamp_max": "clamp masks", "abs": "signs", "maximum": "max positions",
    "minimum": "max positions", "max": "max positions", "amax": "max positions", "min": "max positions",
    "amin": "max positions", "max_pool1d": "max positions", "max_pool2d": "max positions",
    "max_pool3d": "max positions", "adaptive_max_pool1d": "max positions",
    "adaptive_max_pool2d": "max positions", "max_pool1d_with_indices": "max positions",
    "max_pool2d_with_indices": "max positions", "adaptive_max_pool2d_with_indices": "max positions",
}
#: Elementwise: each output element depends on the same element of the derived operands only (a
#: constant operand may broadcast), so a chain of them keeps every channel of the map to itself.
_ELEMENTWISE = {
    "relu", "relu_", "relu6", "leaky_relu", "leaky_relu_", "elu", "selu", "celu", "gelu", "silu", "mish",
    "sigmoid", "tanh", "hardtanh", "hardtanh_", "hardswish", "hardsigmoid", "softplus", "threshold", "clamp",
    "clamp_", "clamp_min", "clamp_min_", "clamp_max", "clip", "clip_", "pow", "pow_", "__pow__", "sqrt", "rsqrt",
    "square", "exp", "log", "abs", "abs_", "neg", "__neg__", "mul", "__mul__", "__rmul__", "__imul__", "mul_",
    "multiply", "div", "__truediv__", "__itruediv__", "div_", "true_divide", "divide", "add", "__add__",
    "__radd__", "__iadd__", "add_", "sub", "__sub__", "__rsub__", "__isub__", "sub_", "float", "double", "to",
    "contiguous", "clone", "type_as", "dropout", "dropout2d", "alpha_dropout", "feature_alpha_dropout",
    "identity", "batch_norm",
}
#: Spatial reductions that pool each channel on its own (the last axes: the map's grid).
_CHANNEL_POOLS = {
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
    "max_pool1d", "max_pool2d", "max_pool1d_with_indices", "max_pool2d_with_indices", "lp_pool1d", "lp_pool2d",
}
#: Reductions over the axes their ``dim`` names (channel-wise when those are all grid axes).
_DIM_REDUCTIONS = {"mean", "sum", "nansum", "amax", "amin", "max", "min", "logsumexp", "norm", "vector_norm",
                   "linalg_vector_norm"}
_NORMS = {"norm", "vector_norm", "linalg_vector_norm"}
#: Harmless on a norm before the division of an explicit normalization.
_NORM_SHAPING = {"clamp", "clamp_min", "clip", "add", "__add__", "__radd__", "expand_as", "expand",
                 "unsqueeze", "view", "reshape", "detach", "to"}
#: Shape-only ops after a normalization that keep it final (cnnimageretrieval squeezes after L2N).
_FLATTENING = {"squeeze", "flatten", "view", "reshape"}
#: Ops that read a tensor's metadata, not its values (also used by :mod:`.folding`).
METADATA_OPS = {"size", "dim", "numel", "__len__", "__format__", "__repr__", "__bool__", "__iter__",
                "__get__", "__eq__", "__ne__", "requires_grad_", "is_floating_point", "data_ptr", "item",
                "tolist", "shape", "dtype", "device", "element_size", "stride", "is_contiguous",
                "storage_offset", "ndimension", "nelement", "get_device", "cpu", "cuda", "numpy"}


def op_name(func) -> str:
    """The name of a function seen by a ``TorchFunctionMode``."""
    return getattr(func, "__name__", None) or str(func)


def tensors_in(obj, out: list) -> list:
    """``out`` with every tensor in ``obj`` (nested lists, tuples and dicts) appended."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            tensors_in(item, out)
    elif isinstance(obj, dict):
        for item in obj.values():
            tensors_in(item, out)
    return out


class FollowingMode(TorchFunctionMode):
    """A ``TorchFunctionMode`` that runs every torch function and hands :meth:`on_op` those that
    read a tensor it follows (:meth:`follows`): the one op loop of :class:`TailRecorder` and
    :class:`~.homogeneity.DegreeTracker`. Metadata reads (:data:`METADATA_OPS`) are skipped."""

    def follows(self, tensor: torch.Tensor) -> bool:
        raise NotImplementedError

    def on_op(self, name: str, args: tuple, kwargs: dict, inputs: list[torch.Tensor], result) -> None:
        raise NotImplementedError

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = op_name(func)
        if name in METADATA_OPS:
            return result
        inputs = tensors_in(args, []) + tensors_in(kwargs, [])
        if any(self.follows(t) for t in inputs):
            self.on_op(name, args, kwargs, inputs, result)
        return result


@dataclass
class TailReport:
    """What :class:`TailRecorder` saw after the feature layer in one forward pass."""

    linear_ops: set[str] = field(default_factory=set)
    frozen: list[str] = field(default_factory=list)
    nonlinear: list[str] = field(default_factory=list)
    normalized: bool = False
    training_ops: list[str] = field(default_factory=list)

    @property
    def rule(self) -> str:
        return FIRST_ORDER if (self.nonlinear or self.training_ops) else EXACT

    def explain(self) -> str:
        """One line on the rule and why."""
        if self.training_ops:
            return (f"first order: {', '.join(sorted(set(self.training_ops)))} ran in training mode "
                    "(call model.eval())")
        if self.nonlinear:
            return f"first order: {', '.join(sorted(set(self.nonlinear)))} is not piecewise linear"
        held = f" ({', '.join(self.frozen)} frozen at this input)" if self.frozen else ""
        return "exact" + held


class TailRecorder(FollowingMode):
    """Follows tensors derived from the feature map through the rest of a forward pass.

    ``start(tensor)`` marks the feature map; after the forward, ``raw_for(output)`` gives the
    vector before a final L2 normalization (or ``output`` itself) and ``report(output)`` the
    classification of every op that touched a derived tensor."""

    def __init__(self) -> None:
        super().__init__()
        self._derived: dict[int, tuple[str, tuple[int, ...]]] = {}  # id -> (op, derived input ids)
        self._keep: list[torch.Tensor] = []  # keeps ids unique while recording
        self._normalized: dict[int, torch.Tensor] = {}  # id(output of a normalization) -> its input
        self._ops: list[tuple[str, int, dict]] = []  # (op, output id, info)
        self._grid_wise: set[int] = set()  # ids of channel-wise functions of the map, before the pooling
        self._pooled: torch.Tensor | None = None  # the one channel-wise pooling of the map
        self._separable = True  # every path from the map to the output passes through _pooled

    def start(self, tensor: torch.Tensor) -> None:
        self._derived[id(tensor)] = ("feature_map", ())
        self._keep.append(tensor)
        self._grid_wise = {id(tensor)}

    def pooled(self) -> torch.Tensor | None:
        """The tensor ``p`` (B x C, or B x C x 1 x 1) through which the whole head passes, when the
        head starts with a channel-wise pooling of a channels-first map: elementwise ops (ReLU,
        clamps, powers, eval BatchNorm, ...) and reshapes that keep the batch and channel axes,
        then one reduction over the grid (GAP, GMP, GeM's average of powers, ``mean((2, 3))``),
        and nothing else reads the map or those tensors. Then ``p_c`` depends on channel ``c`` of
        the map only, so ``dE/dA_c,ij = dE/dp_c * dp_c/dA_c,ij`` (:mod:`.jacobian`). ``None``
        otherwise."""
        return self._pooled if self._separable else None

    def _follow_channels(self, name: str, args: tuple, kwargs: dict, derived: list[torch.Tensor],
                         outputs: list[torch.Tensor], info: dict) -> None:
        """Keep :meth:`pooled`'s bookkeeping for one op that read a derived tensor."""
        if not self._separable or not any(id(t) in self._grid_wise for t in derived):
            return  # an op after the pooling (or the head is already known not to pool first)
        first = next(t for t in derived if id(t) in self._grid_wise)
        values = [t for t in outputs if t.is_floating_point()]
        ok = (self._pooled is None and all(id(t) in self._grid_wise for t in derived) and len(values) == 1
              and first.dim() >= 3 and not info.get("training"))
        if ok and name in _ELEMENTWISE and values[0].shape == first.shape:
            self._grid_wise.add(id(values[0]))
            return
        if ok and name in ("view", "reshape", "flatten", "unsqueeze") and values[0].dim() >= 3 \
                and values[0].shape[:2] == first.shape[:2]:  # row-major: each (b, c) block stays whole
            self._grid_wise.add(id(values[0]))
            return
        batch_channels = tuple(first.shape[:2])
        pooled = ok and values[0].numel() == first.shape[0] * first.shape[1] and \
            tuple(values[0].shape[:2]) == batch_channels
        if pooled and name in _DIM_REDUCTIONS:
            dims = kwargs.get("dim", args[1] if len(args) > 1 and name not in _NORMS else
                              args[2] if len(args) > 2 else None)
            dims = (dims,) if isinstance(dims, int) else dims
            pooled = isinstance(dims, (tuple, list)) and bool(dims) and all(
                isinstance(d, int) and d % first.dim() >= 2 for d in dims)
        if pooled and (name in _CHANNEL_POOLS or name in _DIM_REDUCTIONS):
            self._pooled = values[0]
            return
        self._separable = False

    def follows(self, tensor: torch.Tensor) -> bool:
        return id(tensor) in self._derived

    def on_op(self, name: str, args: tuple, kwargs: dict, inputs: list[torch.Tensor], result) -> None:
        derived = [t for t in inputs if id(t) in self._derived]
        outputs = tensors_in(result, [])
        ids = tuple(id(t) for t in derived)
        for t in outputs:
            self._derived[id(t)] = (name, ids)
            self._keep.append(t)
        info = {"count": len(derived)}
        if name == "normalize" and outputs:
            p = kwargs.get("p", args[1] if len(args) > 1 else 2.0)
            if float(p) == 2.0:
                self._normalized[id(outputs[0])] = derived[0]
        elif name in _DIVISION and outputs and len(derived) == 2 and self._is_norm_of(derived[1], derived[0]):
            self._normalized[id(outputs[0])] = derived[0]
        elif name in _FLATTENING and outputs and len(derived) == 1 and id(derived[0]) in self._normalized:
            self._normalized[id(outputs[0])] = self._normalized[id(derived[0])]  # B x D x 1 x 1 -> B x D
        if name == "batch_norm":
            training = kwargs.get("training", args[5] if len(args) > 5 else False)
            info["training"] = bool(training)
        if name.startswith("dropout") or name in ("alpha_dropout", "feature_alpha_dropout"):
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            info["training"] = bool(training) and float(kwargs.get("p", args[1] if len(args) > 1 else 0.5)) > 0
        info["numerator_derived"] = bool(inputs) and id(inputs[0]) in self._derived
        self._ops.append((name, id(outputs[0]) if outputs else -1, info))
        self._follow_channels(name, args, kwargs, derived, outputs, info)

    def _is_norm_of(self, denominator: torch.Tensor, vector: torch.Tensor) -> bool:
        """True when ``denominator`` is a norm of ``vector`` (maybe clamped, offset or reshaped)."""
        node = id(denominator)
        for _ in range(8):
            op, parents = self._derived.get(node, ("", ()))
            if op in _NORMS:
                return id(vector) in parents
            if op not in _NORM_SHAPING or not parents or (len(parents) != 1 and op != "expand_as"):
                return False  # expand_as(norm, x) also derives from x: follow the norm
            node = parents[0]
        return False

    def raw_for(self, output: torch.Tensor) -> torch.Tensor:
        """``output`` before its final L2 normalization (in ``output``'s shape: a normalization of a
        B x D x 1 x 1 map squeezed after it), or ``output`` when it has none."""
        raw = self._normalized.get(id(output), output)
        return raw.reshape(output.shape) if raw.shape != output.shape and raw.numel() == output.numel() else raw

    def report(self, output: torch.Tensor) -> TailReport:
        report = TailReport()
        stripped: set[int] = set()
        if id(output) in self._normalized:
            report.normalized = True
            stripped = self._normalization_ids(output)
        for name, out_id, info in self._ops:
            if out_id in stripped:
                continue
            if info.get("training"):
                report.training_ops.append(name)
            elif name in _ADDITIVE or name == "batch_norm":
                report.linear_ops.add(name)
            elif name in _BILINEAR:
                (report.linear_ops.add(name) if info["count"] == 1 else report.nonlinear.append(name))
            elif name in _DIVISION:
                (report.linear_ops.add(name) if info["count"] == 1 and info["numerator_derived"]
                 else report.nonlinear.append(name))
            elif name in _PIECEWISE:
                if _PIECEWISE[name] not in report.frozen:
                    report.frozen.append(_PIECEWISE[name])
            else:
                report.nonlinear.append(name)
        return report

    def _normalization_ids(self, output: torch.Tensor) -> set[int]:
        """Ids of the tensors the final normalization made (its output and the norm chain)."""
        ids = {id(output)}
        raw = self._normalized[id(output)]
        stack = [id(output)]
        while stack:
            node = stack.pop()
            _, parents = self._derived.get(node, ("", ()))
            for parent in parents:
                if parent != id(raw) and parent not in ids:
                    ids.add(parent)
                    stack.append(parent)
        return ids
