"""The built-in backbones (``BACKBONES``: torchvision's ResNets, VGG, DenseNet, GoogLeNet,
Inception, MobileNets, EfficientNets ... and the small test CNN), tried for every file after the
families found in it."""

from __future__ import annotations

from ...backbones import BACKBONES
from ..family import Family


def shortlist(_shapes: dict) -> list[str]:
    return list(BACKBONES)


FAMILY = Family("built-in backbone", shortlist=shortlist, always=True)
