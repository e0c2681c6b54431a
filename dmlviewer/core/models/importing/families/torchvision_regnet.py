"""torchvision's RegNets: their keys (``stem.0``, ``trunk_output.blockI.blockI-J.f.a``, ``fc``)
renamed to timm's (``stem.conv``, ``sI.bJ+1.conv1``, ``head.fc``), which compute the same
function (same convolutions, BatchNorm, ReLU, SE and padding); timm's RegNets then recognize it."""

from __future__ import annotations

import re

import torch

from ..family import Family
from ..sources import Sources, first_replace
from .torchvision_vit import torchvision_normalization

_BLOCK = (("proj.0.", "downsample.conv."), ("proj.1.", "downsample.bn."), ("f.a.0.", "conv1.conv."),
          ("f.a.1.", "conv1.bn."), ("f.b.0.", "conv2.conv."), ("f.b.1.", "conv2.bn."), ("f.se.", "se."),
          ("f.c.0.", "conv3.conv."), ("f.c.1.", "conv3.bn."))


def detect(sources: Sources) -> str | None:
    return sources.prefix_of("trunk_output.block1.block1-0.f.a.0.weight")


def convert(sources: Sources, prefix: str) -> None:
    block = re.compile(re.escape(prefix) + r"trunk_output\.block(\d+)\.block\d+-(\d+)\.(.*)")
    top = ((prefix + "stem.0.", prefix + "stem.conv."), (prefix + "stem.1.", prefix + "stem.bn."),
           (prefix + "fc.", prefix + "head.fc."))

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
        found = block.fullmatch(key)
        if found:
            rest = first_replace(found.group(3), _BLOCK)
            return f"{prefix}s{found.group(1)}.b{int(found.group(2)) + 1}.{rest}", t
        return first_replace(key, top), t

    sources.rename(rename, "torchvision RegNet layout (trunk_output.blockI) renamed to timm's, which computes "
                   "the same function")


FAMILY = Family("torchvision RegNet", detect=detect, convert=convert, defaults=torchvision_normalization)
