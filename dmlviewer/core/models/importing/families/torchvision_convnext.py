"""torchvision's ConvNeXts: their keys (``features.0`` stem, ``features.2i+1.J.block`` stages,
``features.2i`` downsampling, ``classifier.0`` LayerNorm2d and ``classifier.2`` Linear) renamed
to timm's (``stem``, ``stages.i.blocks.J``, ``stages.i.downsample``, ``head.norm``, ``head.fc``),
which compute the same function (7x7 depthwise convolution, LayerNorm eps 1e-6 over channels,
exact GELU, per-channel layer scale: torchvision's C x 1 x 1 ``layer_scale`` becomes timm's
``gamma`` of C); timm's ConvNeXts then recognize it."""

from __future__ import annotations

import re

import torch

from ..family import Family
from ..sources import Sources, first_replace
from .torchvision_vit import torchvision_normalization

_BLOCK = (("block.0.", "conv_dw."), ("block.2.", "norm."), ("block.3.", "mlp.fc1."),
          ("block.5.", "mlp.fc2."), ("layer_scale", "gamma"))


def detect(sources: Sources) -> str | None:
    prefix = sources.prefix_of("features.1.0.block.0.weight")
    return prefix if prefix is not None and prefix + "features.1.0.layer_scale" in sources.tensors else None


def convert(sources: Sources, prefix: str) -> None:
    feature = re.compile(re.escape(prefix) + r"features\.(\d+)\.(.*)")
    top = ((prefix + "classifier.0.", prefix + "head.norm."), (prefix + "classifier.2.", prefix + "head.fc."))

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
        found = feature.fullmatch(key)
        if not found:
            return first_replace(key, top), t
        index, rest = int(found.group(1)), found.group(2)
        if index == 0:
            return f"{prefix}stem.{rest}", t
        if index % 2 == 0:
            return f"{prefix}stages.{index // 2}.downsample.{rest}", t
        block, _, rest = rest.partition(".")
        rest = first_replace(rest, _BLOCK)
        return f"{prefix}stages.{index // 2}.blocks.{block}.{rest}", t.reshape(-1) if rest == "gamma" else t

    sources.rename(rename, "torchvision ConvNeXt layout (features.N, classifier.0/2) renamed to timm's (stem, "
                   "stages, head.norm, head.fc), which computes the same function")


FAMILY = Family("torchvision ConvNeXt", detect=detect, convert=convert, defaults=torchvision_normalization)
