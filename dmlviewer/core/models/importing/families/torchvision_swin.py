"""torchvision's Swin Transformers (v1): their keys (``features.0`` patch embedding,
``features.2i+1.J`` blocks, ``features.2i`` patch merging, ``norm``, ``head``) renamed to timm's
(``patch_embed``, ``layers.i.blocks.J``, ``layers.i.downsample``, ``norm``, ``head.fc``), which
compute the same function (same qkv order, relative position bias tables, shifted windows, patch
merging's 2x2 concatenation order and its norm before the reduction, exact GELU); torchvision's
``relative_position_index`` buffers are dropped (timm computes the same ones from the window
size). timm's Swins then recognize it."""

from __future__ import annotations

import re

import torch

from ..family import Family
from ..sources import Sources, first_replace
from .torchvision_vit import torchvision_normalization

_BLOCK = (("mlp.0.", "mlp.fc1."), ("mlp.3.", "mlp.fc2."))


def detect(sources: Sources) -> str | None:
    prefix = sources.prefix_of("features.1.0.attn.relative_position_bias_table")
    return prefix if prefix is not None and prefix + "features.2.reduction.weight" in sources.tensors else None


def convert(sources: Sources, prefix: str) -> None:
    feature = re.compile(re.escape(prefix) + r"features\.(\d+)\.(.*)")
    top = ((prefix + "head.", prefix + "head.fc."),)

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor] | None:
        found = feature.fullmatch(key)
        if not found:
            return first_replace(key, top), t
        if key.endswith(".attn.relative_position_index"):
            sources.ignored[key] = "Swin's relative position index (computed from the window size)"
            return None
        index, rest = int(found.group(1)), found.group(2)
        if index == 0:
            layer, _, rest = rest.partition(".")
            layer = {"0": "proj", "2": "norm"}.get(layer, layer)
            return f"{prefix}patch_embed.{layer}.{rest}", t
        if index % 2 == 0:
            return f"{prefix}layers.{index // 2}.downsample.{rest}", t
        block, _, rest = rest.partition(".")
        return f"{prefix}layers.{index // 2}.blocks.{block}.{first_replace(rest, _BLOCK)}", t

    sources.rename(rename, "torchvision Swin layout (features.N, head) renamed to timm's (patch_embed, layers, "
                   "head.fc), which computes the same function")


FAMILY = Family("torchvision Swin", detect=detect, convert=convert, defaults=torchvision_normalization)
