"""The record of one import family (a layout the importer knows: torchvision's ViT, cnnimageretrieval's
ResNet, timm's vision transformers, ...). Each family is one module of ``families/`` holding one
:class:`Family`, registered by one row of ``registry.FAMILIES``; :func:`.plan.analyze` walks the
table in order, so a family sees the keys as the families before it left them (a converter
renames torchvision's keys to timm's, then timm's family shortlists its models).

A family's hooks, each optional:

- ``detect(sources)``: the key prefix where its layout is (``""`` at the top level), None when
  the files are not of this family;
- ``convert(sources, prefix)``: rename the keys to the layout its candidates are built with
  (the same function; refuse with ``LayoutError`` what cannot be renamed exactly);
- ``shortlist(shapes)``: the candidate names to try, given the (converted) keys' shapes;
- ``build(name)``: its own :class:`~.candidates.Candidate` of a name (default: the generic one);
- ``claims(name)``: whether an architecture the user names is built this family's way when the
  files are of this family;
- ``defaults(found, options)``: what its metadata says (pooling, input size and normalization);
- ``check(found, layers, options)``: after the head is known, assumption lines (or a refusal);
- ``folder(path)``: for a family that is a folder (a Hugging Face one): its weights file and
  defaults.

``always``: tried without being detected (the built-in backbones, timm's CNNs), after the
detected ones; ``fallback``: when not detected, still tried last. ``needs_timm``: only when timm
is installed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# The hooks' argument types (``Sources``, ``Candidate``, ``Layer``) are named, not imported: the
# modules that define them do not depend on this record, nor it on them.


@dataclass
class Options:
    """What the user stated (None: not stated) and the families' metadata filled in."""

    arch: str | None = None
    head: str = "auto"
    prefix: str | None = None
    image_size: int | None = None
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    pooling: str | None = None
    gem_p: float | None = None
    force: bool = False

    @property
    def head_pools(self) -> bool:
        """The head spec starts with a pooling (``gap,...``): it states the pooling."""
        return self.head.strip().lower().split(",")[0].split("=")[0] in ("gap", "gmp", "gem")


@dataclass
class Defaults:
    """What a family's metadata says: values as if given (the user's own win), and a
    normalization assumed when none is given (``(mean, std, whose)``)."""

    arch: str | None = None
    pooling: str | None = None
    image_size: int | None = None
    mean: list[float] | None = None
    std: list[float] | None = None
    normalization: tuple[tuple[float, ...], tuple[float, ...], str] | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Found:
    """A family found in the files, under ``prefix``."""

    family: "Family"
    prefix: str
    sources: "Sources"


@dataclass(frozen=True)
class Family:
    """One layout family (module docstring)."""

    name: str
    detect: Callable[["Sources"], str | None] | None = None
    convert: Callable[["Sources", str], None] | None = None
    shortlist: Callable[[dict[str, tuple[int, ...]]], list[str]] | None = None
    build: Callable[[str], "Candidate"] | None = None
    claims: Callable[[str], bool] | None = None
    defaults: Callable[[Found, Options], Defaults] | None = None
    check: Callable[[Found, list["Layer"], Options], list[str]] | None = None
    folder: Callable[[str], tuple[str, Defaults]] | None = None
    always: bool = False
    fallback: bool = False
    needs_timm: bool = False
