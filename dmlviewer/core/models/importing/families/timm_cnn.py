"""timm CNNs, tried after the built-in backbones when no family of the files fits. timm's
resnet18/34/50/101 are left out: their keys and function equal torchvision's, which the built-in
backbones cover (tests/core/models/test_importer.py checks that no shortlist model holds every
key of a built-in one). ``tf_`` twins share their layout with the plain models but pad
differently, so a match of one is always compared with the other (candidates.timm_twins)."""

from __future__ import annotations

from ..family import Family

TIMM_SHORTLIST = (
    "resnet50d", "resnext50_32x4d", "seresnext50_32x4d", "wide_resnet50_2", "resnetv2_50",
    "densenet121", "inception_resnet_v2", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
    "efficientnet_b3", "efficientnetv2_rw_s", "mobilenetv2_100", "mobilenetv3_large_100",
    "regnety_016", "convnext_tiny", "convnext_small",
)


def shortlist(_shapes: dict) -> list[str]:
    return [f"timm:{n}" for n in TIMM_SHORTLIST]


FAMILY = Family("timm CNN", shortlist=shortlist, always=True, needs_timm=True)
