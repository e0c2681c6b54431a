"""timm vision transformers saved with ``global_pool="avg"`` (OML's and many retrieval recipes'
choice): timm then builds no final norm before the pooling but ``fc_norm`` after it, on the mean
of the patch tokens. The files hold ``fc_norm`` and no ``norm``; the same names as
:mod:`.timm_vit` are tried, built that way (config ``fc_norm``), and the pooling is the mean of
the patch tokens (assumed: ``fc_norm`` with the class token is possible, and said so). The
decomposition is exact as for the other mean-pooled transformers (vit.py): the LayerNorm scale of
``fc_norm`` frozen at the input."""

from __future__ import annotations

from ..candidates import Candidate, vit_candidate
from ..family import Family
from ..sources import Sources
from .timm_vit import shortlist

NAME = "timm vision transformer, mean-pooled (fc_norm)"


def detect(sources: Sources) -> str | None:
    prefix = sources.prefix_of("fc_norm.weight")
    if prefix is None or prefix + "norm.weight" in sources.tensors:
        return None
    return prefix if prefix + "pos_embed" in sources.tensors and prefix + "blocks.0.attn.qkv.weight" in \
        sources.tensors else None


def build(name: str) -> Candidate:
    return vit_candidate(name, NAME, fc_norm=True)


def claims(name: str) -> bool:
    from ...vit import timm_vit_name

    return timm_vit_name(name) is not None


FAMILY = Family(NAME, detect=detect, shortlist=shortlist, build=build, claims=claims, needs_timm=True)
