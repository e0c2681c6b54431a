"""timm Swin Transformers (v1; torchvision's ``swin_t/s/b`` equal them once renamed, the shapes
decide which), tried first for a file with timm's Swin keys."""

from __future__ import annotations

from ..family import Family
from ..sources import Sources

TIMM_SWINS = ("swin_tiny_patch4_window7_224", "swin_small_patch4_window7_224", "swin_base_patch4_window7_224",
              "swin_large_patch4_window7_224")


def detect(sources: Sources) -> str | None:
    return sources.prefix_of("layers.0.blocks.0.attn.relative_position_bias_table")


def shortlist(_shapes: dict) -> list[str]:
    return [f"timm:{n}" for n in TIMM_SWINS]


FAMILY = Family("timm Swin", detect=detect, shortlist=shortlist, needs_timm=True)
