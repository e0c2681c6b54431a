"""The total training loss as one module (so one ``DistributedDataParallel`` wraps all of it).

``loss = L_met + lambda_1 L_div`` (seed 001 Eq. 14; its ``lambda_2 |W|^2`` is the optimizer's
weight decay) ``+ lambda_1' L_act + lambda_2' L_ntri`` (seed 004 Eq. 6) ``+ lambda_0 L_adv``
(seed 004 Eq. 4, through a GRL) ``+`` the class adversarial term (seed 003 Eq. 21 or 22-24).
Losses are computed in float32 even under mixed precision.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from .adversarial import ClassAdversary, DemlAdversary
from .config import TrainConfig
from .losses import GroupedMetricLoss, activation_decay, diversity_loss, non_trivial_penalty

log = logging.getLogger(__name__)


def learner_weights(model: nn.Module) -> list[torch.Tensor]:
    """The weight matrix of each learner's last linear layer (omega_ij of seed 004 Eq. 6): per
    group for heads with one projection per group, the row blocks of the shared last layer
    otherwise; empty when the head has no last linear layer (A-grouping without a tail)."""
    head = model.head
    projections = list(getattr(head, "projections", None) or getattr(head, "tails", None) or [])
    if not projections and hasattr(head, "projection"):
        projections = [head.projection]
    weights = [p.out.weight for p in projections if getattr(p, "out", None) is not None]
    slices = model.group_slices
    if len(weights) == 1 and len(slices) > 1:
        weights = [weights[0][s] for s in slices]
    return weights


class Objective(nn.Module):
    """``forward(images, labels) -> (loss, terms)``: the scalar to minimize and its named,
    unweighted parts (detached) for logging."""

    def __init__(self, model: nn.Module, config: TrainConfig, num_classes: int) -> None:
        super().__init__()
        self.model = model
        self.config = config
        slices = model.group_slices
        self.metric = GroupedMetricLoss(config.loss, slices, num_classes, config.miner, config.binomial,
                                        config.triplet_margin)
        self.class_adversary = (
            ClassAdversary(model.backbone.channels, num_classes, config.adversarial, config.adversarial_weight)
            if config.adversarial != "none" else None
        )
        self.deml_adversary = (
            DemlAdversary(slices[0].stop - slices[0].start, config.deml_adversary)
            if config.deml_adversary > 0 else None
        )
        self.use_ntri = config.activation_decay > 0 and config.non_trivial > 0
        if self.use_ntri and not learner_weights(model):
            log.warning("this head has no per-learner linear layer: the non-trivial term of "
                        "activation decay (seed 004 Eq. 6) is left out")
            self.use_ntri = False

    def new_layers(self) -> list[nn.Module]:
        """Modules trained with the head's learning rate multiplier."""
        return [m for m in (self.model.head, self.class_adversary, self.deml_adversary) if m is not None]

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        out = self.model(images)
        c = self.config
        with torch.autocast(images.device.type, enabled=False):
            raw = out.embedding_raw.float()
            groups = out.groups.float() if out.groups is not None else raw[:, None]
            terms = {"metric": self.metric(raw, labels)}
            loss = terms["metric"]
            if c.diversity > 0:
                terms["diversity"] = diversity_loss(groups, c.diversity_variant)
                loss = loss + c.diversity * terms["diversity"]
            if c.activation_decay > 0:
                terms["activation_decay"] = activation_decay(groups)
                loss = loss + c.activation_decay * terms["activation_decay"]
                if self.use_ntri:
                    terms["non_trivial"] = non_trivial_penalty([w.float() for w in learner_weights(self.model)])
                    loss = loss + c.non_trivial * terms["non_trivial"]
            if self.deml_adversary is not None:
                term = self.deml_adversary(groups)
                terms["deml_adversary"] = term / c.deml_adversary
                loss = loss + term
            if self.class_adversary is not None:
                features = out.feature_map.float().mean(dim=(2, 3))
                term, terms["class"] = self.class_adversary(features, labels)
                loss = loss + term
        return loss, {k: v.detach() for k, v in terms.items()}
