"""Generic activation decomposition of a head without a closed-form rule (seed 000 Sec. 4).

For a head ``E = f(A)`` that is piecewise linear at this input (GAP, GMP, flatten, FC, ReLU,
eval BatchNorm, any composition), ``f(A) = J A + B`` where ``J`` is the Jacobian at ``A`` (the
linear part with the GMP/ReLU masks of this input frozen) and ``B`` the bias. Position
``(i, j)``'s contribution is the linear part applied to the map with only that position kept:

    C_ij = J[:, :, i, j] A[:, i, j]        i.e.  C_ij,d = sum_c A_c,ij dE_d / dA_c,ij

(gradient times activation per output dimension), and ``B = E - sum_ij C_ij``, so completeness
holds by construction. The Jacobian rows come from batched vector-Jacobian products
(``torch.autograd.grad(..., is_grads_batched=True)``) over chunks of output dimensions, all
images of a batch at once (in eval mode image b's embedding depends on its own map only), so
memory stays at ``chunk x B x C x h x w``.

For heads that are not piecewise linear (softmax attention, LayerNorm, GELU) this is the
first-order (Taylor) decomposition at ``A``; the remainder lands in ``B``. It is exact, and agrees
with the closed-form rules, for piecewise-linear heads, and for heads that are positively
homogeneous of degree 1 (GeM, and GeM followed by bias-free linear layers and ReLUs): there
Euler's theorem gives ``sum_ij C_ij = E``, so ``B = 0`` (:mod:`.homogeneity` tells them apart).
"""

from __future__ import annotations

from typing import Callable

import torch

HeadFn = Callable[[torch.Tensor], torch.Tensor]
"""Maps a feature map ``1 x C x h x w`` to the raw embedding ``1 x D`` (eval mode)."""


def gradient_x_activation(raw: torch.Tensor, leaf: torch.Tensor, budget: int = 1 << 27) -> torch.Tensor:
    """``B x (h*w) x D`` with ``C[b, n, d] = sum_c leaf[b, c, n] d raw[b, d] / d leaf[b, c, n]``,
    from a graph already built from ``leaf`` (B x C x h x w, requires grad) to ``raw`` (B x D);
    one chunk of output dimensions' gradients takes at most ``budget`` bytes."""
    b, d = raw.shape
    chunk = max(1, min(d, budget // max(leaf.numel() * 4, 1)))
    eye = torch.eye(d, dtype=raw.dtype, device=raw.device)
    act = leaf.detach().float()
    columns = []
    for start in range(0, d, chunk):
        grad_out = eye[start : start + chunk, None, :].expand(-1, b, -1)  # k x B x D
        try:
            (grads,) = torch.autograd.grad(raw, leaf, grad_outputs=grad_out, retain_graph=True,
                                           is_grads_batched=True)
        except RuntimeError:  # an op without a batching rule: one row at a time
            grads = torch.stack([torch.autograd.grad(raw, leaf, grad_outputs=g, retain_graph=True)[0]
                                 for g in grad_out])
        columns.append((grads.float() * act).sum(2).flatten(2))  # k x B x n
    return torch.cat(columns).permute(1, 2, 0).contiguous()  # B x n x D


def jacobian_decomposition(head_fn: HeadFn, feature_map: torch.Tensor,
                           budget: int = 1 << 27) -> tuple[torch.Tensor, torch.Tensor]:
    """``(contributions (h*w) x D, bias D)`` of one image's feature map ``1 x C x h x w``
    (``budget``: bytes of gradients per chunk of output dimensions)."""
    fmap = feature_map.detach().float()
    if fmap.dim() == 3:
        fmap = fmap[None]
    with torch.enable_grad():
        leaf = fmap.clone().requires_grad_(True)
        emb = head_fn(leaf).float()
        contributions = gradient_x_activation(emb, leaf, budget)[0]
    return contributions, emb[0].detach() - contributions.sum(0)
