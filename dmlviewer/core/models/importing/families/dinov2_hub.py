"""The DINOv2 repository's layout (torch.hub ``dinov2_vits14`` ..., OML's DINOv2 extractors under
``model.``), converted to timm's as timm's own loader does: the training-only ``mask_token`` is
dropped; with registers, ``register_tokens`` become ``reg_token`` and the class token's position
embedding moves into the class token (timm's no_embed_class models add position embeddings to
the patch tokens only). timm's DINOv2 models then recognize it."""

from __future__ import annotations

from ..family import Family
from ..sources import Sources


def detect(sources: Sources) -> str | None:
    return next((k[: -len("mask_token")] for k in sources.tensors if k.endswith("mask_token")
                 and k[: -len("mask_token")] + "blocks.0.ls1.gamma" in sources.tensors), None)


def convert(sources: Sources, prefix: str) -> None:
    t = sources.tensors
    mask = prefix + "mask_token"
    sources.ignored[mask] = "DINOv2's mask token (used in training only)"
    renamed = {k: v for k, v in t.items() if k != mask}
    if prefix + "register_tokens" in t and prefix + "pos_embed" in t and prefix + "cls_token" in t:
        pos = t[prefix + "pos_embed"]
        fixed = {prefix + "reg_token": t[prefix + "register_tokens"],
                 prefix + "cls_token": t[prefix + "cls_token"] + pos[:, :1], prefix + "pos_embed": pos[:, 1:]}
        renamed = {(prefix + "reg_token" if k == prefix + "register_tokens" else k): v for k, v in renamed.items()}
        renamed.update(fixed)
    origin = {k: sources.origin.get(k, sources.origin.get(prefix + "register_tokens", 0)) for k in renamed}
    sources.tensors, sources.origin = renamed, origin
    sources.notes.append("DINOv2 repository layout converted to timm's (mask_token dropped"
                         + (", register tokens and the class token's position embedding moved)"
                            if prefix + "reg_token" in renamed else ")"))


FAMILY = Family("DINOv2 repository", detect=detect, convert=convert)
