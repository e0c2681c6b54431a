"""Embedding heads on the last feature map: plain pooling and the grouping heads of seed 001.

All grouping heads produce P groups of ``Dg = D // P`` dimensions; group p is
``embedding_raw[:, p*Dg:(p+1)*Dg]``. Every head has an exact affine form at a given input with
its masks, gates and attention frozen (seed 000 Sec. 4), returned by ``linearize``.

Readings chosen where the papers leave room (seed 001 Sec. 2.3 and 4 describe the baselines):

- N-grouping: pooling -> [BN] -> [FC+ReLU] -> Linear(D).
- M-grouping (BIER): the same stack with the last layer read as P linear projections of the
  pooled feature, stacked: one ``Linear(D)`` whose row block p is group p. It differs from N only
  in exposing groups (the losses treat them separately).
- G-grouping (ABE): per group a gate ``sigmoid(conv1x1 -> ReLU -> conv3x3 -> ReLU -> conv1x1)`` of
  size C x h x w (spatial and channel) multiplies the map; the gated map is pooled and projected by
  the group's own ``[BN] -> [FC+ReLU] -> Linear(Dg)``. The gate networks of the P groups run as
  grouped convolutions (bottleneck width ``max(C // 16, 16)`` per group).
- C-grouping (DeML's channel-attention module, seed 004 Sec. 3.2, placed on the last map as in
  seed 001's baseline): per group ``w_p = sigmoid(W2 relu(W1 avgpool(A)))`` (W1: 64 x C,
  W2: C x 64) reweights channels before pooling and the group's projection.
- A-grouping (seed 001 Eq. 5-8): ``K = conv1x1(A)`` (D_K = Dg), ``V = conv1x1(A)`` (D_V = Dg),
  learnable queries Q (D_K x P), ``a = softmax(Q^T K)`` over the h*w positions *without* the
  1/sqrt(D_K) scaling (Eq. 7 has none), ``F = a V^T`` (Eq. 8). Following Eq. 8, group p's
  embedding is ``f_p`` itself: no projection follows, unless ``bn``/``hidden`` are asked for, in
  which case each group gets its own ``[BN] -> [FC+ReLU -> Linear(Dg)]``. ``pooling`` is not used:
  the attention is the pooling.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .output import FIRST_ORDER, Linearization, ModelOutput
from .pooling import Pooling
from .projection import LayerStack, Projection


def make_output(raw: torch.Tensor, feature_map: torch.Tensor, groups: torch.Tensor | None = None,
            **kwargs) -> ModelOutput:
    """A ModelOutput with ``embedding = normalize(raw)``."""
    return ModelOutput(F.normalize(raw, dim=1), raw, feature_map, groups, **kwargs)


_output = make_output  # earlier name, imported by tests/core/explain/test_explain_pair.py


def project_groups(projections: nn.ModuleList, features: torch.Tensor, frozen: dict) -> torch.Tensor:
    """Run group p's projection on ``features[:, p]`` (B x P x d) and stack the results
    (B x P x Dg); each projection's ReLU mask, when it has one, is kept in ``frozen`` as
    ``relu.<p>`` for :meth:`linearize` (seed 000 Sec. 4.2: masks computed once per image)."""
    outs = []
    for p, proj in enumerate(projections):
        y, mask = proj(features[:, p])
        outs.append(y)
        if mask is not None:
            frozen[f"relu.{p}"] = mask
    return torch.stack(outs, 1)


class Head(nn.Module):
    """Base: ``forward(features) -> ModelOutput``; ``linearize(out) -> Linearization``."""

    dim: int
    num_groups: int | None = None  # None: no grouping

    @property
    def group_slices(self) -> list[slice]:
        if not self.num_groups:
            return [slice(0, self.dim)]
        dg = self.dim // self.num_groups
        return [slice(p * dg, (p + 1) * dg) for p in range(self.num_groups)]

    def linearize(self, out: ModelOutput) -> Linearization:
        raise NotImplementedError(f"{type(self).__name__} has no exact linearization rule")

    @staticmethod
    def _result(parts: torch.Tensor, bias: torch.Tensor, out: ModelOutput) -> Linearization:
        return Linearization(parts, bias, tuple(out.feature_map.shape[-2:]))


class PooledHead(Head):
    """N-grouping (``groups=None``) and M-grouping (``groups=P``): pooling -> projection."""

    def __init__(self, pooling: Pooling, projection: Projection, groups: int | None = None) -> None:
        super().__init__()
        self.pooling = pooling
        self.projection = projection
        self.dim = projection.out_dim
        self.num_groups = groups

    def forward(self, features: dict[str, torch.Tensor]) -> ModelOutput:
        a = features["last"]
        z, frozen = self.pooling(a)
        raw, mask = self.projection(z)
        if mask is not None:
            frozen["relu"] = mask
        groups = raw.view(raw.shape[0], self.num_groups, -1) if self.num_groups else None
        return make_output(raw, a, groups, frozen=frozen)

    def linearize(self, out: ModelOutput) -> Linearization:
        a = out.feature_map
        if isinstance(self.projection, LayerStack) and not self.projection.is_identity:
            return self._first_order(out)
        if self.projection.out is None and self.projection.hidden is None:  # no projection (dim 0)
            parts = self.pooling.position_parts(a, out.frozen).transpose(1, 2)
            parts, bias = self.projection.linearize(parts, parts.new_zeros(parts.shape[0], parts.shape[2]), None)
            return self._result(parts, bias, out)
        scale, weight, bias = self.projection.first_layer()
        parts = self.pooling.linear_parts(a, out.frozen, weight, scale)
        parts, bias = self.projection.finish(parts, bias.expand(a.shape[0], -1), out.frozen.get("relu"))
        return self._result(parts, bias, out)

    def _first_order(self, out: ModelOutput) -> Linearization:
        """A :class:`LayerStack` (LayerNorm, Hardswish, ...) on the pooled vector: position n's
        share is the stack's linear map at this input's pooled vector ``z``
        (:meth:`LayerStack.jacobian`) applied to n's share ``z_n`` of ``z`` (``C_n = J z_n``,
        gradient x activation, as :func:`.jacobian.pooled_gradient_x_activation` computes for a
        head that pools each channel first); the bias is ``E - sum_n C_n``, so completeness holds
        by construction. Exact (ReLU masks and LayerNorm scales frozen) unless a Hardswish, GELU
        or Tanh is in the stack: then first order, the Taylor remainder in the bias."""
        a = out.feature_map
        z, _ = self.pooling(a)  # GMP/GeM positions and values are those of this input
        jac = self.projection.jacobian(z).to(a.dtype)  # B x D x C
        parts = torch.bmm(self.pooling.position_parts(a, out.frozen).transpose(1, 2), jac.transpose(1, 2))
        bias = out.embedding_raw.detach() - parts.sum(1)
        nonlinear = self.projection.nonlinear
        if not nonlinear:
            return self._result(parts, bias, out)
        return Linearization(parts, bias, tuple(a.shape[-2:]), rule=FIRST_ORDER,
                             reason="not piecewise linear: " + ", ".join(nonlinear))


# --------------------------------------------------------------------------- gated (G, C)

class SpatialChannelGate(nn.Module):
    """G-grouping gates (ABE): B x P x C x h x w in (0, 1), one small conv net per group."""

    def __init__(self, channels: int, groups: int) -> None:
        super().__init__()
        width = max(channels // 16, 16)
        self.groups = groups
        self.net = nn.Sequential(
            nn.Conv2d(channels, groups * width, 1),
            nn.ReLU(inplace=True),
            nn.Conv2d(groups * width, groups * width, 3, padding=1, groups=groups),
            nn.ReLU(inplace=True),
            nn.Conv2d(groups * width, groups * channels, 1, groups=groups),
        )

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        b, c, h, w = a.shape
        return torch.sigmoid(self.net(a)).view(b, self.groups, c, h, w)

    def maps(self, gate: torch.Tensor, gated: torch.Tensor, a: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per group the gate of its strongest channel (largest summed gated response, as seed 001
        Sec. 4.4 visualizes), and the gate averaged over channels; both B x P x h x w."""
        strongest = gated.flatten(3).sum(-1).argmax(-1)  # B x P
        index = strongest[:, :, None, None, None].expand(-1, -1, 1, *gate.shape[-2:])
        return {"g_grouping_gate": gate.gather(2, index).squeeze(2),
                "g_grouping_gate_mean": gate.mean(2)}


