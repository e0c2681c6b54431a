"""Attention maps of a model, resized to the image (seed 001 Eq. 9-10, seed 003, seed 004).

Every spatial attention map the head returns in ``ModelOutput.attention`` is folded to its grid
(Eq. 9: the models package already returns ``B x P x h x w``) and resized to the image by
bilinear interpolation (Eq. 10; alignment of :mod:`.grid`):

- ``a_grouping``: A-grouping's per-group attention ``softmax(q_p^T K)`` (P maps).
- ``g_grouping_gate`` / ``g_grouping_gate_mean``: G-grouping's gate of each group's strongest
  channel (seed 001 Sec. 4.4) and the gate averaged over channels.
- ``c_grouping_map``: C-grouping's feature map of each group's strongest weighted channel (the
  channel weights themselves, ``c_grouping_channels``, are not spatial and are left out).
- ``multilayer/<layer>``: the seed-003 head's per-layer attention (one map per layer, each on
  its own grid).
- ``random_walk``: DeML's parameter-free object attention on the last feature map (seed 004
  Eq. 2-3, ``T = 10`` steps), added for every model.

Values are kept as the model computed them (softmax weights sum to one over the grid; gates
lie in (0, 1)); display code normalizes.
"""

from __future__ import annotations

import numpy as np
import torch

from dmlviewer.core.explain.grid import upsample_stack
from dmlviewer.core.models import ModelOutput, random_walk_attention

RANDOM_WALK_STEPS = 10


def attention_maps(
    model: torch.nn.Module, out: ModelOutput, image_shape: tuple[int, int], index: int = 0
) -> dict[str, np.ndarray]:
    """``name -> P x H x W`` float32 maps of image ``index`` of ``out``'s batch."""
    maps: dict[str, np.ndarray] = {}
    for name, tensor in out.attention.items():
        if tensor.dim() != 4:  # channel weights (B x P x C): not a spatial map
            continue
        maps[name] = upsample_stack(tensor[index].detach().float().cpu().numpy(), image_shape)
    with torch.no_grad():
        walk = random_walk_attention(out.feature_map[index : index + 1].detach(), steps=RANDOM_WALK_STEPS)
    maps["random_walk"] = upsample_stack(walk[0].float().cpu().numpy(), image_shape)
    return maps
