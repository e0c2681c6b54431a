"""Grad-CAM for embedding networks (seed 000 Sec. 4.3, App. A.4-A.5).

All three maps of one image ``q`` are taken against a fixed other embedding ``Er`` with the
gradient of the head only (the feature map ``A`` is the leaf, the backbone is not
differentiated), on the feature grid:

- ``gradcam``: target the cosine ``S = Eq.Er / (|Eq||Er|)`` (Eq. 10-12): channel weights
  ``alpha_k = mean_ij dS/dA_ijk`` (the GAP over the gradient), map ``sum_k alpha_k A_ijk``.
- ``gradcam_nonorm``: the same with the target ``T = Eq.Er / Z``, ``Z = |Eq||Er|`` held
  constant (the paper's "no norm": the gradient of the dot product, without the Jacobian of
  the L2 normalization, Eq. 13). Dividing by the constant ``Z`` only rescales the map; it
  puts it on the scale of the decomposition maps.
- ``rgradcam``: gradient times activation without the GAP, ``sum_k A_ijk dT/dA_ijk`` with the
  same target ``T``.

Exactness (Sec. 4.3): when the head is piecewise linear in ``A`` (GAP, GMP, flatten, FC, ReLU,
eval BatchNorm), ``dT/dA_ij = W_ij^T Er / Z`` with the masks of this input, so
``rgradcam_ij = (W_ij A_ij) . Er / Z = Cq_ij . Er / Z``: exactly the "Decomposition+Bias" map.
For a GAP head the GAP over the gradient changes nothing, so ``gradcam_nonorm`` equals it too;
for GMP and flatten heads it does not (App. A.4, Eq. 4 and 9). Heads that are not piecewise
linear (attention, GeM) give maps that differ from the decomposition.

The maps are returned signed; Grad-CAM's usual ReLU is left to the caller (``positive``
views), so the negative evidence stays available. For the localization protocol the sign does
not matter: maps are normalized to their maximum and thresholded at a positive level.
"""

from __future__ import annotations

import torch

from dmlviewer.core.models.jacobian import HeadFn

def gradcam_maps(head_fn: HeadFn, feature_map: torch.Tensor, other_raw: torch.Tensor) -> dict[str, torch.Tensor]:
    """The three Grad-CAM maps (``h x w``) of one image against the other image's raw embedding
    ``other_raw`` (``D``), plus the channel weights ``weights_cosine`` and ``weights_dot`` (``C``:
    the GAP of the two gradients, what grad-weight transfer stores)."""
    grads = target_gradients(head_fn, feature_map, other_raw)
    fmap = feature_map.detach()[0].float()
    out = {}
    for name, key in (("gradcam", "cosine"), ("gradcam_nonorm", "dot")):
        weights = grads[key].mean(dim=(1, 2))
        out[name] = torch.einsum("c,chw->hw", weights, fmap)
        out[f"weights_{key}"] = weights
    out["rgradcam"] = (grads["dot"] * fmap).sum(0)
    return out


def target_gradients(head_fn: HeadFn, feature_map: torch.Tensor, other_raw: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradients ``C x h x w`` of the cosine target and of the dot target ``Eq.Er / Z`` (``Z``
    constant) with respect to the feature map, from one forward pass of the head."""
    with torch.enable_grad():
        leaf = feature_map.detach().float().clone().requires_grad_(True)
        emb = head_fn(leaf)[0].float()
        other = other_raw.detach().float().reshape(-1).to(emb.device)
        norm_q = emb.detach().norm().clamp_min(1e-30)
        norm_r = other.norm().clamp_min(1e-30)
        z = norm_q * norm_r
        cos = emb.detach() @ other / z
        # d cos / d Eq = Er / Z - cos * Eq / |Eq|^2 ; d (Eq.Er/Z) / d Eq = Er / Z (Eq. 11-13)
        v_dot = other / z
        v_cos = v_dot - cos * emb.detach() / norm_q**2
        (g_cos,) = torch.autograd.grad(emb, leaf, grad_outputs=v_cos, retain_graph=True)
        (g_dot,) = torch.autograd.grad(emb, leaf, grad_outputs=v_dot)
    return {"cosine": g_cos[0], "dot": g_dot[0]}


def transferred_map(weights: torch.Tensor, feature_map: torch.Tensor) -> torch.Tensor:
    """Grad-CAM map ``sum_k w_k A_ijk`` of a feature map (``1 x C x h x w`` or ``C x h x w``) from
    channel weights computed elsewhere (seed 002: no backward pass for this image)."""
    fmap = feature_map.detach().float()
    if fmap.dim() == 4:
        fmap = fmap[0]
    return torch.einsum("c,chw->hw", weights.float().to(fmap.device), fmap)
