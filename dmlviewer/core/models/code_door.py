"""The code-and-weights door (issue 22 item 1): the architecture from the user's own Python, the
weights from a tensor file, the way timm, Lightning and OML themselves open models.

``entry`` names a callable that returns an ``nn.Module``: ``path/to/file.py:NAME`` (the file is
imported under a name of its own, its folder on ``sys.path`` meanwhile so that sibling modules
import) or ``package.module:NAME`` (imported as Python imports it, the current folder on
``sys.path`` as ``python -m`` has it); ``NAME`` may be dotted (``Net.from_config``). It is called
with ``args`` (keyword arguments, JSON). Running the user's file is an explicit act, like running
their script; the weights file is data and is read only as data
(:func:`~.backbones.read_weights_file`: ``torch.load(weights_only=True)`` or safetensors).

The weights are unwrapped as ``import-model`` unwraps them (:func:`~.importing.read_sources`:
Lightning's ``state_dict``, DDP's ``module.``, ``torch.compile``'s ``_orig_mod.``), a prefix that
all the model's keys lack (Lightning's ``model.``/``net.`` attribute) is stripped when that makes
the names match, and then loaded with ``strict=True``: a mismatch is one line naming a few
missing and unexpected keys. The module then goes through :func:`~.opening.open_model`, so
everything the Python door supports works from the command line and the app.

Every error is one :class:`~.errors.ModelError` (or ``CheckpointError`` for the weights) line:
the file missing, a syntax or import error in it (file and line, no traceback), ``NAME`` missing
(the callables the module has), the call failing, a result that is not an ``nn.Module``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import itertools
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from dmlviewer.core.fields import literal

from .errors import CheckpointError, CheckpointFieldError, ModelError, ModelFieldError

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_counter = itertools.count()


def parse_entry(entry: str) -> tuple[str, str, bool]:
    """``(file or module, NAME, is_file)`` of ``FILE.py:NAME`` or ``package.module:NAME``."""
    text = str(entry).strip()
    if ":" not in text:
        raise ModelError(f"model {text!r}: give FILE.py:NAME or package.module:NAME (NAME: the function or "
                         "class that returns the torch.nn.Module)")
    where, name = text.rsplit(":", 1)
    if not _NAME.match(name):
        raise ModelError(f"model {text!r}: {name!r} is not a Python name (FILE.py:NAME or package.module:NAME)")
    is_file = where.endswith(".py") or "/" in where or os.sep in where
    if not is_file and not _NAME.match(where):
        raise ModelError(f"model {text!r}: {where!r} is neither a .py file nor a dotted module name")
    return where, name, is_file


def _user_frame(exc: BaseException, roots: list[Path]) -> str:
    """``file:line`` of the deepest traceback frame in the user's files (under ``roots``), or ''."""
    found = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        try:
            path = Path(frame.filename).resolve()
        except (OSError, ValueError):
            continue
        if any(path == root or root in path.parents for root in roots) and not (
                {"site-packages", "dist-packages"} & set(path.parts)):  # a virtual env inside the project
            found = f"{frame.filename}:{frame.lineno}"
    return found


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _import_file(path: Path) -> ModuleType:
    """Import the user's file under a name of its own (a fresh one each time: an edited file is
    re-read), its folder first on ``sys.path`` during the import and restored afterwards."""
    if not path.is_file():
        raise ModelError(f"model file not found: {path}" if not path.exists() else f"model file {path} is not a file")
    stem = re.sub(r"\W", "_", path.stem)
    name = f"dmlviewer_code_{stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"cannot import {path} as Python")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent.resolve())
    sys.path.insert(0, folder)
    sys.modules[name] = module  # classes and dataclasses defined in it look their module up
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise ModelError(f"{exc.filename or path}:{exc.lineno}: syntax error in the model file: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code: any error, in one line
        sys.modules.pop(name, None)
        where = _user_frame(exc, [path.parent.resolve()]) or str(path)
        raise ModelError(f"{where}: importing the model file failed: {_one_line(exc)}") from None
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:  # the user's code removed it itself
            pass
    return module


def _import_module(dotted: str) -> ModuleType:
    """``importlib.import_module`` with the current folder on ``sys.path`` (as ``python -m``)."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name and (dotted == exc.name or dotted.startswith(exc.name + ".")):
            raise ModelError(f"cannot import {dotted}: no module named {exc.name!r} (install it, or run from the "
                             "folder that holds it)") from None
        raise ModelError(f"cannot import {dotted}: {_one_line(exc)}") from None
    except SyntaxError as exc:
        raise ModelError(f"{exc.filename}:{exc.lineno}: syntax error: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code
        spec = importlib.util.find_spec(dotted.split(".")[0]) if dotted else None
        roots = [Path(p).resolve() for p in (spec.submodule_search_locations or []) if p] if spec else []
        where = _user_frame(exc, roots) if roots else ""
        raise ModelError(f"{where + ': ' if where else ''}importing {dotted} failed: {_one_line(exc)}") from None
    finally:
        if added:
            try:
                sys.path.remove(cwd)
            except ValueError:
                pass


def _callables(module: ModuleType) -> list[str]:
    """The public callables a module defines (those it imports last), for a message."""
    own, other = [], []
    for key, value in vars(module).items():
        if key.startswith("_") or not callable(value) or isinstance(value, ModuleType):
            continue
        (own if getattr(value, "__module__", None) == module.__name__ else other).append(key)
    return own + other


def resolve_entry(entry: str) -> tuple[Any, Path | None]:
    """``(the callable, the file it came from or None)`` for ``entry`` (module docstring)."""
    where, name, is_file = parse_entry(entry)
    if is_file:
        path = Path(where).expanduser()
        module = _import_file(path)
        label = str(path)
    else:
        module = _import_module(where)
        path = Path(module.__file__) if getattr(module, "__file__", None) else None
        label = where
    obj: Any = module
    for i, part in enumerate(name.split(".")):
        if not hasattr(obj, part):
            if i == 0:
                names = _callables(module)
                listed = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "") if names else "none"
                raise ModelError(f"{label} has no {part!r}; its callables: {listed}")
            raise ModelError(f"{label}: {'.'.join(name.split('.')[:i])} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ModelError(f"{label}:{name} is a {type(obj).__name__}, not a function or class that returns the model")
    return obj, path


def build_module(entry: str, args: Mapping[str, Any] | None = None
                 ) -> tuple[nn.Module | tuple[nn.Module, nn.Module], Path | None]:
    """Call ``entry`` with ``args`` as keyword arguments: ``(the nn.Module, its source file)``; a
    ``(query, reference)`` pair of modules for an ``entry`` that returns two (a two-branch model)."""
    if args is not None and not isinstance(args, Mapping):
        raise ModelError(f"model arguments must be a JSON object (name: value), got a {type(args).__name__}")
    args = dict(args or {})
    factory, path = resolve_entry(entry)
    try:
        module = factory(**args)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code: any error, in one line
        roots = [path.parent.resolve()] if path is not None else []
        where = _user_frame(exc, roots) if roots else ""
        shown = json.dumps(args)[:200]
        raise ModelError(f"{entry} with arguments {shown} failed{' at ' + where if where else ''}: "
                         f"{_one_line(exc)}") from None
    if isinstance(module, (tuple, list)):  # (query, reference): a two-branch model (issue 25)
        if len(module) != 2:
            raise ModelError(f"{entry} returned {len(module)} items: return one torch.nn.Module, or a "
                             "(query, reference) pair of them for a two-branch model")
        pair = tuple(_one_module(m, entry, f"the {side} item") for m, side in zip(module, ("query", "reference")))
        return pair, path
    return _one_module(module, entry), path


def _one_module(module: Any, entry: str, what: str = "") -> nn.Module:
    """``module`` unwrapped from DataParallel, or ``ModelError`` when it is no ``nn.Module``."""
    if isinstance(module, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        module = module.module
    if not isinstance(module, nn.Module):
        raise ModelError(f"{entry} returned {what + ' as ' if what else ''}a {type(module).__name__}, "
                         "not a torch.nn.Module")
    return module


# ------------------------------------------------------------------------------ weights

def _prefixes(keys: list[str], depth: int = 3) -> list[str]:
    """Every key prefix ending at a dot, up to ``depth`` components, most frequent first."""
    counts: dict[str, int] = {}
    for key in keys:
        parts = key.split(".")
        for i in range(1, min(depth, len(parts) - 1) + 1):
            prefix = ".".join(parts[:i]) + "."
            counts[prefix] = counts.get(prefix, 0) + 1
    return sorted(counts, key=lambda p: (-counts[p], p))


def fit_keys(tensors: dict[str, torch.Tensor], expected: list[str]) -> tuple[dict[str, torch.Tensor], str | None]:
    """``(the state dict with the model's names, a note or None)``: the tensors as they are when
    their names are the model's; else those under one prefix (Lightning's ``model.``, a wrapper's
    ``net.``) with it stripped, when that gives exactly the model's names (other entries, e.g. a
    loss's proxies, are left out and named in the note); else the tensors as they are (the strict
    load then says what is missing)."""
    want = set(expected)
    if set(tensors) == want:
        return tensors, None
    for prefix in _prefixes(list(tensors)):
        inner = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        if len(inner) >= len(want) and set(inner) == want:
            left = sorted(k for k in tensors if not k.startswith(prefix))
            rest = f"; left out {len(left)} other entr{'y' if len(left) == 1 else 'ies'} ({', '.join(left[:4])}" \
                   f"{' ...' if len(left) > 4 else ''})" if left else ""
            return inner, f"stripped the prefix {prefix!r} from the weights' names{rest}"
    for prefix in _prefixes(expected):  # the file holds an inner module of the model's
        if all(k.startswith(prefix) for k in expected) and {prefix + k for k in tensors} == want:
            return {prefix + k: v for k, v in tensors.items()}, f"added the prefix {prefix!r} to the weights' names"
    return tensors, None


def _mismatch(path: str, entry: str, tensors: dict[str, torch.Tensor],
              model: dict[str, torch.Tensor]) -> CheckpointError:
    """The error saying in one line why the names or shapes of the weights do not fit the model;
    shapes that differ point at the keyword arguments (``model_args``) that built it."""
    from .backbones import format_keys

    missing = sorted(model.keys() - tensors.keys())
    unexpected = sorted(tensors.keys() - model.keys())
    if missing or unexpected:
        hint = ""
        best = 0
        for prefix in _prefixes(unexpected):  # a prefix that would explain many names
            hits = sum(1 for k in unexpected if k.startswith(prefix) and k[len(prefix):] in missing)
            if hits > best:
                best, hint = hits, (f"; stripping {prefix!r} from the file's names would match {hits} of "
                                    f"{len(model)} (the attribute of a wrapper that held the model)")
        for prefix in _prefixes(missing):
            hits = sum(1 for k in missing if k.startswith(prefix) and k[len(prefix):] in unexpected)
            if hits > best:
                best, hint = hits, (f"; the model's names carry the prefix {prefix!r} that the file's lack "
                                    f"({hits} would match: the file holds the model's {prefix[:-1]})")
        return CheckpointError(f"{path} does not fit the model of {entry}: missing keys [{format_keys(missing, 4)}]; "
                               f"unexpected keys [{format_keys(unexpected, 4)}]{hint}")
    shapes = [f"{k} (file {tuple(tensors[k].shape)}, model {tuple(model[k].shape)})" for k in model
              if tuple(tensors[k].shape) != tuple(model[k].shape)]
    more = f" and {len(shapes) - 3} more" if len(shapes) > 3 else ""
    return CheckpointFieldError("model_args", literal(f"{path} does not fit the model of {entry}: shapes differ for "
                                                     f"{', '.join(shapes[:3])}{more}") + " (check {field})")


def load_weights(module: nn.Module, path: str | os.PathLike, entry: str = "the model") -> list[str]:
    """Read ``path`` as data, unwrap and fit its names (module docstring), refuse NaN or infinite
    weights, and load it into ``module`` with ``strict=True``; ``CheckpointError`` in one line.
    Returns the notes worth a warning (entries of the file the model has no place for)."""
    from .checkpoint import check_finite
    from .importing import read_sources

    sources = read_sources([path])  # read_weights_file, unwrapped; CheckpointError, FileNotFoundError
    for note in sources.notes:
        log.info("weights: %s", note)
    model_state = module.state_dict()
    state, note = fit_keys(sources.tensors, list(model_state))
    notes = [f"weights {Path(path).name}: {note}"] if note and "left out" in note else []
    if note and not notes:
        log.info("weights %s: %s", Path(path).name, note)
    if set(state) != set(model_state) or any(tuple(state[k].shape) != tuple(v.shape) for k, v in model_state.items()):
        raise _mismatch(str(path), entry, state, model_state)
    check_finite(state, str(path))
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{path} does not fit the model of {entry}: {' '.join(str(exc).split())[:400]}") from None
    for line in notes:
        log.warning("%s", line)
    return notes


# ------------------------------------------------------------------------------ the door

def code_sha256(entry: str, source_file: Path | None, args: Mapping[str, Any], weights: str | None,
                module: nn.Module, reference_weights: str | None = None) -> str:
    """What identifies a code-door model: the entry, its file's bytes, the arguments and the
    weights files' hashes (without weights: the module's initial state)."""
    from .checkpoint import file_sha256
    from .opening import model_fingerprint

    digest = hashlib.sha256(b"dmlviewer-code\0" + str(entry).encode() + b"\0")
    if source_file is not None and source_file.is_file():
        digest.update(source_file.read_bytes())
    digest.update(json.dumps(dict(args), sort_keys=True, default=str).encode())
    digest.update((file_sha256(weights) if weights else model_fingerprint(module)).encode())
    if reference_weights:  # a two-branch model's second file (issue 25)
        digest.update(b"\0reference\0" + file_sha256(reference_weights).encode())
    return digest.hexdigest()


def _float32(module: nn.Module, notes: list[str], what: str = "model") -> None:
    """Convert a module we built to float32 in place (before its weights are loaded, so that they
    keep the file's precision), saying so in ``notes``."""
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in itertools.chain(module.parameters(), module.buffers())
                     if t.is_floating_point() and t.dtype != torch.float32})
    if dtypes:
        module.float()
        notes.append(f"the {what}'s weights are {', '.join(dtypes)}: dmlviewer runs it in float32 (its embeddings "
                     "may differ from the original's at that precision)")
        log.warning("%s", notes[-1])


