"""Step 1 of an import: read the weights files and merge them into one key -> tensor table.

Wrappers are unwrap rules, not families: a container's ``state_dict``/``model``/``net``/...
entry (Lightning, OML, most training scripts), a dict of state dicts such as
pytorch-metric-learning's ``{"trunk": ..., "embedder": ...}`` (flattened with those prefixes),
and the ``module.`` (DDP/DataParallel) and ``_orig_mod.`` (torch.compile) prefixes a whole file
carries. Several files (pytorch-metric-learning's ``trunk_*.pth`` and ``embedder_*.pth``) are
merged, each key remembering its file. NaN/Inf weights are refused (checkpoint.py's
``check_finite``). Only tensors and plain values are read: nothing in a file runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..backbones import CHECKPOINT_FORMAT, format_keys, read_weights_file
from ..checkpoint import check_finite  # the one NaN/Inf check of every door that reads weights
from ..errors import CheckpointError

_WRAPPERS = ("state_dict", "model_state_dict", "model", "net", "network", "weights",
             "params", "module")
_STRIP = ("module.", "_orig_mod.")


@dataclass
class Sources:
    """The tensors of the weights files, merged: ``tensors`` (key -> tensor, in file order),
    ``origin`` (key -> file index), ``notes`` (what unwrapping did), ``ignored`` (entry -> why),
    ``meta`` (a file's top-level ``meta`` dict, as cnnimageretrieval-pytorch saves its input
    normalization and pooling; the first file's that has one)."""

    files: list[str]
    tensors: dict[str, torch.Tensor]
    origin: dict[str, int]
    notes: list[str] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Key -> shape of every tensor."""
        return {k: tuple(t.shape) for k, t in self.tensors.items()}

    def prefix_of(self, marker: str) -> str | None:
        """The key prefix under which a key ends with ``marker`` (None: no key does)."""
        return next((k[: -len(marker)] for k in self.tensors if k.endswith(marker)), None)

    def rename(self, rename: Callable[[str, torch.Tensor], tuple[str, torch.Tensor] | None], note: str) -> None:
        """Every key through ``rename`` (``(key, tensor) -> (new key, tensor)``, or None to drop
        the key), each keeping its file of origin; ``note`` says what was renamed."""
        renamed: dict[str, torch.Tensor] = {}
        origin: dict[str, int] = {}
        for key, t in self.tensors.items():
            out = rename(key, t)
            if out is not None:
                renamed[out[0]] = out[1]
                origin[out[0]] = self.origin[key]
        self.tensors, self.origin = renamed, origin
        self.notes.append(note)


def first_replace(text: str, table: Sequence[tuple[str, str]]) -> str:
    """``text`` with its first prefix in ``table`` (``(old, new)`` pairs) replaced."""
    for old, new in table:
        if text.startswith(old):
            return new + text[len(old):]
    return text


def triple(value) -> bool:
    """Three numbers (a mean or std of RGB)."""
    return isinstance(value, (list, tuple)) and len(value) == 3 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)


def fmt(values) -> str:
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"


def _tensor_dict(value) -> bool:
    return isinstance(value, dict) and bool(value) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _unwrap(data: dict, label: str, notes: list[str], ignored: dict[str, str]) -> dict[str, torch.Tensor]:
    """The state dict inside ``data`` (the wrapper rules of the module docstring)."""
    where = label
    while True:
        if _tensor_dict(data):
            return dict(data)
        wrapper = next((w for w in _WRAPPERS if isinstance(data.get(w), dict)
                        and any(isinstance(v, (torch.Tensor, dict)) for v in data[w].values())), None)
        if wrapper is None:
            break
        for k in data:
            if k != wrapper:
                ignored[f"{where}[{k!r}]"] = "not the model's weights"
        notes.append(f"{label}: took the weights from {where}[{wrapper!r}]")
        where = f"{where}[{wrapper!r}]"
        data = data[wrapper]
    out: dict[str, torch.Tensor] = {}
    groups = []
    for k, v in data.items():
        if isinstance(k, str) and isinstance(v, torch.Tensor):
            out[k] = v
        elif isinstance(k, str) and _tensor_dict(v):
            groups.append(k)
            out.update({f"{k}.{name}": t for name, t in v.items()})
        else:
            ignored[f"{where}[{k!r}]"] = "not a tensor or a state dict"
    if groups:
        notes.append(f"{label}: merged the state dicts {', '.join(groups)} as key prefixes")
    if not out:
        raise CheckpointError(f"{label} holds no model weights (no tensors found)")
    return out


def read_sources(paths: Sequence[str | os.PathLike]) -> Sources:
    """Read and merge the weights files (module docstring); ``CheckpointError`` for an
    unreadable file, a dmlviewer checkpoint, or a key that two files both hold."""
    if not paths:
        raise CheckpointError("no weights file given")
    files = [str(p) for p in paths]
    sources = Sources(files, {}, {})
    for index, path in enumerate(files):
        data = read_weights_file(path)
        if data.get("format") == CHECKPOINT_FORMAT:
            raise CheckpointError(f"{path} is already a dmlviewer checkpoint: open it directly")
        label = Path(path).name
        if not sources.meta and isinstance(data.get("meta"), dict):
            sources.meta = dict(data["meta"])
        tensors = _unwrap(data, label, sources.notes, sources.ignored)
        check_finite(tensors, path)
        for prefix in _STRIP:
            while tensors and all(k.startswith(prefix) for k in tensors):
                tensors = {k[len(prefix):]: v for k, v in tensors.items()}
                sources.notes.append(f"{label}: stripped the prefix {prefix!r} from every key")
        clash = sorted(tensors.keys() & sources.tensors.keys())
        if clash:
            raise CheckpointError(f"{path} and {files[sources.origin[clash[0]]]} both hold the keys "
                                  f"[{format_keys(clash)}]: give files of one model")
        sources.tensors.update(tensors)
        sources.origin.update(dict.fromkeys(tensors, index))
    return sources
