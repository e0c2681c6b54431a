"""timm vision transformers (ViT, DeiT, DINOv2; class, register and distillation tokens), tried
first for a file with position embeddings. One name per key layout (patch size, width, depth,
tokens, layer scale); the number of attention heads is not in a weights file: these names use
the standard one of their width (3 for 192, 6 for 384, 12 for 768, 16 for 1024 and 1280), and the
report states it as an assumption. The pooling is not in the file either: the class token
(timm's default) is assumed."""

from __future__ import annotations

from ..family import Family
from ..sources import Sources

TIMM_VIT_SHORTLIST = (
    "vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224", "vit_large_patch16_224",
    "vit_small_patch32_224", "vit_base_patch32_224", "vit_large_patch32_224", "vit_small_patch8_224",
    "vit_base_patch8_224", "vit_huge_patch14_224",
    "vit_small_patch14_dinov2", "vit_base_patch14_dinov2", "vit_large_patch14_dinov2",
    "vit_small_patch14_reg4_dinov2", "vit_base_patch14_reg4_dinov2", "vit_large_patch14_reg4_dinov2",
    "deit_tiny_distilled_patch16_224", "deit_small_distilled_patch16_224", "deit_base_distilled_patch16_224",
)


def detect(sources: Sources) -> str | None:
    return next((k[: -len("pos_embed")] for k in sources.tensors if k == "pos_embed" or k.endswith(".pos_embed")),
                None)


def shortlist(_shapes: dict) -> list[str]:
    return [f"timm:{n}" for n in TIMM_VIT_SHORTLIST]


FAMILY = Family("timm vision transformer", detect=detect, shortlist=shortlist, fallback=True, needs_timm=True)
