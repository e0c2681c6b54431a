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
