"""The one table of import families (``FAMILIES``), in the order :func:`.plan.analyze` walks
them: the folder family, then the converters (each sees the keys as the ones before it left
them), then the families that shortlist candidates for the converted keys, then the ones tried
for every file. A new family is one module of ``families/`` and one row here."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from .families import (cirtorch, dinov2_hub, hf_folder, timm_cnn, timm_convnext, timm_regnet, timm_swin, timm_vit,
                       timm_vit_mean_pooled, torchvision, torchvision_convnext, torchvision_regnet,
                       torchvision_swin, torchvision_vit)
from .candidates import Candidate, candidate
from .family import Family, Found
from .sources import Sources

FAMILIES: tuple[Family, ...] = (
    hf_folder.FAMILY,
    torchvision_vit.FAMILY,
    torchvision_regnet.FAMILY,
    torchvision_convnext.FAMILY,
    torchvision_swin.FAMILY,
    cirtorch.FAMILY,
    dinov2_hub.FAMILY,
    timm_vit_mean_pooled.FAMILY,
    timm_vit.FAMILY,
    timm_regnet.FAMILY,
    timm_convnext.FAMILY,
    timm_swin.FAMILY,
    torchvision.FAMILY,
    timm_cnn.FAMILY,
)


def family_named(name: str) -> Family:
    """The family called ``name`` (KeyError: none)."""
    for family in FAMILIES:
        if family.name == name:
            return family
    raise KeyError(name)


@lru_cache(maxsize=None)
def build_candidate(name: str, family: str = "") -> Candidate:
    """``name`` as ``family`` builds it (its ``build``), or the generic candidate ("")."""
    build = family_named(family).build if family else None
    return build(name) if build is not None else candidate(name)


def _usable(family: Family) -> bool:
    if not family.needs_timm:
        return True
    from ..timm_backbones import timm_available

    return timm_available()


def walk(sources: Sources) -> list[Found]:
    """Each family in table order: detected in the files (as the families before it left them),
    then converted; the families found, in order."""
    found = []
    for family in FAMILIES:
        if family.detect is None:
            continue
        prefix = family.detect(sources)
        if prefix is None:
            continue
        if family.convert is not None:
            family.convert(sources, prefix)
        found.append(Found(family, prefix, sources))
    return found


Stage = list[tuple[str, str]]  # (candidate name, family name: "" for the generic candidate)


def stages(found: Sequence[Found], shapes: dict[str, tuple[int, ...]], arch: str | None = None) -> list[Stage]:
    """The candidates in the order they are tried, in stages (the next stage only when none of a
    stage fits): ``arch`` alone (built the way of a found family that claims it), or the
    shortlists of the families found, then those tried for every file (the families not found
    that are tried anyway join the last stage)."""
    if arch:
        claim = next((f.family.name for f in found if f.family.claims is not None and _usable(f.family)
                      and f.family.claims(arch)), "")
        return [[(arch, claim)]]
    seen = {f.family.name for f in found}
    out: list[Stage] = []
    for f in found:
        if f.family.shortlist is not None and _usable(f.family):
            out.append([(n, _own(f.family)) for n in f.family.shortlist(shapes)])
    late: Stage = []
    for family in FAMILIES:
        if family.shortlist is None or not _usable(family) or family.name in seen:
            continue
        if family.always:
            out.append([(n, _own(family)) for n in family.shortlist(shapes)])
        elif family.fallback:
            late += [(n, _own(family)) for n in family.shortlist(shapes)]
    if late:
        if out:
            out[-1] += late
        else:
            out.append(late)
    return out


def _own(family: Family) -> str:
    """The family whose ``build`` makes its candidates ("" for the generic ones)."""
    return family.name if family.build is not None else ""


def candidate_names(arch: str | None = None) -> list[list[str]]:
    """The candidate names tried for a file in which no family is found, in stages (``[[arch]]``
    when given): the Import Model dialog's list of architectures."""
    return [[n for n, _ in stage] for stage in stages([], {}, arch)]
