"""Optimizer and learning-rate schedule.

Parameter groups: the backbone at ``lr``; the new layers (embedding head, grouping modules,
adversaries) at ``lr * head_lr_mult`` (seed 004 Sec. 4: "10 times learning rate for the
learners"; seed 003 Table 2: embedding lr 10x the model's); the losses' own parameters
(learnable margin, proxies) at the absolute rates the papers give, without weight decay.
Weight decay is the lambda_2 |W|^2 term of seed 001 Eq. 14 (coupled L2 for Adam and SGD,
decoupled for AdamW).
"""

from __future__ import annotations

import torch

from .config import TrainConfig
from .losses import LOSS_PARAM_LR
from .objective import Objective


def parameter_groups(objective: Objective, config: TrainConfig) -> list[dict]:
    new = {id(p) for m in objective.new_layers() for p in m.parameters()}
    loss_params = [p for p in objective.metric.parameters() if p.requires_grad]
    taken = new | {id(p) for p in loss_params}
    backbone = [p for p in objective.parameters() if p.requires_grad and id(p) not in taken]
    head = [p for m in objective.new_layers() for p in m.parameters() if p.requires_grad]
    groups = [
        {"params": backbone, "lr": config.lr, "name": "backbone"},
        {"params": head, "lr": config.lr * config.head_lr_mult, "name": "head"},
    ]
    if loss_params:
        groups.append({"params": loss_params, "lr": LOSS_PARAM_LR.get(config.loss, config.lr),
                       "weight_decay": 0.0, "name": "loss"})
    return [g for g in groups if g["params"]]


def build_optimizer(objective: Objective, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam, AdamW or SGD (momentum 0.9) over :func:`parameter_groups`; the fused
    implementations on CPU and CUDA (one kernel for all parameters instead of a loop of
    per-tensor operations)."""
    groups = parameter_groups(objective, config)
    device = next(objective.parameters()).device
    fused = {"fused": True} if device.type in ("cpu", "cuda") else {}
    if config.optimizer == "adam":
        return torch.optim.Adam(groups, lr=config.lr, weight_decay=config.weight_decay, **fused)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay, **fused)
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=config.lr, momentum=0.9, weight_decay=config.weight_decay, **fused)
    raise ValueError(f"unknown optimizer {config.optimizer!r}")


def build_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig,
                    total_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    """``cosine``: every group's rate follows a half cosine from its base rate to 0 over the
    run, stepped per batch; ``constant``: no change."""
    if config.scheduler == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, total_steps))
    return torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
