"""The structured output every embedding model returns."""

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
      (or B x 1 x h x w), on its own feature grid.
    """

    embedding: torch.Tensor
    embedding_raw: torch.Tensor
    feature_map: torch.Tensor
    groups: torch.Tensor | None = None
    intermediates: dict[str, torch.Tensor] = field(default_factory=dict)
    attention: dict[str, torch.Tensor] = field(default_factory=dict)
