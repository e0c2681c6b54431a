"""timm RegNets (torchvision's ``regnet_x_*``/``regnet_y_*`` equal them once renamed; the shapes
decide which: the group width and SE ratio are in them), tried first for a file with timm's
RegNet keys."""

from __future__ import annotations

from ..family import Family
from ..sources import Sources

TIMM_REGNETS = ("regnetx_004_tv", "regnety_008_tv", "regnety_080_tv", "regnetx_002", "regnetx_004",
                "regnetx_008", "regnetx_016", "regnetx_032", "regnetx_080", "regnetx_160", "regnetx_320",
                "regnety_002", "regnety_004", "regnety_008", "regnety_016", "regnety_032", "regnety_080",
                "regnety_160", "regnety_320")


def detect(sources: Sources) -> str | None:
    return sources.prefix_of("s1.b1.conv1.conv.weight")


def shortlist(_shapes: dict) -> list[str]:
    return [f"timm:{n}" for n in TIMM_REGNETS]


FAMILY = Family("timm RegNet", detect=detect, shortlist=shortlist, needs_timm=True)