def _load_two_branch_weights(pair: nn.ModuleDict, weights: str | os.PathLike | None,
                             reference_weights: str | os.PathLike | None, entry: str) -> list[str]:
    """One file for both branches (keys ``query.``/``reference.``, under any wrapper's prefix) or
    one file per branch (``weights`` the query's, ``reference_weights`` the reference's)."""
    if weights and not reference_weights:
        try:
            return load_weights(pair, weights, entry)
        except CheckpointError as exc:
            raise CheckpointFieldError("reference_weights", literal(str(exc)[:700]) + (
                " (one weights file for a two-branch model holds both branches, its keys starting with query. and "
                "reference.; or give the reference branch's file as {field})")) from None
    notes = []
    for side, path in (("query", weights), ("reference", reference_weights)):
        if path:
            notes += load_weights(pair[side], path, f"{entry} ({side} branch)")
    return notes


def open_code_model(entry: str, args: Mapping[str, Any] | None = None, weights: str | os.PathLike | None = None,
                    device: str | torch.device = "cpu", feature_layer: str | None = None, output: Any = None,
                    size: Any = None, reference_weights: str | os.PathLike | None = None,
                    input_shapes: Any = None, mean: Any = None, std: Any = None) -> tuple[nn.Module, dict]:
    """``(model, info)``: the module ``entry(**args)`` builds, with ``weights`` loaded, through
    :func:`~.opening.open_model` (``feature_layer``, ``output``: a key or an index, ``size``).
    ``info["source"]`` is ``"code"``, ``info["path"]`` the weights file, ``info["entry"]`` and
    ``info["args"]`` what was called, ``info["notes"]`` the one-line notes (e.g. a half-precision
    module run in float32, a module put in eval mode).

    Two branches (issue 25): when ``entry`` returns a ``(query, reference)`` pair of modules the
    result is a :class:`~.two_branch.TwoBranchModel`; ``weights`` then holds both branches (keys
    ``query.``/``reference.``) or, with ``reference_weights``, the query branch's alone;
    ``input_shapes`` is the ``(query, reference)`` pair of input shapes (each a side or
    ``(height, width)``, e.g. ``((64, 256), 128)``) and overrides ``size``; ``feature_layer``
    applies to both branches, or is ``"QUERY_LAYER,REFERENCE_LAYER"``. ``mean``/``std``: the
    input's normalization per RGB channel (default ImageNet's), as ``import-model --mean/--std``
    give a checkpoint's; with ``size``, the preprocessing the model is run with (both branches)."""
    from .opening import open_model

    if isinstance(output, bool) or (output is not None and not isinstance(output, (str, int))):
        raise ModelError(f"output must be a key (text) or an index (integer), got {output!r}"[:200])
    args = dict(args or {})
    transform = None
    if mean is not None or std is not None:
        from dmlviewer.core.data.transforms import IMAGENET_MEAN, IMAGENET_STD

        transform = {"mean": tuple(float(v) for v in (mean or IMAGENET_MEAN)),
                     "std": tuple(float(v) for v in (std or IMAGENET_STD))}
    module, source_file = build_module(entry, args)
    two = isinstance(module, tuple)
    if not two and (reference_weights or input_shapes):
        given = "reference_weights" if reference_weights else "input_shapes"
        raise ModelFieldError(given, f"{{field}} is for a two-branch model: {literal(entry)} returned one module "
                                     "(return a (query, reference) pair of modules for a query and a reference "
                                     "encoder)")
    notes: list[str] = []
    if two:
        pair = nn.ModuleDict({"query": module[0], "reference": module[1]})
        for side in ("query", "reference"):
            _float32(pair[side], notes, f"{side} branch")
        if weights or reference_weights:
            notes += _load_two_branch_weights(pair, weights, reference_weights, entry)
        fingerprint_of = pair
    else:
        _float32(module, notes)
        if weights:
            notes += load_weights(module, weights, entry)
        fingerprint_of = module
    sha = code_sha256(entry, source_file, args, str(weights) if weights else None, fingerprint_of,
                      str(reference_weights) if reference_weights else None)
    if transform is not None:  # another normalization gives other embeddings: never the same model's features
        sha = hashlib.sha256(f"{sha}|{json.dumps(transform, sort_keys=True)}".encode()).hexdigest()
    if two:
        for m in module:
            m.eval()
        if input_shapes is not None:
            size = _shapes_pair(input_shapes)
        if isinstance(feature_layer, str) and "," in feature_layer:  # "QUERY_LAYER,REFERENCE_LAYER"
            feature_layer = tuple(part.strip() or None for part in feature_layer.split(",", 1))
        model, info = open_model(tuple(module), device, feature_layer=feature_layer, output=output, size=size,
                                 transform=transform)
    else:
        module.eval()  # a freshly built module is in training mode as every nn.Module is: nothing to say
        model, info = open_model(module, device, feature_layer=feature_layer, output=output, size=size,
                                 transform=transform)
    notes = notes + list(info.get("notes", []))
    info = {**info, "source": "code", "path": str(weights) if weights else None, "entry": str(entry), "args": args,
            "sha256": sha, "notes": notes}
    if two:
        info["reference_weights"] = str(reference_weights) if reference_weights else None
    log.info("opened %s%s: %s", entry, f" with {Path(weights).name}" if weights else " (no weights: as built)",
             info.get("rule"))
    return model, info


def _shapes_pair(value: Any) -> tuple:
    """``((h, w), (h, w))`` from a ``(query, reference)`` pair of sides or ``[h, w]`` lists
    (``ModelError`` naming the value otherwise)."""
    from dmlviewer.core.data.transforms import input_shape

    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ModelError(f"input_shapes must be a (query, reference) pair of shapes, got {value!r}"[:200])
    try:
        return tuple(input_shape(tuple(v) if isinstance(v, list) else v) for v in value)
    except ValueError as exc:
        raise ModelError(f"input_shapes: {exc}") from None
