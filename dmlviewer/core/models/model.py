"""The embedding model: a backbone plus a head, built from a JSON-serializable config."""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn

from .backbones import BACKBONES, Backbone
from .device import resolve_device
from .heads import (AttentionGroupingHead, ChannelGate, GatedGroupingHead, Head, PooledHead,
                    SpatialChannelGate)
from .multilayer import MultiLayerHead
from .output import EXACT, Linearization, ModelOutput
from .pooling import POOLINGS, Pooling
from .projection import Projection
from .vit import POOLINGS as VIT_POOLINGS
from .vit import build_vit, timm_vit_name

log = logging.getLogger(__name__)

GROUPINGS = ("none", "m", "g", "c", "a")

_DEFAULTS = {
    "backbone": "resnet50",
    "pretrained": None,      # None | "imagenet" | path to a weights file
    "pooling": "gap",        # gap gmp gem flatten
    "gem_p": 3.0,            # initial (or fixed) GeM exponent
    "gem_learnable": True,
    "bn": False,             # BatchNorm1d on the pooled feature
    "hidden": 0,             # width of an FC+ReLU layer before the embedding (0: none)
    "grouping": "none",      # none m g c a
    "groups": 4,             # P (ignored when grouping is none)
    "dim": 512,              # D; 0: no projection, the embedding is the pooled feature
    "multilayer": [],        # intermediate map names for the seed-003 head
    "image_size": 224,
    "mean": [0.485, 0.456, 0.406],  # input normalization (x / 255 - mean) / std per RGB channel
    "std": [0.229, 0.224, 0.225],
    "token_grid": 0,         # vision transformers: side of the position-embedding grid (0: timm's default)
}


def default_config(**overrides) -> dict:
    """A complete config (every key, JSON-serializable) with ``overrides`` applied."""
    config = copy.deepcopy(_DEFAULTS)
    unknown = set(overrides) - set(config)
    if unknown:
        raise ValueError(f"unknown model config key(s): {', '.join(sorted(unknown))}")
    config.update(copy.deepcopy(overrides))
    return config


def check_config(config: dict) -> dict:
    """Fill missing keys with defaults and validate; returns the complete config or raises ValueError."""
    config = default_config(**config)
    vit = timm_vit_name(config["backbone"]) is not None
    if config["backbone"] not in BACKBONES and not vit:
        raise ValueError(f"unknown backbone {config['backbone']!r}; choose from {', '.join(BACKBONES)} "
                         "or timm:NAME (a timm vision transformer, with the timm extra installed)")
    allowed = VIT_POOLINGS if vit else POOLINGS
    if config["pooling"] not in allowed:
        raise ValueError(f"unknown pooling {config['pooling']!r} for backbone {config['backbone']}; "
                         f"choose from {', '.join(allowed)}")
    if vit and (config["grouping"] != "none" or config["multilayer"]):
        raise ValueError("vision transformer backbones take grouping none and no multilayer head")
    if config["grouping"] not in GROUPINGS:
        raise ValueError(f"unknown grouping {config['grouping']!r}; choose from {', '.join(GROUPINGS)}")
    for key in ("groups", "image_size"):
        if not isinstance(config[key], int) or config[key] < 1:
            raise ValueError(f"model config {key} must be a positive integer, got {config[key]!r}")
    if not isinstance(config["dim"], int) or config["dim"] < 0:
        raise ValueError(f"model config dim must be 0 (no projection) or a positive integer, got {config['dim']!r}")
    if config["dim"] == 0 and (config["grouping"] != "none" or config["hidden"] or config["multilayer"]
                               or config["pooling"] == "flatten"):
        raise ValueError("dim 0 (no projection: the embedding is the pooled feature) needs grouping none, "
                         "hidden 0, no multilayer and gap, gmp or gem pooling")
    from dmlviewer.core.data.transforms import Preprocess

    Preprocess(config["image_size"], config["mean"], config["std"])  # raises ValueError naming the field
    config["mean"], config["std"] = [float(v) for v in config["mean"]], [float(v) for v in config["std"]]
    if not isinstance(config["hidden"], int) or config["hidden"] < 0:
        raise ValueError(f"model config hidden must be 0 or a positive integer, got {config['hidden']!r}")
    if config["grouping"] != "none" and config["dim"] % config["groups"]:
        raise ValueError(f"dim {config['dim']} is not divisible by groups {config['groups']}: "
                         "every group needs dim // groups dimensions")
    pretrained = config["pretrained"]
    if pretrained is not None:
        pretrained = str(pretrained)
        config["pretrained"] = None if pretrained.lower() == "none" else (
            "imagenet" if pretrained.lower() == "imagenet" else pretrained)
    layers = config["multilayer"] = list(config["multilayer"] or [])
    if layers:
        if config["grouping"] != "none":
            raise ValueError("the multi-layer head (multilayer) works with grouping none only")
        if config["pooling"] == "flatten":
            raise ValueError("the multi-layer head needs gap, gmp or gem pooling for its vector u")
        names = BACKBONES[config["backbone"]].channels_of if not vit else {"last": 0}
        bad = [n for n in layers if n not in names]
        if bad:
            raise ValueError(f"backbone {config['backbone']} has no map(s) {', '.join(bad)}; "
                             f"choose from {', '.join(names)}")
    if config["grouping"] == "a" and config["pooling"] != "gap":
        log.info("A-grouping pools by attention: pooling %r is not used", config["pooling"])
    return config


