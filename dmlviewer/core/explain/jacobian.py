"""Generic activation decomposition of a head without an exact rule (seed 000 Sec. 4).

For a head ``E = f(A)`` that is piecewise linear at this input (GAP, GMP, flatten, FC, ReLU,
eval BatchNorm, any composition), ``f(A) = J A + B`` where ``J`` is the Jacobian at ``A`` (the
linear part with the GMP/ReLU masks of this input frozen) and ``B`` the bias. Position
``(i, j)``'s contribution is the linear part applied to the map with only that position kept:

    C_ij = J[:, :, i, j] A[:, i, j]        i.e.  C_ij,d = sum_c A_c,ij dE_d / dA_c,ij

(gradient times activation per output dimension), and ``B = E - sum_ij C_ij``, so completeness
holds by construction. The Jacobian rows are computed by batched vector-Jacobian products
(``torch.func.vjp`` under ``vmap``) in chunks of output dimensions, so memory stays at
``chunk x C x h x w``.

For heads that are not piecewise linear (softmax attention, GeM) this is the first-order
(Taylor) decomposition at ``A``; the remainder lands in ``B``. It is exact, and agrees with the
closed-form rules, for piecewise-linear heads only.
"""

from __future__ import annotations

import torch
from torch.func import vjp, vmap

from dmlviewer.core.explain.gradcam import HeadFn


def jacobian_decomposition(
    head_fn: HeadFn, feature_map: torch.Tensor, chunk: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(contributions (h*w) x D, bias D)`` of one image's feature map ``1 x C x h x w``."""
    fmap = feature_map.detach().float()
    if fmap.dim() == 3:
        fmap = fmap[None]
    with torch.enable_grad():
        emb, pullback = vjp(lambda a: head_fn(a)[0].float(), fmap)
    emb = emb.detach()
    dim = emb.shape[0]
    eye = torch.eye(dim, dtype=emb.dtype, device=emb.device)
    columns = []
    for rows in eye.split(chunk):
        (grads,) = vmap(pullback)(rows)  # k x 1 x C x h x w
        columns.append((grads[:, 0] * fmap[0]).sum(1).flatten(1))  # k x (h*w)
    contributions = torch.cat(columns).T.contiguous()
    bias = emb - contributions.sum(0)
    return contributions, bias
