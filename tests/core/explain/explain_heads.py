"""Tiny heads of our own with their closed-form decompositions (seed 000 Sec. 4, App. A.3),
used to test the generic Jacobian fallback and the Grad-CAM relations independently of
dmlviewer.core.models."""

from __future__ import annotations

import torch
from torch import nn


class TinyHead(nn.Module):
    """pooling (gap | gmp | flatten) -> [FC + ReLU] -> FC(bias) on a C x h x w map."""

    def __init__(self, pooling: str, channels: int = 6, grid: tuple[int, int] = (4, 5), dim: int = 8, hidden: int = 0):
        super().__init__()
        self.pooling = pooling
        self.grid = grid
        width = channels * grid[0] * grid[1] if pooling == "flatten" else channels
        self.hidden = nn.Linear(width, hidden) if hidden else None
        self.fc = nn.Linear(hidden or width, dim)

    def pool(self, a: torch.Tensor) -> torch.Tensor:
        if self.pooling == "gap":
            return a.mean(dim=(2, 3))
        if self.pooling == "gmp":
            return a.amax(dim=(2, 3))
        return a.flatten(1)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        x = self.pool(a)
        if self.hidden is not None:
            x = torch.relu(self.hidden(x))
        return self.fc(x)

    def exact(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Closed-form ``(contributions (h*w) x D, bias D)`` for one map ``1 x C x h x w``."""
        a = a[0]
        c, h, w = a.shape
        if self.pooling == "gap":
            per_pos = a.flatten(1).T / (h * w)  # (hw) x C, GAP: A_ij / hw
            lin = lambda v: v  # noqa: E731
        elif self.pooling == "gmp":
            flat = a.flatten(1)
            mask = torch.zeros_like(flat)
            mask[torch.arange(c), flat.argmax(1)] = 1.0  # max mask M (App. A.3 Eq. 8)
            per_pos = (flat * mask).T
            lin = lambda v: v  # noqa: E731
        else:
            flat = a.flatten(1)  # C x hw; flatten puts channel c, position p at c*hw + p
            per_pos = None
        weight, bias = self.fc.weight, self.fc.bias
        if self.hidden is not None:
            pre = self.hidden(self.pool(a[None]))[0]
            gate = (pre > 0).float()
            weight = weight @ (gate[:, None] * self.hidden.weight)
            bias = bias + self.fc.weight @ (gate * self.hidden.bias)
        if per_pos is not None:
            contrib = lin(per_pos) @ weight.T
        else:
            w3 = weight.reshape(weight.shape[0], c, h * w)  # D x C x hw
            contrib = torch.einsum("dcp,cp->pd", w3, flat)
        return contrib.detach(), bias.detach()


def random_map(channels: int = 6, grid: tuple[int, int] = (4, 5), seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.relu(torch.randn(1, channels, *grid, generator=g)) + 0.01 * torch.rand(1, channels, *grid, generator=g)
