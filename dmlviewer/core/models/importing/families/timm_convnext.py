"""timm ConvNeXts (torchvision's ``convnext_*`` equal ``convnext_tiny/small/base/large`` once
renamed; the shapes decide which), tried first for a file with timm's ConvNeXt keys; only those
of the file's stem width are built (building each candidate on the meta device takes seconds)."""

from __future__ import annotations

from ..family import Family
from ..sources import Sources

TIMM_CONVNEXTS = ("convnext_atto", "convnext_femto", "convnext_pico", "convnext_nano", "convnext_tiny",
                  "convnext_small", "convnext_base", "convnext_large", "convnext_xlarge")
#: their stem widths
_STEM = {"convnext_atto": 40, "convnext_femto": 48, "convnext_pico": 64, "convnext_nano": 80,
         "convnext_tiny": 96, "convnext_small": 96, "convnext_base": 128, "convnext_large": 192,
         "convnext_xlarge": 256}


def detect(sources: Sources) -> str | None:
    prefix = sources.prefix_of("stages.0.blocks.0.conv_dw.weight")
    return prefix if prefix is not None and prefix + "stages.0.blocks.0.gamma" in sources.tensors else None


def shortlist(shapes: dict) -> list[str]:
    widths = {v[0] for k, v in shapes.items() if k.endswith("stem.0.weight") and len(v) == 4}
    return [f"timm:{n}" for n in TIMM_CONVNEXTS if not widths or _STEM[n] in widths]


FAMILY = Family("timm ConvNeXt", detect=detect, shortlist=shortlist, needs_timm=True)
