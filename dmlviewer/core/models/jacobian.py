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
memory stays at ``chunk x B x C x h x w``. A head that pools each channel first (GAP, GMP, GeM,
then anything) has its rows taken at the pooled vector instead
(:func:`pooled_gradient_x_activation`: the same numbers, ``h*w`` times fewer).

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


def pooled_gradient_x_activation(raw: torch.Tensor, pooled: torch.Tensor, leaf: torch.Tensor,
                                 budget: int = 1 << 27) -> torch.Tensor:
    """:func:`gradient_x_activation` (same ``B x (h*w) x D``) for a head that pools each channel
    on its own first: ``raw = g(p)`` with ``p_c`` (``pooled``, B x C or B x C x 1 x 1) a function
    of channel ``c`` of ``leaf`` only (GAP, GMP, GeM; :meth:`.tail.TailRecorder.pooled`). Then

        dE_d/dA_c,ij = G_dc w_c,ij,   G = dE/dp (D x C),   w_c,ij = dp_c/dA_c,ij

    and ``w`` is one vector-Jacobian product of ``p`` with ones (``p_c`` reads channel ``c``
    only), so ``C_ij = G (w_ij * A_ij)``. For GAP + Linear this is the closed form
    ``C_ij = W A_ij / hw``. With fewer positions than output dimensions, ``G`` is applied to the
    ``h*w`` vectors ``w_ij * A_ij`` as Jacobian-vector products (the backward pass of the head's
    vector-Jacobian product, differentiated again: exact, since a backward pass is linear in its
    incoming gradient); otherwise the rows of ``G`` are taken at the pooled vector (``D x B x C``
    numbers instead of ``D x B x C x h x w``) and the contributions are one matrix product."""
    b, d = raw.shape
    channels = leaf.shape[1]
    (weights,) = torch.autograd.grad(pooled, leaf, grad_outputs=torch.ones_like(pooled), retain_graph=True)
    weighted = (weights.float() * leaf.detach().float()).flatten(2)  # B x C x n: w * A
    n = weighted.shape[2]
    if n < d and n * pooled.numel() * 4 <= budget:
        tangents = weighted.permute(2, 0, 1).reshape(n, *pooled.shape).to(pooled.dtype)  # n x (p's shape)
        products = jacobian_vector_products(raw, pooled, tangents)
        if products is not None:
            return products.float().permute(1, 0, 2).contiguous()  # B x n x D
    chunk = max(1, min(d, budget // max(pooled.numel() * 4, 1)))
    eye = torch.eye(d, dtype=raw.dtype, device=raw.device)
    rows = []
    for start in range(0, d, chunk):
        grad_out = eye[start : start + chunk, None, :].expand(-1, b, -1)  # k x B x D
        try:
            (grads,) = torch.autograd.grad(raw, pooled, grad_outputs=grad_out, retain_graph=True,
                                           is_grads_batched=True)
        except RuntimeError:  # an op without a batching rule: one row at a time
            grads = torch.stack([torch.autograd.grad(raw, pooled, grad_outputs=g, retain_graph=True)[0]
                                 for g in grad_out])
        rows.append(grads.float().reshape(-1, b, channels))  # k x B x C
    jac = torch.cat(rows).permute(1, 2, 0)  # B x C x D: dE/dp
    return torch.bmm(weighted.transpose(1, 2), jac).contiguous()  # B x n x D


def jacobian_vector_products(raw: torch.Tensor, inputs: torch.Tensor, tangents: torch.Tensor) -> torch.Tensor | None:
    """``k x B x D``: the Jacobian of ``raw`` (B x D) with respect to ``inputs`` (in a graph built
    from it) applied to the ``k`` tangents (``k x inputs.shape``), as the derivative of the
    vector-Jacobian product with respect to its incoming gradient (reverse mode twice: a
    backward pass is linear in that gradient, so this is exact). ``None`` when a backward op of
    the graph cannot be differentiated again or batched."""
    try:
        with torch.enable_grad():
            probe = torch.zeros_like(raw, requires_grad=True)
            (vjp,) = torch.autograd.grad(raw, inputs, grad_outputs=probe, retain_graph=True, create_graph=True)
            (products,) = torch.autograd.grad(vjp, probe, grad_outputs=tangents, retain_graph=True,
                                              is_grads_batched=True)
    except RuntimeError:
        return None
    return products


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
