"""Two-branch (cross-view) models: a query encoder and a reference encoder with separate weights
mapping into one embedding space (street panorama / aerial image, sketch / photo; seed 000
Sec. 5.3), each with its own input shape.

:class:`TwoBranchModel` holds two models of the one interface (``forward -> ModelOutput``,
``linearize``, ``head_function``, ``preprocess``, ``group_slices``, ``dim``, ``config``): two
:class:`~.model.EmbeddingModel` built from a config, or any two models :func:`~.open_model`
returns. ``branch("query")`` / ``branch("reference")`` give them; ``preprocess_of(side)`` is the
branch's preprocessing at its own ``(height, width)`` input (e.g. a 1:4 panorama of 64 x 256
against a 128 x 128 aerial image). :func:`~dmlviewer.core.explain.explain_pair` runs the query
image through the query branch and the reference image through the reference branch; the
point-to-point tensor is then ``hq x wq x hr x wr`` between the two different grids and stays
exact (Eq. 3 of seed 000 applied to each side) when both heads are piecewise linear.

Config (what a checkpoint records; :func:`check_two_branch_config`)::

    {"branches": {"query": {model config}, "reference": {model config}},
     "input_shapes": {"query": [h, w], "reference": [h, w]}}

Each branch config is an :func:`~.model.check_config` config; its ``image_size`` is set to the
longer side of the branch's input shape (so the head-size limit is an upper bound). The state
dict's keys are the branches' prefixed ``query.`` and ``reference.``. A flatten head on a
non-square input is built for that input's grid.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable

import torch
from torch import nn

from .errors import ModelError
from .output import Linearization, ModelOutput

log = logging.getLogger(__name__)

BRANCHES = ("query", "reference")
_KEYS = {"branches", "input_shapes"}


def is_two_branch_config(config: Any) -> bool:
    """Whether ``config`` describes a two-branch model (it has ``branches``)."""
    return isinstance(config, dict) and "branches" in config


def check_two_branch_config(config: dict) -> dict:
    """The complete, validated two-branch config (see module docstring); ``ValueError`` naming
    the first wrong field. Each branch config is completed by ``check_config``."""
    from dmlviewer.core.data.transforms import input_shape

    from .model import check_config

    if not is_two_branch_config(config):
        raise ValueError("a two-branch config needs 'branches' with a 'query' and a 'reference' model config")
    unknown = set(config) - _KEYS
    if unknown:
        raise ValueError(f"unknown two-branch config key(s): {', '.join(sorted(map(str, unknown)))}"[:200])
    branches, shapes = config["branches"], config.get("input_shapes") or {}
    if not isinstance(branches, dict) or set(branches) != set(BRANCHES):
        raise ValueError("two-branch config 'branches' must hold exactly 'query' and 'reference'")
    if not isinstance(shapes, dict) or not set(shapes) <= set(BRANCHES):
        raise ValueError("two-branch config 'input_shapes' may hold only 'query' and 'reference'")
    out: dict = {"branches": {}, "input_shapes": {}}
    for side in BRANCHES:
        try:
            branch = check_config(branches[side])
            shape = input_shape(shapes[side] if side in shapes else branch["image_size"])
            branch["image_size"] = max(shape)
            out["branches"][side] = check_config(branch)
        except ValueError as exc:
            raise ValueError(f"{side} branch: {exc}") from None
        out["input_shapes"][side] = list(shape)
    dims = [_config_dim(out["branches"][s]) for s in BRANCHES]
    if None not in dims and dims[0] != dims[1]:
        raise ValueError(f"the branches must embed into one space: query dim {dims[0]}, reference dim {dims[1]}")
    return out


def _config_dim(config: dict) -> int | None:
    """The embedding width a branch config asks for (``None`` when only the built model knows)."""
    return config["dim"] or None


class _GridAt:
    """A backbone seen at a ``(height, width)`` input: ``grid()`` measures that input's feature
    grid, so that a flatten head is built for a non-square branch."""

    def __init__(self, backbone: nn.Module, shape: tuple[int, int]) -> None:
        self._backbone, self._shape = backbone, shape

    def __getattr__(self, name: str):
        return getattr(self._backbone, name)

    def grid(self, image_size: int) -> tuple[int, int]:
        was_training = self._backbone.training
        self._backbone.eval()
        try:
            p = next(self._backbone.parameters())
            x = torch.zeros(1, 3, *self._shape, device=p.device, dtype=p.dtype)
            h, w = self._backbone(x)["last"].shape[-2:]
        finally:
            self._backbone.train(was_training)
        return int(h), int(w)


def _build_branch(config: dict, shape: tuple[int, int], load_pretrained: bool) -> nn.Module:
    from .model import _build_head, build_model

    model = build_model(config, "cpu", load_pretrained=load_pretrained)
    if config["pooling"] == "flatten" and config["grouping"] != "a" and shape[0] != shape[1]:
        model.head = _build_head(model.config, _GridAt(model.backbone, shape))
    return model


def build_two_branch(config: dict, device: str | torch.device = "cpu", *,
                     load_pretrained: bool = True) -> "TwoBranchModel":
    """The two-branch model ``config`` describes (module docstring) on ``device``."""
    from .device import resolve_device

    config = check_two_branch_config(config)
    shapes = {s: tuple(config["input_shapes"][s]) for s in BRANCHES}
    branches = [_build_branch(config["branches"][s], shapes[s], load_pretrained) for s in BRANCHES]
    return TwoBranchModel(*branches, input_shapes=shapes).to(resolve_device(device))


class TwoBranchModel(nn.Module):
    """A query branch and a reference branch into one embedding space (module docstring).

    The single-branch interface answers for the query branch unless ``branch=`` names the other
    (``forward``, ``linearize``, ``head_function``, ``preprocess``); ``dim`` and
    ``group_slices`` are shared by construction."""

    def __init__(self, query: nn.Module, reference: nn.Module,
                 input_shapes: dict[str, tuple[int, int]] | None = None) -> None:
        super().__init__()
        from dmlviewer.core.data.transforms import input_shape

        self.query = query
        self.reference = reference
        if int(query.dim) != int(reference.dim):
            raise ModelError(f"the branches must embed into one space: query dim {query.dim}, "
                             f"reference dim {reference.dim}")
        if [(s.start, s.stop) for s in query.group_slices] != [(s.start, s.stop) for s in reference.group_slices]:
            raise ModelError("the branches must have the same groups (group_slices) to be compared group by group")
        shapes = dict(input_shapes or {})
        self.input_shapes = {side: input_shape(tuple(shapes[side]) if side in shapes
                                               else self.branch(side).preprocess.input_shape)
                             for side in BRANCHES}

    @property
    def config(self) -> dict:
        """The two-branch config (module docstring), JSON-serializable."""
        return {"branches": {s: copy.deepcopy(self.branch(s).config) for s in BRANCHES},
                "input_shapes": {s: list(self.input_shapes[s]) for s in BRANCHES}}

    def branch(self, side: str) -> nn.Module:
        """The ``"query"`` or ``"reference"`` branch."""
        if side not in BRANCHES:
            raise ValueError(f"branch must be 'query' or 'reference', got {side!r}")
        return self.query if side == "query" else self.reference

    def preprocess_of(self, side: str):
        """The branch's preprocessing at its own ``(height, width)`` input."""
        import dataclasses

        return dataclasses.replace(self.branch(side).preprocess, shape=self.input_shapes[side])

    @property
    def preprocess(self):
        """The query branch's preprocessing (``preprocess_of("reference")`` for the other)."""
        return self.preprocess_of("query")

    def forward(self, x: torch.Tensor, branch: str = "query") -> ModelOutput:
        return self.branch(branch)(x)

    def linearize(self, out: ModelOutput, branch: str = "query") -> Linearization:
        return self.branch(branch).linearize(out)

    def head_function(self, out: ModelOutput, index: int = 0, branch: str = "query"):
        return self.branch(branch).head_function(out, index)

    @property
    def group_slices(self) -> list[slice]:
        return self.query.group_slices

    @property
    def dim(self) -> int:
        return int(self.query.dim)

    def release(self) -> None:
        """Remove the hooks live-module branches put on the user's modules."""
        for side in BRANCHES:
            release = getattr(self.branch(side), "release", None)
            if callable(release):
                release()


