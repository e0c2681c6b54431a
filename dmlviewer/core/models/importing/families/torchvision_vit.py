"""torchvision's ``VisionTransformer`` (``vit_b_16`` ...): its keys (``conv_proj``,
``class_token``, ``encoder.layers.encoder_layer_N``) renamed to timm's layout, which computes the
same function (same q/k/v order in one projection, LayerNorm eps 1e-6, exact GELU); timm's
vision transformers then recognize it. Input normalization: ImageNet's (torchvision's)."""

from __future__ import annotations

import torch

from ..errors import LayoutError
from ..family import Defaults, Family, Found, Options
from ..sources import Sources, first_replace

_BLOCK = (("ln_1.", "norm1."), ("self_attention.in_proj_weight", "attn.qkv.weight"),
          ("self_attention.in_proj_bias", "attn.qkv.bias"), ("self_attention.out_proj.", "attn.proj."),
          ("ln_2.", "norm2."), ("mlp.0.", "mlp.fc1."), ("mlp.3.", "mlp.fc2."),
          ("mlp.linear_1.", "mlp.fc1."), ("mlp.linear_2.", "mlp.fc2."))
_TOP = (("class_token", "cls_token"), ("conv_proj.", "patch_embed.proj."),
        ("encoder.pos_embedding", "pos_embed"), ("encoder.ln.", "norm."), ("heads.head.", "head."))
#: torchvision's normalization (ImageNet's), assumed for its layouts when none is given
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "ImageNet's (torchvision's)")


def detect(sources: Sources) -> str | None:
    return sources.prefix_of("encoder.layers.encoder_layer_0.ln_1.weight")


def convert(sources: Sources, prefix: str) -> None:
    if prefix + "heads.pre_logits.weight" in sources.tensors:
        raise LayoutError("torchvision ViT with a representation layer (heads.pre_logits + Tanh): dmlviewer's "
                          "head cannot hold a Tanh")
    layers = prefix + "encoder.layers.encoder_layer_"

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
        if key.startswith(layers):
            index, _, rest = key[len(layers):].partition(".")
            return f"{prefix}blocks.{index}.{first_replace(rest, _BLOCK)}", t
        if key.startswith(prefix):
            return prefix + first_replace(key[len(prefix):], _TOP), t
        return key, t

    sources.rename(rename, "torchvision ViT layout (conv_proj, encoder.layers) renamed to timm's, which computes "
                   "the same function")


def torchvision_normalization(_found: Found, _options: Options) -> Defaults:
    """torchvision's layouts were trained with ImageNet's normalization (an assumption)."""
    return Defaults(normalization=IMAGENET)


FAMILY = Family("torchvision ViT", detect=detect, convert=convert, defaults=torchvision_normalization)
