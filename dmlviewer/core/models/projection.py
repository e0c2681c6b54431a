"""The layers after pooling: optional BatchNorm, optional FC+ReLU, linear embedding.

In eval mode, with the ReLU mask frozen, the whole stack is affine (seed 000 Sec. 4.1-4.2):
``first_layer()``/``affine_in()`` give the first affine step (BatchNorm folded into the first linear layer) and
``finish()`` pushes per-position parts and the bias through the rest (ReLU mask, last linear).
"""

from __future__ import annotations

import torch
from torch import nn


def _eval_batchnorm(bn: nn.BatchNorm1d) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and shift of an eval-mode BatchNorm: ``bn(z) = scale * z + shift``."""
    if bn.training:
        raise RuntimeError("linearize needs the model in eval mode (BatchNorm uses batch statistics "
                           "in training mode): call model.eval() first")
    scale = torch.rsqrt(bn.running_var + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight
    shift = -bn.running_mean * scale
    if bn.bias is not None:
        shift = shift + bn.bias
    return scale, shift


class Projection(nn.Module):
    """``[BN] -> [Linear(hidden) -> ReLU] -> [Linear(out)]`` on a pooled vector.

    ``final=False`` leaves out the last linear layer when there is no hidden layer (the A-grouping
    head's groups are already embeddings, seed 001 Eq. 8); ``out_dim`` is then ``in_dim``.
    """

    def __init__(self, in_dim: int, out_dim: int, bn: bool = False, hidden: int = 0,
                 final: bool = True) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(in_dim) if bn else None
        self.hidden = nn.Linear(in_dim, hidden) if hidden else None
        width = hidden or in_dim
        self.out = nn.Linear(width, out_dim) if (final or hidden) else None
        self.out_dim = out_dim if self.out is not None else in_dim

    @property
    def is_identity(self) -> bool:
        return self.bn is None and self.hidden is None and self.out is None

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The projected vector and the ReLU mask (``None`` without a hidden layer)."""
        if self.bn is not None:
            z = self.bn(z)
        mask = None
        if self.hidden is not None:
            pre = self.hidden(z)
            mask = pre > 0
            z = pre * mask
        if self.out is not None:
            z = self.out(z)
        return z, mask

    def first_layer(self) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """(scale, W, b) with the first affine step ``z -> W (scale * z) + b``: the eval-mode BN
        (``scale``, ``None`` without BN; its shift is folded into ``b``) and the first linear layer."""
        first = self.hidden if self.hidden is not None else self.out
        if first is None:
            raise ValueError("projection without a linear layer has no first layer")
        if self.bn is None:
            return None, first.weight, first.bias
        scale, shift = _eval_batchnorm(self.bn)
        return scale, first.weight, first.bias + first.weight @ shift

    def affine_in(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(W, b) of the first affine step with the BN folded into W (BN alone when no linear layer)."""
        if self.hidden is None and self.out is None:
            if self.bn is None:
                raise ValueError("identity projection has no affine step")
            scale, shift = _eval_batchnorm(self.bn)
            return torch.diag(scale), shift
        scale, weight, bias = self.first_layer()
        return (weight if scale is None else weight * scale), bias

    def finish(self, parts: torch.Tensor, bias: torch.Tensor,
               mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Push B x n x d parts and the B x d bias through the ReLU mask and the last layer."""
        if self.hidden is None:
            return parts, bias
        m = mask.to(parts.dtype)
        parts = parts * m.unsqueeze(1)
        bias = bias * m
        parts = parts @ self.out.weight.T
        bias = bias @ self.out.weight.T + self.out.bias
        return parts, bias

    def linearize(self, parts: torch.Tensor, bias: torch.Tensor,
                  mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Whole stack on an affine input ``sum_n parts_n + bias`` (B x n x in, B x in)."""
        if self.is_identity:
            return parts, bias
        weight, b = self.affine_in()
        return self.finish(parts @ weight.T, bias @ weight.T + b, mask)


# --------------------------------------------------------------------------- general layer stack

#: layers a :class:`LayerStack` may hold, by the name ``head_layers`` gives them; the
#: nonlinear activations make its decomposition first order (a LayerNorm does not: with its
#: scale frozen at the input it is linear, as vit.py's LayerNorms)
STACK_LINEAR, STACK_LAYERNORM, STACK_BATCHNORM = "linear", "layernorm", "batchnorm"
STACK_ACTIVATIONS = {"relu": nn.ReLU, "hardswish": nn.Hardswish, "gelu": nn.GELU, "tanh": nn.Tanh}
STACK_NONLINEAR = ("hardswish", "gelu", "tanh")
MAX_STACK_LAYERS = 16


def parse_stack(spec: list, in_dim: int) -> list[tuple[str, float | int | None]]:
    """``[(kind, argument)]`` of a ``head_layers`` config value (``"linear:OUT"``,
    ``"layernorm:EPS"``, ``"batchnorm:EPS"``, ``"relu"``, ``"hardswish"``, ``"gelu"``,
    ``"tanh"``); ``ValueError`` naming the bad item. ``in_dim`` is not needed to parse, only to
    check widths later (:func:`stack_width`)."""
    if not isinstance(spec, (list, tuple)) or len(spec) > MAX_STACK_LAYERS:
        raise ValueError(f"model config head_layers must be a list of at most {MAX_STACK_LAYERS} layers")
    layers: list[tuple[str, float | int | None]] = []
    for item in spec:
        if not isinstance(item, str):
            raise ValueError(f"model config head_layers item {item!r} must be text such as 'linear:128'"[:200])
        kind, _, arg = item.strip().lower().partition(":")
        try:
            if kind == STACK_LINEAR:
                value = int(arg)
                if not 1 <= value <= 16384:
                    raise ValueError
                layers.append((kind, value))
            elif kind in (STACK_LAYERNORM, STACK_BATCHNORM):
                eps = float(arg) if arg else 1e-5
                if not 0 < eps < 1:
                    raise ValueError
                layers.append((kind, eps))
            elif kind in STACK_ACTIVATIONS and not arg:
                layers.append((kind, None))
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"model config head_layers item {item!r} is not linear:OUT, layernorm:EPS, "
                             f"batchnorm:EPS or one of {', '.join(STACK_ACTIVATIONS)}"[:300]) from None
    return layers


def stack_width(spec: list, in_dim: int) -> int:
    """The output width of the ``head_layers`` stack on an ``in_dim`` vector."""
    width = in_dim
    for kind, arg in parse_stack(spec, in_dim):
        if kind == STACK_LINEAR:
            width = int(arg)
    return width


class LayerStack(nn.Module):
    """A general head on the pooled vector: the layers of ``head_layers`` in order (Linear,
    LayerNorm, eval BatchNorm, ReLU, Hardswish, GELU, Tanh), for an imported model whose head
    :class:`Projection` cannot hold (torchvision/timm ConvNeXt's LayerNorm before the classifier,
    MobileNetV3's Hardswish between two Linears). ``forward`` matches :class:`Projection`'s
    (``(vector, None)``). The head decomposes it with :meth:`jacobian`: exact with the ReLU masks
    and LayerNorm scales frozen, first order when a Hardswish/GELU/Tanh is in it (``nonlinear``)."""

    def __init__(self, in_dim: int, spec: list) -> None:
        super().__init__()
        self.spec = [str(s) for s in spec]
        layers = []
        width = in_dim
        for kind, arg in parse_stack(spec, in_dim):
            if kind == STACK_LINEAR:
                layers.append(nn.Linear(width, int(arg)))
                width = int(arg)
            elif kind == STACK_LAYERNORM:
                layers.append(nn.LayerNorm(width, eps=float(arg)))
            elif kind == STACK_BATCHNORM:
                layers.append(nn.BatchNorm1d(width, eps=float(arg)))
            else:
                layers.append(STACK_ACTIVATIONS[kind]())
        self.layers = nn.ModuleList(layers)
        self.kinds = [kind for kind, _ in parse_stack(spec, in_dim)]
        self.out_dim = width
        # the attributes Projection's callers read: a stack is never folded into a first layer
        self.bn = self.hidden = self.out = None

    @property
    def is_identity(self) -> bool:
        return not self.layers

    @property
    def nonlinear(self) -> list[str]:
        """The layers that are not piecewise linear, by kind, in order, without repeats."""
        return list(dict.fromkeys(k for k in self.kinds if k in STACK_NONLINEAR))

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, None]:
        for layer in self.layers:
            z = layer(z)
        return z, None

    def jacobian(self, z: torch.Tensor) -> torch.Tensor:
        """B x out x in: the stack's linear map at each pooled vector of ``z`` (B x in), layer by
        layer. A LayerNorm ``g (u - mean u) / sigma + b`` is linear in ``u`` once ``sigma`` is held
        at its value (its exact rule, the LayerNorm scale frozen: its plain Jacobian would be
        degenerate, ``J u = 0`` by scale invariance, leaving everything to the bias); eval
        BatchNorm and Linear are affine; ReLU's derivative is its mask (exact); Hardswish, GELU
        and Tanh contribute their derivative at this input (first order)."""
        z = z.detach()
        jac = torch.eye(z.shape[1], dtype=z.dtype, device=z.device).expand(z.shape[0], -1, -1)
        for layer in self.layers:
            if isinstance(layer, nn.Linear):
                jac = torch.matmul(layer.weight, jac)
            elif isinstance(layer, nn.LayerNorm):
                sigma = torch.sqrt(z.var(1, unbiased=False, keepdim=True) + layer.eps)  # B x 1
                scale = 1.0 / sigma if layer.weight is None else layer.weight / sigma  # B x n
                jac = scale[:, :, None] * (jac - jac.mean(1, keepdim=True))
            elif isinstance(layer, nn.BatchNorm1d):
                jac = _eval_batchnorm(layer)[0][None, :, None] * jac
            else:  # elementwise: its derivative at this input
                with torch.enable_grad():
                    u = z.clone().requires_grad_(True)
                    (slope,) = torch.autograd.grad(layer(u).sum(), u)
                jac = slope[:, :, None] * jac
            z = layer(z)
        return jac
