"""DeML's parameter-free object attention (seed 004 Sec. 3.1, Eq. 2-3) and crop-and-zoom.

Reading of Eq. 3: the edge weights ``D[a, b] = ||u_a - u_b||`` (Eq. 2) are normalized over each
node's out-bound edges, so D is row-stochastic. Mass flows along out-bound edges ("the node
receives and diffuses mass via the inbound and outbound directed edges"), i.e. the proposal
evolves as ``M <- D^T M`` (``M^T <- M^T D``). The literal ``M <- D M`` with a row-stochastic D
would leave the uniform start unchanged; the transpose is the Markov chain whose stable state
(the Remark's eigenvector centrality) is the leading *left* eigenvector of D. Starting from the
uniform ``1 / (h w)``, ``steps`` (T = 10) iterations approximate that stationary distribution;
the result sums to one over positions. Several layers: each proposal is resized (bilinear) to a
common size, renormalized to sum to one, and the maps are averaged.

Crop-and-zoom (the ``⊙`` of Fig. 2): the box enclosing every position whose attention is at
least ``threshold`` times the map's mean (mean = the uniform level), scaled to image pixels, is
cropped and resized (bilinear, ``torchvision.ops.roi_align``) to ``size`` x ``size``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torchvision.ops import roi_align


def transition_matrix(feature_map: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Row-normalized pairwise-distance graph of Eq. 2: B x n x n, rows sum to one."""
    u = feature_map.flatten(2).transpose(1, 2).float()   # B x n x C
    dist = torch.cdist(u, u)                              # ||u_a - u_b||
    total = dist.sum(-1, keepdim=True)
    n = dist.shape[-1]
    uniform = torch.full_like(dist, 1.0 / n)
    return torch.where(total > eps, dist / total.clamp(min=eps), uniform)  # identical features: uniform


def _random_walk(feature_map: torch.Tensor, steps: int) -> torch.Tensor:
    """B x 1 x h x w proposal of one map after ``steps`` propagations from uniform (Eq. 3)."""
    b, _, h, w = feature_map.shape
    d = transition_matrix(feature_map)
    m = torch.full((b, 1, h * w), 1.0 / (h * w), device=d.device, dtype=d.dtype)
    for _ in range(steps):
        m = m @ d  # M^T <- M^T D
    return m.view(b, 1, h, w)


def random_walk_attention(feature_maps: torch.Tensor | Sequence[torch.Tensor], steps: int = 10,
                          size: tuple[int, int] | None = None) -> torch.Tensor:
    """Object-attention proposal (Eq. 2-3), B x 1 x H x W summing to one over positions.

    ``feature_maps``: one B x C x h x w map or several (seed 004 uses two layers). With one map
    and ``size`` None the proposal stays on its grid; otherwise every map's proposal is resized to
    ``size`` (default: the first map's grid), renormalized, and the proposals are averaged.
    """
    maps = [feature_maps] if isinstance(feature_maps, torch.Tensor) else list(feature_maps)
    if not maps:
        raise ValueError("random_walk_attention needs at least one feature map")
    proposals = [_random_walk(m, steps) for m in maps]
    if size is None and len(proposals) == 1:
        return proposals[0]
    size = tuple(size) if size is not None else tuple(proposals[0].shape[-2:])
    total = 0
    for p in proposals:
        if tuple(p.shape[-2:]) != size:
            p = F.interpolate(p, size=size, mode="bilinear", align_corners=False)
        total = total + p / p.sum((2, 3), keepdim=True)
    return total / len(proposals)


def attention_box(attention: torch.Tensor, image_size: tuple[int, int],
                  threshold: float = 1.0) -> torch.Tensor:
    """B x 4 boxes ``(x0, y0, x1, y1)`` in image pixels around the attended cells.

    A cell is attended when its value is at least ``threshold`` times the map's mean; the box
    covers those cells' full footprints (each cell spans ``H/h`` x ``W/w`` pixels).
    """
    att = attention[:, 0] if attention.dim() == 4 else attention  # B x h x w
    b, h, w = att.shape
    height, width = image_size
    keep = att >= threshold * att.mean((1, 2), keepdim=True)
    boxes = []
    for i in range(b):
        ys, xs = torch.nonzero(keep[i], as_tuple=True)
        if ys.numel() == 0:  # flat map: keep the whole image
            boxes.append([0.0, 0.0, float(width), float(height)])
            continue
        boxes.append([xs.min().item() * width / w, ys.min().item() * height / h,
                      (xs.max().item() + 1) * width / w, (ys.max().item() + 1) * height / h])
    return torch.tensor(boxes, dtype=torch.float32, device=attention.device)


def crop_and_zoom(image_tensor: torch.Tensor, attention: torch.Tensor, size: int,
                  threshold: float = 1.0) -> torch.Tensor:
    """The attended box of each image (``attention_box``) cropped and resized to ``size`` x ``size``.

    ``image_tensor``: B x 3 x H x W; ``attention``: B x 1 x h x w on any grid. Returns
    B x 3 x size x size (seed 004's finer-scale input).
    """
    boxes = attention_box(attention, tuple(image_tensor.shape[-2:]), threshold)
    rois = torch.cat([torch.arange(len(boxes), device=boxes.device, dtype=boxes.dtype)[:, None], boxes], 1)
    return roi_align(image_tensor, rois.to(image_tensor.dtype), output_size=(size, size),
                     spatial_scale=1.0, sampling_ratio=2, aligned=True)
