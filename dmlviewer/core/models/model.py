"""The embedding model: a backbone plus a head, built from a JSON-serializable config."""

from __future__ import annotations

import copy
import logging
import math

import torch
from torch import nn

from .backbones import BACKBONES, Backbone
from .device import resolve_device
from .heads import (AttentionGroupingHead, ChannelGate, GatedGroupingHead, Head, PooledHead,
                    SpatialChannelGate)
from .multilayer import MultiLayerHead
from .output import EXACT, Linearization, ModelOutput
from .pooling import POOLINGS, Pooling
from .projection import STACK_NONLINEAR, LayerStack, Projection, parse_stack, stack_width
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
    "fc_norm": False,        # vision transformers: the final norm after the pooling (timm's fc_norm, global_pool="avg")
    "head_layers": [],       # a general head instead of bn/hidden/dim (imported models): see projection.LayerStack
}


def default_config(**overrides) -> dict:
    """A complete config (every key, JSON-serializable) with ``overrides`` applied."""
    config = copy.deepcopy(_DEFAULTS)
    unknown = set(overrides) - set(config)
    if unknown:
        raise ValueError(f"unknown model config key(s): {', '.join(sorted(unknown))}")
    config.update(copy.deepcopy(overrides))
    return config


#: inclusive ranges of the integer fields (a checkpoint's config is not trusted: it is checked
#: before anything is allocated)
INT_RANGES = {"dim": (0, 16384), "groups": (1, 512), "hidden": (0, 16384), "image_size": (8, 4096),
              "token_grid": (0, 1024)}
#: channels assumed for a backbone outside the registry (timm vision transformers: up to 1664)
UNKNOWN_CHANNELS = 2048
#: the most parameters a head may have (1 GiB of float32); a ResNet-50 flatten head at 224 px
#: with dim 512 has 51 million
MAX_HEAD_PARAMETERS = 1 << 28


def _check_types(config: dict) -> None:
    """ValueError naming the first field of the wrong type or out of range."""
    def fail(key: str, expected: str) -> None:
        raise ValueError(f"model config {key} must be {expected}, got {config[key]!r}"[:300])

    for key in ("backbone", "pooling", "grouping"):
        if not isinstance(config[key], str):
            fail(key, "a name (text)")
    if config["pretrained"] is not None and not isinstance(config["pretrained"], str):
        fail("pretrained", "none, 'imagenet' or a file name")
    for key, (low, high) in INT_RANGES.items():
        value = config[key]
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            fail(key, f"an integer from {low} to {high}")
    for key in ("bn", "gem_learnable", "fc_norm"):
        if not isinstance(config[key], bool):
            fail(key, "true or false")
    gem_p = config["gem_p"]
    if not isinstance(gem_p, (int, float)) or isinstance(gem_p, bool) or not math.isfinite(gem_p) or not (
            0 < gem_p <= 100):
        fail("gem_p", "a number in (0, 100]")
    layers = config["multilayer"]
    if layers is not None and (not isinstance(layers, (list, tuple)) or len(layers) > 64
                               or not all(isinstance(n, str) for n in layers)):
        fail("multilayer", "a list of backbone map names")
    if config["head_layers"] is not None:
        parse_stack(config["head_layers"], 0)  # ValueError naming the bad item