class ChannelGate(nn.Module):
    """C-grouping weights (DeML CAM, seed 004 Sec. 3.2): B x P x C x 1 x 1 in (0, 1)."""

    def __init__(self, channels: int, groups: int, width: int = 64) -> None:
        super().__init__()
        self.groups = groups
        self.squeeze = nn.ModuleList(nn.Linear(channels, width) for _ in range(groups))
        self.excite = nn.ModuleList(nn.Linear(width, channels) for _ in range(groups))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        s = a.mean((2, 3))
        w = torch.stack([torch.sigmoid(e(F.relu(q(s)))) for q, e in zip(self.squeeze, self.excite)], 1)
        return w[..., None, None]

    def maps(self, gate: torch.Tensor, gated: torch.Tensor, a: torch.Tensor) -> dict[str, torch.Tensor]:
        """Channel weights (B x P x C) and, per group, the feature map of its strongest weighted
        channel (B x P x h x w)."""
        weights = gate[..., 0, 0]
        strongest = gated.flatten(3).sum(-1).argmax(-1)  # B x P
        index = strongest[:, :, None, None].expand(-1, -1, *a.shape[-2:])
        return {"c_grouping_channels": weights, "c_grouping_map": a.gather(1, index)}


class GatedGroupingHead(Head):
    """G- and C-grouping: group p pools ``gate_p * A`` and projects it with its own projection."""

    def __init__(self, gate: nn.Module, pooling: Pooling, projections: list[Projection]) -> None:
        super().__init__()
        self.gate = gate
        self.pooling = pooling
        self.projections = nn.ModuleList(projections)
        self.num_groups = len(projections)
        self.dim = sum(p.out_dim for p in projections)

    def _gated(self, a: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return gate * a.unsqueeze(1)  # B x P x C x h x w

    def forward(self, features: dict[str, torch.Tensor]) -> ModelOutput:
        a = features["last"]
        b, num = a.shape[0], self.num_groups
        gate = self.gate(a)
        gated = self._gated(a, gate)
        z, pool_frozen = self.pooling(gated.flatten(0, 1))
        z = z.view(b, num, -1)
        frozen = {"gate": gate, **{k: v.unflatten(0, (b, num)) for k, v in pool_frozen.items()}}
        groups = project_groups(self.projections, z, frozen)
        return make_output(groups.flatten(1), a, groups, frozen=frozen,
                       attention=self.gate.maps(gate, gated, a))

    def linearize(self, out: ModelOutput) -> Linearization:
        a, frozen = out.feature_map, out.frozen
        gated = self._gated(a, frozen["gate"])
        parts, biases = [], []
        for p, proj in enumerate(self.projections):
            pool_frozen = {k: frozen[k][:, p] for k in ("gmp_index", "gem") if k in frozen}
            scale, weight, bias = proj.first_layer()
            part = self.pooling.linear_parts(gated[:, p], pool_frozen, weight, scale)
            part, bias = proj.finish(part, bias.expand(a.shape[0], -1), frozen.get(f"relu.{p}"))
            parts.append(part)
            biases.append(bias)
        return self._result(torch.cat(parts, -1), torch.cat(biases, -1), out)


# --------------------------------------------------------------------------- A-grouping

class AttentionGroupingHead(Head):
    """A-grouping (seed 001 Eq. 5-8): learnable queries attend to the key map; groups are
    attention-weighted means of the value map."""

    def __init__(self, channels: int, groups: int, group_dim: int, bn: bool = False,
                 hidden: int = 0) -> None:
        super().__init__()
        key_dim = group_dim
        self.key = nn.Conv2d(channels, key_dim, 1)
        self.value = nn.Conv2d(channels, group_dim, 1)
        self.queries = nn.Parameter(torch.randn(key_dim, groups) / key_dim ** 0.5)  # Q: D_K x P
        self.tails = nn.ModuleList(Projection(group_dim, group_dim, bn, hidden, final=False)
                                   for _ in range(groups)) if (bn or hidden) else None
        self.num_groups = groups
        self.dim = group_dim * groups

    def attention(self, a: torch.Tensor) -> torch.Tensor:
        """A = softmax(Q^T K) over positions (Eq. 7): B x P x (h*w)."""
        keys = self.key(a).flatten(2)
        return torch.einsum("kp,bkn->bpn", self.queries, keys).softmax(-1)

    def forward(self, features: dict[str, torch.Tensor]) -> ModelOutput:
        a = features["last"]
        attn = self.attention(a)
        values = self.value(a).flatten(2)
        groups = torch.einsum("bpn,bdn->bpd", attn, values)  # F = A V^T (Eq. 8)
        frozen = {}
        if self.tails is not None:
            groups = project_groups(self.tails, groups, frozen)
        maps = {"a_grouping": attn.view(*attn.shape[:2], *a.shape[-2:])}
        return make_output(groups.flatten(1), a, groups, frozen=frozen, attention=maps)

    def linearize(self, out: ModelOutput) -> Linearization:
        """With a frozen, ``f_p = sum_n a_pn (W_v A_n + b_v)``: ``C^p_n = a_pn W_v A_n`` and the
        bias is ``b_v sum_n a_pn`` (= b_v, the softmax sums to one)."""
        a = out.feature_map
        attn = out.attention["a_grouping"].flatten(2)  # B x P x n
        weight = self.value.weight.flatten(1)
        projected = torch.matmul(a.flatten(2).transpose(1, 2), weight.T)  # B x n x Dg
        if self.tails is None:  # all groups at once (B x n x P x Dg, group-major in D): no loop, one cat less
            parts = attn.transpose(1, 2)[..., None] * projected[:, :, None]
            bias = attn.sum(-1)[..., None] * self.value.bias  # B x P x Dg
            return self._result(parts.flatten(2), bias.flatten(1), out)
        parts, biases = [], []
        for p in range(self.num_groups):
            part = attn[:, p, :, None] * projected
            bias = attn[:, p].sum(-1, keepdim=True) * self.value.bias
            part, bias = self.tails[p].linearize(part, bias, out.frozen.get(f"relu.{p}"))
            parts.append(part)
            biases.append(bias)
        return self._result(torch.cat(parts, -1), torch.cat(biases, -1), out)
