"""timm convolutional networks as backbones, named ``timm:NAME`` (``timm:resnet50``,
``timm:efficientnet_b0``, ``timm:convnext_tiny``; any name ``timm.list_models()`` knows, with or
without a pretrained tag such as ``.a1_in1k``). Needs the optional extra ``timm``.

Features: ``"last"`` is the network's ``forward_features`` output, its last convolutional map
(B x C x h x w; a channels-last model's map, timm's Swin with ``output_fmt`` NHWC, is permuted to it),
before global pooling and classifier; its channels are measured on a meta-device
forward and its stride is timm's ``feature_info[-1]["reduction"]``. The top-level modules that
``forward_features`` never runs (global pool, classifier, and heads after the pooling such as
mobilenetv3's ``conv_head`` or convnext's ``head``) play the role of the classifier: their keys
are ignored in weight files and they are replaced by ``Identity``. Models whose features are not
a map (vision transformers: tokens) are not this module's: the resolver says so.

Weights come from local files only: ``pretrained`` FILE (a timm state dict, ``.pth``/``.bin`` or
``.safetensors``) or ``"imagenet"``, the model's default pretrained file looked up in the local
Hugging Face cache only (``huggingface_hub.try_to_load_from_cache``, which never opens a
connection). ``HF_HUB_OFFLINE=1`` is set (unless already set) before timm is first imported, and
networks are always created with ``pretrained=False``: nothing here reaches the network.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import nn

from .backbones import BACKBONES, BackboneSpec

log = logging.getLogger(__name__)

PREFIX = "timm"


def import_timm():
    """The timm module, imported offline; ``ValueError`` (one line) when it is not installed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import timm
    except ImportError:
        raise ValueError("timm backbones need the optional package timm "
                         "(pip install 'dmlviewer[timm]')") from None
    return timm


@dataclass(frozen=True)
class TimmInfo:
    """What the importer and the model need to know about one timm CNN."""

    name: str
    spec: BackboneSpec
    pool_type: str                    # timm's global pool type of the original model ("avg", "max", ...)
    head_modules: tuple[str, ...]     # top-level modules after the features (pool, heads, classifier)
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    input_size: int


def _create(name: str, device: str | torch.device | None = None) -> nn.Module:
    timm = import_timm()
    if device is None:
        return timm.create_model(name, pretrained=False)
    with torch.device(device):
        return timm.create_model(name, pretrained=False)


def _features(net: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"last": net.forward_features(x)}


def _features_nhwc(net: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """``forward_features`` of a channels-last model (timm's Swin: B x h x w x C) as B x C x h x w."""
    return {"last": net.forward_features(x).permute(0, 3, 1, 2)}


def _is_nhwc(net: nn.Module) -> bool:
    """Whether ``forward_features`` returns a channels-last map (timm's ``output_fmt`` NHWC)."""
    return str(getattr(net, "output_fmt", "")).upper().endswith("NHWC")


def _pool_type(net: nn.Module) -> str:
    for module in net.modules():
        if type(module).__name__ == "SelectAdaptivePool2d":
            return str(module.pool_type or "")
    return ""


def _weights_file(name: str, cfg: dict) -> str:
    """The default pretrained file of ``name`` in the local Hugging Face cache (never downloaded)."""
    hub_id = cfg.get("hf_hub_id")
    if not hub_id:
        raise FileNotFoundError(f"timm:{name} names no Hugging Face weights: pass its weights file "
                                "(pretrained FILE)")
    from huggingface_hub import constants, try_to_load_from_cache

    names = [cfg["hf_hub_filename"]] if cfg.get("hf_hub_filename") else ["model.safetensors", "pytorch_model.bin"]
    for filename in names:
        found = try_to_load_from_cache(hub_id, filename)
        if isinstance(found, str):
            return os.path.abspath(found)
    raise FileNotFoundError(
        f"ImageNet weights for timm:{name} not found: place {names[0]} of {hub_id} in the Hugging Face "
        f"cache ({constants.HF_HUB_CACHE}) or pass the weights file (pretrained FILE)")


@lru_cache(maxsize=None)
def timm_info(name: str) -> TimmInfo:
    """Build ``name`` on the meta device once and read its metadata; ``ValueError`` when timm is
    missing, the name is unknown or the model is not a CNN."""
    timm = import_timm()
    if not timm.is_model(name):
        raise ValueError(f"timm has no model {name!r} (see timm.list_models())")
    net = _create(name, "meta").eval()
    cfg = dict(getattr(net, "pretrained_cfg", {}) or {})
    size = int(cfg.get("input_size", (3, 224, 224))[-1])
    ran: set[str] = set()
    hooks = [m.register_forward_hook(lambda *_a, n=n: ran.add(n)) for n, m in net.named_modules() if n]
    try:
        with torch.no_grad():
            feats = net.forward_features(torch.empty(1, 3, size, size, device="meta"))
    except Exception as exc:  # noqa: BLE001 - any failure means we cannot use it as a backbone
        raise ValueError(f"timm:{name}: forward_features fails on a {size} px input ({exc})") from None
    finally:
        for h in hooks:
            h.remove()
    if not isinstance(feats, torch.Tensor) or feats.dim() != 4:
        kind = f"{feats.dim()}-D tokens" if isinstance(feats, torch.Tensor) else type(feats).__name__
        raise ValueError(f"timm:{name} is not a convolutional network (its features are {kind}, not a map)")
    nhwc = _is_nhwc(net)
    channels = int(feats.shape[-1] if nhwc else feats.shape[1])
    info = getattr(net, "feature_info", None)
    stride = int(info[-1]["reduction"]) if info else size // int(feats.shape[-2 if nhwc else -1])
    head = tuple(n for n, _ in net.named_children() if n not in ran)
    spec = BackboneSpec(
        f"{PREFIX}:{name}", lambda image_size: _create(name), _features_nhwc if nhwc else _features,
        {"last": channels}, {"last": stride}, classifier=head,
        weights_file=lambda: _weights_file(name, cfg),
        weights_hint="timm's default pretrained weights (Hugging Face cache)")
    mean = tuple(float(v) for v in cfg.get("mean", (0.485, 0.456, 0.406)))
    std = tuple(float(v) for v in cfg.get("std", (0.229, 0.224, 0.225)))
    log.debug("timm:%s: %d channels, stride %d, head modules %s", name, channels, stride, head)
    return TimmInfo(name, spec, _pool_type(net), head, mean, std, size)


def timm_spec(name: str) -> BackboneSpec:
    """Resolver of the ``timm:`` family (registered in :data:`BACKBONES`)."""
    return timm_info(name).spec


def timm_available() -> bool:
    """Whether timm is installed (found, not imported: importing it takes seconds)."""
    import importlib.util

    return importlib.util.find_spec("timm") is not None


BACKBONES.register_family(PREFIX, timm_spec)