def parse_input_shape(text: str) -> tuple[int, int]:
    """``(height, width)`` from ``"S"`` (a square side) or ``"HxW"`` (``"64x256"``; ``X``, ``*``
    or a space also separate), each from 8 to 4096; ``ValueError`` (one line) otherwise. The form
    every option that takes one branch's input shape reads (``--image-size``, ``--input-shapes``)."""
    from dmlviewer.core.data.transforms import input_shape

    raw = str(text).strip().lower()
    parts = [p for p in raw.replace("*", "x").replace(" ", "x").split("x") if p]
    if len(raw) > 40 or not 1 <= len(parts) <= 2 or not all(p.isascii() and p.isdigit() and len(p) <= 5 for p in parts):
        raise ValueError(f"input shape must be a side S or HxW (e.g. 64x256), each from 8 to 4096, got {text!r}"[:200])
    values = [int(p) for p in parts]
    return input_shape(values[0] if len(values) == 1 else tuple(values))


def parse_input_shapes(text: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """The query's and the reference's input shapes from ``"QUERY,REFERENCE"`` (each ``S`` or
    ``HxW``, e.g. ``"64x256,128"``: a 1:4 panorama and a 128 x 128 aerial image); ``ValueError``."""
    parts = str(text).split(",")
    if len(parts) != 2:
        raise ValueError(f"give the two branches' input shapes as QUERY,REFERENCE (each S or HxW, e.g. "
                         f"64x256,128), got {str(text)[:80]!r}")
    return parse_input_shape(parts[0]), parse_input_shape(parts[1])


def branch_of(model: nn.Module, side: str) -> nn.Module:
    """``side``'s branch of a two-branch model; any other model is its own branch for both sides."""
    return model.branch(side) if isinstance(model, TwoBranchModel) else model


def open_two_branch(source: tuple, device, open_one: Callable[..., tuple[nn.Module, dict]], *,
                    feature_layer=None, output=None, transform=None, size=None) -> tuple[TwoBranchModel, dict]:
    """``(TwoBranchModel, info)`` from a ``(query, reference)`` pair of anything
    ``open_one`` (:func:`~.opening.open_model`, which calls this) opens (modules, dmlviewer
    models, checkpoint paths).
    ``feature_layer``, ``output``, ``transform`` and ``size`` apply to both branches, or are
    themselves ``(query, reference)`` pairs; each branch's size is a side or a ``(height, width)``
    pair, e.g. ``size=((64, 256), 128)`` (as :func:`~dmlviewer.core.explain.explain_pair`'s)."""
    if len(source) != 2:
        raise ModelError(f"a two-branch model is a (query, reference) pair of models, got {len(source)} item(s)")

    def per_branch(value) -> tuple:
        return tuple(value) if isinstance(value, (tuple, list)) and len(value) == 2 else (value, value)

    layers, outputs, transforms, sizes = (per_branch(v) for v in (feature_layer, output, transform, size))
    branches, infos, shapes = [], [], {}
    for side, src, layer, out, tf, sz in zip(BRANCHES, source, layers, outputs, transforms, sizes):
        if isinstance(src, TwoBranchModel):
            raise ModelError(f"the {side} branch is itself a two-branch model")
        square = sz if isinstance(sz, int) else None
        model, info = open_one(src, device, feature_layer=layer, output=out, transform=tf, size=square)
        if isinstance(model, TwoBranchModel):
            raise ModelError(f"the {side} branch is itself a two-branch model")
        branches.append(model)
        infos.append(info)
        if isinstance(sz, (tuple, list)):
            shapes[side] = tuple(sz)
    try:
        model = TwoBranchModel(*branches, input_shapes=shapes).eval()
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    paths = [i.get("path") for i in infos]
    info = {"source": infos[0]["source"] if infos[0]["source"] == infos[1]["source"] else "python",
            "path": " + ".join(str(p) for p in paths) if any(paths) else None,
            "epoch": None, "metrics": {}, "config": model.config,
            "notes": [f"{side} branch: {n}" for side, i in zip(BRANCHES, infos) for n in i.get("notes") or []],
            "branches": {side: {k: i.get(k) for k in ("source", "path", "sha256")} for side, i in zip(BRANCHES, infos)}}
    return model, info


__all__ = ["BRANCHES", "TwoBranchModel", "branch_of", "build_two_branch", "check_two_branch_config",
           "is_two_branch_config", "open_two_branch", "parse_input_shape", "parse_input_shapes"]