def head_parameters(config: dict) -> int:
    """An upper estimate of the head's parameter count, computed from the config alone (so a
    config asking for absurd sizes is refused before anything is built)."""
    spec = BACKBONES.get(config["backbone"])
    channels_of = spec.channels_of if spec is not None else {"last": UNKNOWN_CHANNELS}
    channels, dim, groups, hidden = channels_of["last"], config["dim"], config["groups"], config["hidden"]
    width = channels
    if config["pooling"] == "flatten":
        cells = -(-config["image_size"] // (spec.strides["last"] if spec is not None else 16))
        width = channels * cells * cells
    if config["head_layers"]:
        total, width = 0, channels
        for kind, arg in parse_stack(config["head_layers"], channels):
            total += (width + 1) * int(arg) if kind == "linear" else 4 * width
            width = int(arg) if kind == "linear" else width
        return total
    layers = [channels_of.get(n, 0) for n in config["multilayer"] or []]
    width += sum(layers)
    attend = sum(c * (channels + 2) + 2 for c in layers)  # per-layer attention projections
    out = dim or width
    if config["grouping"] == "none":
        return attend + width * (hidden + out) + hidden * out + 2 * width + out
    per_group = max(1, out // groups)
    projection = width * (hidden + per_group) + hidden * per_group + 2 * width
    gates = groups * (channels * 160 + 256)  # per-group gate (squeeze/excite of width 64, or a spatial gate)
    return groups * projection + gates + 2 * channels * out + out


def check_config(config: dict) -> dict:
    """Fill missing keys with defaults and validate every field's type and range before anything
    is built; returns the complete config or raises ValueError naming the field."""
    if not isinstance(config, dict):
        raise ValueError(f"model config must be a dictionary, got {type(config).__name__}")
    bad_keys = [k for k in config if not isinstance(k, str)]
    if bad_keys:
        raise ValueError(f"model config keys must be names (text), got {bad_keys[:3]!r}")
    config = default_config(**config)
    _check_types(config)
    vit = timm_vit_name(config["backbone"]) is not None
    if config["backbone"] not in BACKBONES and not vit:
        raise ValueError(f"unknown backbone {config['backbone']!r}; choose from {', '.join(BACKBONES)} "
                         "or timm:NAME (a timm CNN or vision transformer, with the timm extra installed)")
    allowed = VIT_POOLINGS if vit else POOLINGS
    if config["pooling"] not in allowed:
        raise ValueError(f"unknown pooling {config['pooling']!r} for backbone {config['backbone']}; "
                         f"choose from {', '.join(allowed)}")
    if config["fc_norm"] and not vit:
        raise ValueError("model config fc_norm (a norm after the pooling) is for vision transformer backbones")
    if vit and (config["grouping"] != "none" or config["multilayer"]):
        raise ValueError("vision transformer backbones take grouping none and no multilayer head")
    if config["grouping"] not in GROUPINGS:
        raise ValueError(f"unknown grouping {config['grouping']!r}; choose from {', '.join(GROUPINGS)}")
    if config["dim"] == 0 and (config["grouping"] != "none" or config["hidden"] or config["multilayer"]
                               or config["pooling"] == "flatten"):
        raise ValueError("dim 0 (no projection: the embedding is the pooled feature) needs grouping none, "
                         "hidden 0, no multilayer and gap, gmp or gem pooling")
    from dmlviewer.core.data.transforms import Preprocess

    Preprocess(config["image_size"], config["mean"], config["std"])  # raises ValueError naming the field
    config["mean"], config["std"] = [float(v) for v in config["mean"]], [float(v) for v in config["std"]]
    if config["grouping"] != "none" and config["dim"] % config["groups"]:
        raise ValueError(f"dim {config['dim']} is not divisible by groups {config['groups']}: "
                         "every group needs dim // groups dimensions")
    config["head_layers"] = [str(s) for s in config["head_layers"] or []]
    if config["head_layers"]:
        if vit or config["grouping"] != "none" or config["multilayer"] or config["pooling"] == "flatten" \
                or config["bn"] or config["hidden"]:
            raise ValueError("head_layers (a general head on the pooled vector) needs a CNN backbone, grouping "
                             "none, no multilayer, bn false, hidden 0 and gap, gmp or gem pooling")
        channels = BACKBONES[config["backbone"]].channels_of["last"]
        width = stack_width(config["head_layers"], channels)
        if config["dim"] != (width if any(k == "linear" for k, _ in parse_stack(config["head_layers"], 0)) else 0):
            raise ValueError(f"model config dim {config['dim']} must be the width of head_layers' last linear "
                             f"layer ({width}), or 0 when head_layers has no linear layer")
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
    parameters = head_parameters(config)
    if parameters > MAX_HEAD_PARAMETERS:
        raise ValueError(f"model config asks for a head of about {parameters:,} parameters (dim {config['dim']}, "
                         f"groups {config['groups']}, hidden {config['hidden']}, pooling {config['pooling']} at "
                         f"image_size {config['image_size']}); the limit is {MAX_HEAD_PARAMETERS:,}")
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
    if config["head_layers"]:
        return PooledHead(pooling, LayerStack(pooling.out_dim, config["head_layers"]))
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
    if config["hidden"] or "relu" in (config.get("head_layers") or []):
        frozen.append("ReLU masks")
    if any(str(item).startswith("layernorm") for item in config.get("head_layers") or []):
        frozen.append("LayerNorm scales")
    return tuple(frozen)


def stack_rule(config: dict) -> str | None:
    """The first-order rule line of a ``head_layers`` head holding a layer that is not piecewise
    linear (as :attr:`.output.Linearization.description` words it), else None."""
    kinds = [kind for kind, _ in parse_stack(config.get("head_layers") or [], 0)]
    nonlinear = list(dict.fromkeys(k for k in kinds if k in STACK_NONLINEAR))
    if not nonlinear:
        return None
    return ("first order (gradient x activation, the remainder in the bias; not piecewise linear: "
            f"{', '.join(nonlinear)})")


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
