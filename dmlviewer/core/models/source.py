"""What a model was opened from, as a value: remembered in recent models and the last session,
and reopened as what it is (issue 23 item 2, issue 22 item 1).

Every door into dmlviewer is one :class:`ModelSource`:

- ``checkpoint``: a dmlviewer checkpoint file (from training or ``import-model``), ``path``;
- ``pretrained``: ``imagenet:BACKBONE``, a backbone with its ImageNet weights, ``path`` is the spec;
- ``code``: the user's own Python builds the architecture (``entry`` is ``file.py:NAME`` or
  ``package.module:NAME``, called with ``args``), ``weights`` is a tensor file read with
  ``weights_only=True``; running the user's file is an explicit act, like running their script.
  A callable that returns a ``(query, reference)`` pair of modules is a two-branch model (issue
  25): ``weights`` holds both branches (``query.``/``reference.`` keys) or, with
  ``reference_weights``, the query branch's; ``options["input_shapes"]`` is the pair of input
  shapes (``[[64, 256], [128, 128]]``);
- ``python``: a live ``nn.Module`` handed over from Python, for the lifetime of the process only
  (never written to settings: there is nothing to reopen it from).

A source read back from settings is untrusted text: :meth:`ModelSource.from_dict` checks every
field and raises :class:`ModelError` with one line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ModelError

PRETRAINED_PREFIX = "imagenet:"
KINDS = ("checkpoint", "pretrained", "code", "python")
#: fields a remembered source may carry, and the longest text accepted for each
_MAX_TEXT = 4096


@dataclass(frozen=True)
class ModelSource:
    """One model source (see the module docstring). ``options`` holds what the code door's
    caller chose besides the callable (``feature_layer``, ``output``, ``size``)."""

    kind: str
    path: str | None = None          # checkpoint file, or the imagenet:NAME spec
    entry: str | None = None         # code: "file.py:NAME" or "package.module:NAME"
    args: dict = field(default_factory=dict)      # code: keyword arguments of the callable (JSON)
    weights: str | None = None       # code: weights file (torch.load weights_only=True, safetensors)
    options: dict = field(default_factory=dict)   # code/python: feature_layer, output, size, input_shapes
    label: str | None = None         # a name to show: the user's label of the model, or a live module's class
    reference_weights: str | None = None  # code, two branches: the reference branch's weights file

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ModelError(f"unknown model source kind {self.kind!r}: one of {', '.join(KINDS)}")

    # -- construction
    @classmethod
    def from_text(cls, text: str) -> "ModelSource":
        """A checkpoint path or ``imagenet:BACKBONE``, as the commands' ``--checkpoint`` takes it."""
        text = str(text)
        if text.startswith(PRETRAINED_PREFIX):
            return cls("pretrained", path=text)
        return cls("checkpoint", path=str(Path(text).expanduser()))

    @classmethod
    def from_dict(cls, data: Any) -> "ModelSource":
        """A source from remembered settings (untrusted): every field checked, one-line errors."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError:
                return cls.from_text(data)  # recent lists written before sources had kinds: a path
        if not isinstance(data, dict):
            raise ModelError("a remembered model source is not an object")
        kind = data.get("kind")
        if kind not in KINDS or kind == "python":
            raise ModelError(f"a remembered model source has kind {kind!r}, which cannot be reopened")
        out: dict[str, Any] = {"kind": kind}
        for key in ("path", "entry", "weights", "label", "reference_weights"):
            value = data.get(key)
            if value is None:
                continue
            if not isinstance(value, str) or len(value) > _MAX_TEXT or "\x00" in value:
                raise ModelError(f"a remembered model source has a bad {key!r}")
            out[key] = value
        for key in ("args", "options"):
            value = data.get(key, {})
            if not isinstance(value, dict) or len(json.dumps(value)) > _MAX_TEXT:
                raise ModelError(f"a remembered model source has a bad {key!r}")
            out[key] = value
        problem = _options_problem(out.get("options", {}))
        if problem:
            raise ModelError(f"a remembered model source has a bad option: {problem}")
        if kind in ("checkpoint", "pretrained") and not out.get("path"):
            raise ModelError(f"a remembered {kind} source has no path")
        if kind == "code" and not out.get("entry"):
            raise ModelError("a remembered code source has no entry (file.py:NAME)")
        return cls(**out)

    # -- what it is
    def to_dict(self) -> dict:
        """JSON-ready; refused for a live module (nothing to reopen it from)."""
        if self.kind == "python":
            raise ModelError("a live Python module cannot be remembered")
        out: dict[str, Any] = {"kind": self.kind}
        for key in ("path", "entry", "weights", "label", "reference_weights"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        for key in ("args", "options"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @property
    def persistent(self) -> bool:
        """Can it be reopened in another process (remembered in recents and the last session)?"""
        return self.kind != "python"

    def display(self) -> str:
        """A short name for menus and job names."""
        if self.kind == "checkpoint":
            return Path(self.path or "").name
        if self.kind == "pretrained":
            return str(self.path)
        if self.kind == "code":
            weights = f" + {Path(self.weights).name}" if self.weights else ""
            if self.reference_weights:
                weights += f" + {Path(self.reference_weights).name}"
            return f"{self.entry}{weights}"
        return self.label or "Python module"

    def stem(self) -> str:
        """A file-name-safe short name (no ``:`` or path separators; Windows and SMB shares)."""
        text = Path(self.path).stem if self.kind == "checkpoint" else self.display()
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-.")
        return safe[:60] or "model"

    def missing(self) -> str | None:
        """One line when a file this source needs is gone (before trying to open it), else None."""
        for what, value in (("checkpoint", self.path if self.kind == "checkpoint" else None),
                            ("weights file", self.weights),
                            ("reference weights file", self.reference_weights),
                            ("model file", _entry_file(self.entry))):
            if value and not os.path.exists(value):
                return f"{what} not found: {value}"
        return None

    # -- opening
    def open(self, device: Any = "cpu"):
        """``(model, info)`` through :func:`~dmlviewer.core.models.open_model`; ``info["source"]``
        is the kind and ``info["model_source"]`` this object."""
        from .opening import open_model

        if self.kind in ("checkpoint", "pretrained"):
            model, info = open_model(self.path, device, size=self.options.get("size"))
        elif self.kind == "code":
            from .code_door import open_code_model

            problem = _options_problem(self.options)
            if problem:
                raise ModelError(f"model options: {problem}")
            model, info = open_code_model(self.entry, args=self.args, weights=self.weights, device=device,
                                          reference_weights=self.reference_weights, **self.options)
        else:
            raise ModelError("a live Python module is reopened from Python, not from a source")
        return model, {**info, "model_source": self}


#: what ``options`` may hold, and the types each takes (JSON values)
OPTION_TYPES = {"feature_layer": (str,), "output": (str, int), "size": (int,), "input_shapes": (list,),
                "mean": (list,), "std": (list,)}


def _options_problem(options: dict) -> str | None:
    """Why ``options`` cannot be passed to the opening functions (one line), or None."""
    for key, value in options.items():
        if key not in OPTION_TYPES:
            return f"unknown option {key!r} (known: {', '.join(OPTION_TYPES)})"
        if value is not None and (isinstance(value, bool) or not isinstance(value, OPTION_TYPES[key])):
            return f"{key} must be {' or '.join(t.__name__ for t in OPTION_TYPES[key])}, got {type(value).__name__}"
    size = options.get("size")
    if size is not None and not 8 <= size <= 4096:  # as a model config's image_size
        return f"size must be from 8 to 4096 pixels, got {size}"
    for key in ("mean", "std"):  # the normalization of a code model's input (as import-model's --mean/--std)
        values = options.get(key)
        if values is not None and not (len(values) == 3 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= 1e3 for v in values)
                and (key == "mean" or all(v > 0 for v in values))):
            return f"{key} must be three numbers (R, G, B){', each above 0' if key == 'std' else ''}, got {json.dumps(values)[:80]}"
    shapes = options.get("input_shapes")
    if shapes is not None and not _shapes_ok(shapes):
        return ("input_shapes must be the query's and the reference's input shape, each a side or [height, width] "
                f"from 8 to 4096, got {json.dumps(shapes)[:80]}")
    return None


def _shapes_ok(shapes: list) -> bool:
    """Whether ``shapes`` is a ``[query, reference]`` list of sides or ``[h, w]`` pairs (8..4096)."""
    def side(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 8 <= v <= 4096

    return len(shapes) == 2 and all(side(s) or (isinstance(s, list) and len(s) == 2 and all(map(side, s)))
                                    for s in shapes)


def _entry_file(entry: str | None) -> str | None:
    """The file of a ``file.py:NAME`` entry (None for ``package.module:NAME``)."""
    if not entry or ":" not in entry:
        return None
    file = entry.rsplit(":", 1)[0]
    return file if file.endswith(".py") else None