def _build_head(config: dict, backbone: Backbone) -> Head:
    channels, dim, num = backbone.channels, config["dim"], config["groups"]
    bn, hidden, grouping = bool(config["bn"]), config["hidden"], config["grouping"]
    if grouping == "a":
        return AttentionGroupingHead(channels, num, dim // num, bn, hidden)
    grid = backbone.grid(config["image_size"]) if config["pooling"] == "flatten" else None
    pooling = Pooling(config["pooling"], channels, grid, config["gem_p"], config["gem_learnable"])
    if config["multilayer"]:
        layers = {n: backbone.channels_of[n] for n in config["multilayer"]}
        width = pooling.out_dim + sum(layers.values())
        return MultiLayerHead(layers, pooling, Projection(width, dim, bn, hidden))
    if grouping in ("none", "m"):
        if dim == 0:  # the pooled feature itself (after BN when asked for)
            return PooledHead(pooling, Projection(pooling.out_dim, pooling.out_dim, bn, 0, final=False))
        return PooledHead(pooling, Projection(pooling.out_dim, dim, bn, hidden),
                          groups=num if grouping == "m" else None)
    gate = SpatialChannelGate(channels, num) if grouping == "g" else ChannelGate(channels, num)
    projections = [Projection(pooling.out_dim, dim // num, bn, hidden) for _ in range(num)]
    return GatedGroupingHead(gate, pooling, projections)


def frozen_quantities(config: dict) -> tuple[str, ...]:
    """What the exact rule of the head ``config`` describes holds fixed at an input (seed 000
    Sec. 4.2, App. A.3; seed 001 Eq. 7 with the attention frozen), for the UI and the npz."""
    frozen = []
    if config["grouping"] == "a":
        frozen.append("group attention")
    elif config["pooling"] == "gmp":
        frozen.append("max positions")
    elif config["pooling"] == "gem":
        frozen.append("GeM pooled values")
    if config["grouping"] in ("g", "c"):
        frozen.append("group gates")
    if config["multilayer"]:
        frozen.append("layer attention")
    if config["hidden"]:
        frozen.append("ReLU masks")
    return tuple(frozen)


class EmbeddingModel(nn.Module):
    """Backbone + head; ``forward(x) -> ModelOutput``, ``linearize(out) -> Linearization``.

    ``preprocess`` (:class:`~dmlviewer.core.data.transforms.Preprocess`) is how images become
    its input; ``head_function`` the head as a function of the last feature map."""

    def __init__(self, config: dict, backbone: Backbone, head: Head) -> None:
        super().__init__()
        self.config = config
        self.backbone = backbone
        self.head = head

    def forward(self, x: torch.Tensor) -> ModelOutput:
        return self.head(self.backbone(x))

    def linearize(self, out: ModelOutput) -> Linearization:
        """Exact affine form of the head at this input (seed 000 Sec. 4): masks, gates and
        attention frozen as computed by the forward pass that produced ``out``;
        ``contributions.sum(1) + bias == embedding_raw``. Needs eval mode when the head has
        BatchNorm."""
        lin = self.head.linearize(out)
        if lin.rule == EXACT and not lin.frozen:  # the heads of this module state theirs by config
            lin.frozen = frozen_quantities(self.config)
        return lin

    def head_function(self, out: ModelOutput, index: int = 0):
        """``A (1 x C x h x w) -> embedding_raw (1 x D)`` for image ``index`` of ``out``'s batch,
        the head's other inputs (intermediate maps) held at their values in ``out``."""
        others = {name: m[index : index + 1].detach() for name, m in out.intermediates.items()}

        def run(feature_map: torch.Tensor) -> torch.Tensor:
            return self.head({**others, "last": feature_map}).embedding_raw

        return run

    @property
    def preprocess(self):
        """The model's input preprocessing (size and normalization from the config)."""
        from dmlviewer.core.data.transforms import Preprocess

        return Preprocess(int(self.config["image_size"]), tuple(self.config["mean"]), tuple(self.config["std"]))

    @property
    def group_slices(self) -> list[slice]:
        """Slices of ``embedding_raw`` owned by each group (one slice without grouping)."""
        return self.head.group_slices

    @property
    def dim(self) -> int:
        return self.head.dim


def build_model(config: dict, device: str | torch.device = "cpu", *,
                load_pretrained: bool = True) -> EmbeddingModel:
    """Build the model ``config`` describes (see ``default_config``) on ``device``.

    ``load_pretrained=False`` ignores ``config["pretrained"]`` (used when a checkpoint's
    state dict supplies every weight).
    """
    config = check_config(config)
    if timm_vit_name(config["backbone"]):
        backbone, head = build_vit(config, load_pretrained)
        return EmbeddingModel(config, backbone, head).to(resolve_device(device))
    pretrained = config["pretrained"] if load_pretrained else None
    backbone = Backbone(config["backbone"], pretrained, config["image_size"])
    model = EmbeddingModel(config, backbone, _build_head(config, backbone))
    return model.to(resolve_device(device))
