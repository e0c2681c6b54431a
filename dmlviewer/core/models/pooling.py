"""Global pooling of a feature map, and its exact per-position linear form (seed 000 Sec. 4, App. A.3).

Each pooling returns the pooled vector ``z`` and the quantities frozen at this input; with them,
``linear_parts(x, frozen, W)`` gives, for every position n of the grid, ``W z_n`` where
``z = sum_n z_n`` exactly:

- GAP: ``z_n = x_n / (hw)`` (App. A.3 Eq. 6-7).
- GMP: ``z_n = M_n * x_n`` with M the per-channel argmax mask (App. A.3 Eq. 8); ties keep the
  single index ``torch.max`` returns, so each channel has exactly one non-zero position.
- GeM: ``g_k = (mean_n x_nk^p)^(1/p)`` on ``x`` clamped to ``>= eps``; with ``g`` frozen,
  ``z_nk = x_nk^(p-1) / (hw g_k^(p-1)) * x_nk``, which sums to ``g_k`` exactly. The clamp means
  positions with activation below ``eps`` count as ``eps`` (they are post-ReLU zeros in practice).
  ``p`` is a learnable parameter (initial value ``gem_p``) or a fixed buffer (``gem_learnable``
  False); it is clamped to ``>= 1`` where used.
- flatten: ``z`` is ``x`` reshaped channel-major (``z[c*hw + n] = x[c, n]``), so the next linear
  map has position-specific weights ``W_n`` (seed 000 Sec. 4.1); the grid must be the one fixed at
  build time.
"""

from __future__ import annotations

import torch
from torch import nn

POOLINGS = ("gap", "gmp", "gem", "flatten")


class Pooling(nn.Module):
    """Global pooling ``kind`` (gap, gmp, gem, flatten) over a B x C x h x w map."""

    def __init__(self, kind: str, channels: int, grid: tuple[int, int] | None = None,
                 gem_p: float = 3.0, gem_learnable: bool = True, eps: float = 1e-6) -> None:
        super().__init__()
        if kind not in POOLINGS:
            raise ValueError(f"unknown pooling {kind!r}; choose from {', '.join(POOLINGS)}")
        if kind == "flatten" and grid is None:
            raise ValueError("flatten pooling needs the feature grid fixed at build time")
        self.kind = kind
        self.channels = channels
        self.grid = tuple(grid) if grid is not None else None
        self.eps = eps
        if kind == "gem":
            p = torch.tensor(float(gem_p))
            if gem_learnable:
                self.p = nn.Parameter(p)
            else:
                self.register_buffer("p", p)

    @property
    def out_dim(self) -> int:
        if self.kind == "flatten":
            return self.channels * self.grid[0] * self.grid[1]
        return self.channels

    def _check_grid(self, x: torch.Tensor) -> None:
        if self.kind == "flatten" and tuple(x.shape[-2:]) != self.grid:
            raise ValueError(
                f"flatten head built for a {self.grid[0]}x{self.grid[1]} grid got "
                f"{x.shape[-2]}x{x.shape[-1]}: feed images of the configured image_size"
            )

    def _gem_power(self) -> torch.Tensor:
        return self.p.clamp(min=1.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Pooled B x out_dim vector and the frozen quantities (``gmp_index`` or ``gem``)."""
        self._check_grid(x)
        flat = x.flatten(2)
        if self.kind == "gap":
            return flat.mean(-1), {}
        if self.kind == "gmp":
            z, index = flat.max(-1)
            return z, {"gmp_index": index}
        if self.kind == "gem":
            p = self._gem_power()
            z = flat.clamp(min=self.eps).pow(p).mean(-1).pow(1.0 / p)
            return z, {"gem": z}
        return x.flatten(1), {}

    def position_parts(self, x: torch.Tensor, frozen: dict[str, torch.Tensor]) -> torch.Tensor:
        """B x C x n with ``sum_n parts[:, :, n] = z`` (per-channel poolings only)."""
        flat = x.flatten(2)
        n = flat.shape[-1]
        if self.kind == "gap":
            return flat / n
        if self.kind == "gmp":
            index = frozen["gmp_index"].unsqueeze(-1)
            return torch.zeros_like(flat).scatter_(-1, index, flat.gather(-1, index))
        if self.kind == "gem":
            p = self._gem_power()
            g = frozen["gem"].unsqueeze(-1)
            return flat.clamp(min=self.eps).pow(p) / (n * g.pow(p - 1.0))
        raise ValueError("flatten has no per-channel parts")

    def linear_parts(self, x: torch.Tensor, frozen: dict[str, torch.Tensor], weight: torch.Tensor,
                     scale: torch.Tensor | None = None) -> torch.Tensor:
        """B x n x out: position n's share ``W z_n`` of ``W z`` (no bias), ``W = weight * scale``.

        ``scale`` is an optional per-input factor (an eval-mode BatchNorm before ``weight``).
        """
        if self.kind != "flatten":
            if scale is not None:
                weight = weight * scale
            # B x n x C times C x out: one batched product (the einsum's permutations cost a
            # fifth more at one thread)
            return torch.matmul(self.position_parts(x, frozen).transpose(1, 2), weight.T)
        flat = x.flatten(2)
        if scale is not None:
            flat = flat * scale.view(self.channels, -1)
        # position-major weights (n x C x out) make this one batched matrix product
        return torch.matmul(flat.permute(2, 0, 1), self._position_major(weight)).transpose(0, 1)

    def _position_major(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` (out x C*n) as n x C x out, contiguous; cached while the weight is unchanged
        (the copy costs more than the product for large maps)."""
        if weight.requires_grad and torch.is_grad_enabled():
            return weight.reshape(weight.shape[0], self.channels, -1).permute(2, 1, 0)
        key = (weight.data_ptr(), weight._version, weight.dtype, weight.device, tuple(weight.shape))
        cached = getattr(self, "_weight_cache", None)
        if cached is None or cached[0] != key:
            value = weight.detach().reshape(weight.shape[0], self.channels, -1).permute(2, 1, 0).contiguous()
            self._weight_cache = cached = (key, value)
        return cached[1]
