"""Named training recipes: presets of :class:`TrainConfig` values (``train --recipe NAME``, the
training dialog's Recipe box).

A recipe fills every option the user did not give: ``apply_recipe(name, given)`` starts from
the :class:`TrainConfig` defaults, applies the recipe's values, then the options in ``given``
(what the user set explicitly always wins). A recipe may hold other values for a pretrained
backbone than for one trained from scratch (the papers fine-tune ImageNet networks at
learning rates of 1e-5 to 1e-4 for 15k-100k iterations; a network trained from scratch for a few
epochs needs about 1e-3): ``pretrained`` values apply when ``pretrained`` is not ``none``,
``scratch`` values otherwise.

Recipes (papers in ``shared/seeds``; values the papers give are marked there):

- ``default``: dmlviewer's defaults, chosen by measurement (README, "Training quality").
- ``plain``: the plain pytorch-metric-learning loop the defaults are measured against
  (``packaging/quality/plain_pml.py``): MS loss with its library defaults, no miner, Adam at
  1e-3 on every parameter, no schedule, no weight decay, no validation split, no head warm-up,
  BatchNorm statistics trained.
- ``demo``: the recipe of the shipped demo checkpoint (``packaging/make_demo_checkpoint.py``).
- ``dgml-a``: seed 001, A-grouping (Sec. 4.3, Table 1, Table 3 setting): 4 groups, margin loss
  (m = 0.2, eta = 1.2 learnable at lr 5e-4) with distance-weighted sampling (the official code's
  miner), diversity weight lambda_1 = 0.01 with the official code's diversity loss,
  lambda_2 = 0.001 as weight decay, Adam, batch 56 classes x 2 images, embedding 4 x 128,
  learning rate 1e-5 (ResNet-50) for backbone and new layers alike (the official code's
  ``new_params_lr`` = ``ft_params_lr``).
- ``deml``: seed 004, DeML single-scale (Sec. 4, DeML(I=1, J=8)): C-grouping with 8 learners,
  binomial deviance of Eq. 5 (alpha 2, beta 0.5, gamma 35), adversary lambda_0 = 1, activation
  decay lambda_1 = 0.014, lambda_2 = 0.25, Adam at 1e-5 with weight decay 2e-4 and 10x for the
  learners, embedding 512.
- ``adversarial``: seed 003, Adapt-Adv DML (Sec. 5, Table 2): triplet loss with semi-hard
  sampling and margin 0.01, adaptive class adversary with lambda_0 = 0.5 (chosen from
  {0.1, 0.5, 1}; Fig. 14 peaks at 0.3-0.7), l_thresh = 1.5, dropout 0.1, the multi-layer attended
  head (Eq. 8-16), embedding 64, batch 64, model lr 1e-4 and embedding lr 1e-3.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .config import TrainConfig

#: learning rate of every recipe for a network trained from scratch (a few epochs, Adam)
SCRATCH_LR = 1e-3


@dataclass(frozen=True)
class Recipe:
    """A named preset: ``values`` always, then ``pretrained`` or ``scratch`` values."""

    name: str
    title: str
    source: str
    values: dict[str, Any] = field(default_factory=dict)
    pretrained: dict[str, Any] = field(default_factory=dict)
    scratch: dict[str, Any] = field(default_factory=dict)

    def settings(self, pretrained: bool) -> dict[str, Any]:
        """The option values this recipe sets for a pretrained or a from-scratch backbone."""
        return {**self.values, **(self.pretrained if pretrained else self.scratch)}


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe(
        "default", "dmlviewer defaults", "chosen by measurement (README, Training quality)",
        values={},
        # pretrained backbones: keep the ImageNet features from collapsing on small data; their
        # features were trained under average pooling (GMP measured worse on photos: 0.972 vs 0.980)
        pretrained=dict(pooling="gap", lr=1e-4, head_lr_mult=10.0, warmup_epochs=1, val_fraction=0.2),
    ),
    Recipe(
        "plain", "plain pytorch-metric-learning loop", "packaging/quality/plain_pml.py",
        values=dict(pooling="gap", loss="ms", miner="none", optimizer="adam", lr=1e-3, head_lr_mult=1.0,
                    weight_decay=0.0,
                    scheduler="constant", val_fraction=0.0, freeze_bn="off", warmup_epochs=0, patience=0,
                    classes_per_batch=8, images_per_class=4),
    ),
    Recipe(
        "demo", "demo checkpoint", "packaging/make_demo_checkpoint.py",
        values=dict(backbone="small_cnn", pretrained="none", pooling="gmp", grouping="c", groups=4, dim=128,
                    image_size=256, loss="ms", diversity=0.01, diversity_variant="printed", epochs=40,
                    classes_per_batch=8,
                    images_per_class=4, lr=1e-3, head_lr_mult=1.0, eval_every=5),
    ),
    Recipe(
        "dgml-a", "A-grouping (seed 001)", "seed 001 Sec. 4, Table 1, Table 3; official DGML code",
        values=dict(pooling="gap", grouping="a", groups=4, dim=512, loss="margin", miner="distance_weighted",
                    diversity=0.01, diversity_variant="official", weight_decay=0.001, optimizer="adam",
                    scheduler="constant", classes_per_batch=56, images_per_class=2, head_lr_mult=1.0),
        pretrained=dict(lr=1e-5),
        scratch=dict(lr=SCRATCH_LR),
    ),
    Recipe(
        "deml", "DeML (seed 004)", "seed 004 Sec. 3.3-4, Eq. 4-6, DeML(I=1, J=8)",
        values=dict(pooling="gap", grouping="c", groups=8, dim=512, loss="binomial", binomial="deml",
                    deml_adversary=1.0, activation_decay=0.014, non_trivial=0.25, optimizer="adam", weight_decay=2e-4,
                    head_lr_mult=10.0, scheduler="constant"),
        pretrained=dict(lr=1e-5),
        scratch=dict(lr=SCRATCH_LR / 10),  # the learners at 10x: 1e-3
    ),
    Recipe(
        "adversarial", "Adapt-Adv DML (seed 003)", "seed 003 Sec. 4-5, Table 2, Eq. 8-16, 22-25",
        values=dict(pooling="gap", loss="triplet", miner="semihard", triplet_margin=0.01, adversarial="adaptive",
                    adversarial_weight=0.5, grouping="none", dim=64, classes_per_batch=16, images_per_class=4,
                    optimizer="adam", head_lr_mult=10.0, scheduler="constant"),
        pretrained=dict(lr=1e-4),
        scratch=dict(lr=SCRATCH_LR / 10),  # the embedding layer at 10x: 1e-3
    ),
)}

#: seed 003's attended maps per backbone (an intermediate map and the last one)
MULTILAYER = {"small_cnn": ["stage3"], "resnet18": ["layer3"], "resnet34": ["layer3"], "resnet50": ["layer3"],
              "resnet101": ["layer3"], "googlenet": ["inception4e"], "inception_v3": ["Mixed_6e"],
              "mobilenet_v3_large": ["features.12"], "efficientnet_b0": ["features.5"],
              "efficientnet_lite0": ["blocks.10"]}


def recipe_settings(name: str, given: dict[str, Any]) -> dict[str, Any]:
    """The values recipe ``name`` sets, for the backbone and weights in ``given`` (or the
    recipe's own, or the defaults); options in ``given`` are not included."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; choose from {', '.join(RECIPES)}")
    recipe = RECIPES[name]
    defaults = TrainConfig()
    pretrained = given.get("pretrained", recipe.values.get("pretrained", defaults.pretrained))
    values = recipe.settings(pretrained not in ("none", None, ""))
    if name == "adversarial":
        backbone = given.get("backbone", recipe.values.get("backbone", defaults.backbone))
        values["multilayer"] = list(MULTILAYER.get(backbone, []))
    return {k: v for k, v in values.items() if k not in given}


def apply_recipe(name: str | None, given: dict[str, Any]) -> TrainConfig:
    """A :class:`TrainConfig`: the defaults, then recipe ``name`` (``None``: ``default``), then
    the options in ``given``."""
    values = recipe_settings(name or "default", given)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(given) - names)
    if unknown:
        raise ValueError(f"unknown training option(s): {', '.join(unknown)}")
    return TrainConfig(**{**values, **given})
