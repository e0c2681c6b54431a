"""Multi-layer attended head (seed 003 Sec. 3.1, Eq. 11, 13-14).

``u`` is the last hidden vector: the pooled last feature map (the configured gap/gmp/gem pooling;
seed 003 uses the pooled output of the last inception block). Each chosen map ``M^(i)``
(c_i x h_i x w_i, a backbone intermediate or ``"last"``) is attended to ``u`` with the simplified
additive attention of Eq. 11, ``S(q_j, u) = w_i^T tanh(W_i^(1) q_j + u)`` (W_i^(1): l x c_i, no
bias; sigma = tanh), softmax over the h_i*w_i positions (Eq. 13), and summarized by the weighted
mean ``p^(i) = sum_j a_j q_j`` (Eq. 14; the text calls p^(i) l-dimensional, but Eq. 14 weights
the c_i-dimensional q_j, which we follow). The inter-module fusion
concatenates ``[u, p^(1), ..., p^(m)]`` (we keep ``u`` itself, so the head contains the plain pooled
baseline) and the usual ``[BN] -> [FC+ReLU] -> Linear(D)`` projects it to the embedding.

Linearization with the attention weights and ReLU mask frozen: ``u``'s path is the pooling rule
on the last grid; layer i's position j contributes ``L_i a_j q_j`` (``L_i`` the column block of
the folded first linear map), which is added onto the last-grid cell containing j's centre:
row ``floor((r + 0.5) h / h_i)``, column likewise. Completeness holds for any grids. The cell
assignment is exact when the layer's grid is an integer multiple of the last grid (the strides
divide and the input size is a multiple of the last stride, e.g. ResNet layer2/layer3 onto
layer4 at 224 px): each intermediate cell then lies inside exactly one last-grid cell; otherwise
(e.g. inception_v3's unpadded grids) it goes to the cell containing its centre. These
contributions are in terms of the intermediate activations, not of the last map.
"""

from __future__ import annotations

import torch
from torch import nn

from .heads import Head, make_output
from .output import Linearization, ModelOutput
from .pooling import Pooling
from .projection import Projection


def cell_assignment(source: tuple[int, int], target: tuple[int, int], device=None) -> torch.Tensor:
    """0/1 matrix (target h*w) x (source h*w) sending each source cell to the target cell holding its centre."""
    (hs, ws), (ht, wt) = source, target
    rows = ((torch.arange(hs, device=device) + 0.5) * ht / hs).floor().long().clamp(max=ht - 1)
    cols = ((torch.arange(ws, device=device) + 0.5) * wt / ws).floor().long().clamp(max=wt - 1)
    target_index = (rows[:, None] * wt + cols[None, :]).flatten()
    matrix = torch.zeros(ht * wt, hs * ws, device=device)
    matrix[target_index, torch.arange(hs * ws, device=device)] = 1.0
    return matrix


class AdditiveAttention(nn.Module):
    """Eq. 11 + 13: softmax_j of ``w^T tanh(W1 q_j + u)`` over the positions of one map."""

    def __init__(self, channels: int, hidden_dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(channels, hidden_dim, 1, bias=False)  # W_i^(1)
        self.score = nn.Conv2d(hidden_dim, 1, 1, bias=False)        # w_i

    def forward(self, m: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        s = self.score(torch.tanh(self.proj(m) + u[:, :, None, None]))
        return s.flatten(1).softmax(-1)  # B x (h_i * w_i)


class MultiLayerHead(Head):
    """Seed 003's general discriminative feature head over named backbone maps."""

    def __init__(self, layers: dict[str, int], pooling: Pooling, projection: Projection) -> None:
        super().__init__()
        self.layers = list(layers)
        self.pooling = pooling
        u_dim = pooling.out_dim
        self.attend = nn.ModuleDict({self._key(n): AdditiveAttention(c, u_dim) for n, c in layers.items()})
        self.widths = [u_dim] + list(layers.values())
        self.projection = projection
        self.dim = projection.out_dim

    @staticmethod
    def _key(name: str) -> str:
        return name.replace(".", "_")  # ModuleDict keys may not contain dots

    def forward(self, features: dict[str, torch.Tensor]) -> ModelOutput:
        a = features["last"]
        u, frozen = self.pooling(a)
        pieces, attention, used = [u], {}, {}
        for name in self.layers:
            m = features[name]
            weights = self.attend[self._key(name)](m, u)
            pieces.append(torch.einsum("bn,bcn->bc", weights, m.flatten(2)))  # Eq. 14
            attention[f"multilayer/{name}"] = weights.view(m.shape[0], 1, *m.shape[-2:])
            used[name] = m
        raw, mask = self.projection(torch.cat(pieces, 1))
        if mask is not None:
            frozen["relu"] = mask
        return make_output(raw, a, intermediates=used, attention=attention, frozen=frozen)

    def linearize(self, out: ModelOutput) -> Linearization:
        a = out.feature_map
        grid = tuple(a.shape[-2:])
        weight, bias = self.projection.affine_in()
        blocks = torch.split(weight, self.widths, dim=1)
        parts = self.pooling.linear_parts(a, out.frozen, blocks[0])
        for name, block in zip(self.layers, blocks[1:]):
            m = out.intermediates[name]
            weights = out.attention[f"multilayer/{name}"].flatten(1)
            layer_parts = torch.einsum("bn,bcn,oc->bno", weights, m.flatten(2), block)
            if tuple(m.shape[-2:]) != grid:
                assign = cell_assignment(tuple(m.shape[-2:]), grid, a.device).to(layer_parts.dtype)
                layer_parts = torch.einsum("tn,bno->bto", assign, layer_parts)
            parts = parts + layer_parts
        parts, bias = self.projection.finish(parts, bias.expand(a.shape[0], -1), out.frozen.get("relu"))
        return self._result(parts, bias, out)
