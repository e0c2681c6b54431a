"""The structured output every embedding model returns, and its exact affine form."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ModelOutput:
    """What one forward pass of an :class:`~dmlviewer.core.models.EmbeddingModel` returns.

    - ``embedding``: B x D, L2-normalized (the vector used for retrieval).
    - ``embedding_raw``: B x D, before normalization (E in seed 000 Eq. 3).
    - ``groups``: B x P x Dg for grouping heads (the concatenation over P is
      ``embedding_raw``), ``None`` for a head without groups.
    - ``feature_map``: B x C x h x w, the backbone's last convolutional map (A in seed 000).
    - ``intermediates``: named intermediate maps the head used (multi-layer head).
    - ``attention``: every attention map the head computed, by name, each B x P x h x w
      (or B x 1 x h x w) on its own feature grid; the exception is ``c_grouping_channels``,
      B x P x C channel weights.
    - ``frozen``: the quantities ``linearize`` freezes at this input, computed once in the
      forward pass (GMP argmax indices, GeM pooled values, ReLU masks, gates); internal.
    """

    embedding: torch.Tensor
    embedding_raw: torch.Tensor
    feature_map: torch.Tensor
    groups: torch.Tensor | None = None
    intermediates: dict[str, torch.Tensor] = field(default_factory=dict)
    attention: dict[str, torch.Tensor] = field(default_factory=dict)
    frozen: dict[str, torch.Tensor] = field(default_factory=dict)


#: Decomposition rules (``Linearization.rule``). ``EXACT``: the head is affine at this input once
#: the quantities named in ``Linearization.frozen`` are held at their values (seed 000 Sec. 4), so
#: ``bias`` is that affine map's constant term. ``FIRST_ORDER``: the head is not piecewise linear
#: there; contributions are gradient x activation and ``bias`` also holds the Taylor remainder.
EXACT = "exact"
FIRST_ORDER = "first order"


@dataclass
class Linearization:
    """The head as an affine map at one input (seed 000 Eq. 3, Sec. 4):
    ``embedding_raw = contributions.sum(1) + bias``.

    - ``contributions``: B x (h*w) x D, position n = i*w + j's share C_ij of the raw embedding,
      on the grid of the last feature map.
    - ``bias``: B x D, the part no position owns (B in seed 000 Eq. 3).
    - ``grid``: (h, w).
    - ``rule``: :data:`EXACT` or :data:`FIRST_ORDER`; ``frozen``: what is held at its value at
      this input for the rule (e.g. ``"ReLU masks"``, ``"attention weights"``).
    - ``nonspatial``: B x D or ``None``: the part of ``bias`` owed to inputs that are not positions
      on the image (a transformer's class, register and distillation tokens); already in ``bias``.
    - ``reason``: for a first-order rule, why (e.g. which op is not piecewise linear).
    """

    contributions: torch.Tensor
    bias: torch.Tensor
    grid: tuple[int, int]
    rule: str = EXACT
    frozen: tuple[str, ...] = ()
    nonspatial: torch.Tensor | None = None
    reason: str = ""

    @property
    def description(self) -> str:
        """One line for the UI: the rule and what it freezes."""
        if self.rule == FIRST_ORDER:
            why = f"; {self.reason}" if self.reason else ""
            return f"first order (gradient x activation, the remainder in the bias{why})"
        return "exact" + (f" ({', '.join(self.frozen)} frozen at this input)" if self.frozen else "")
