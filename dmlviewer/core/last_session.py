"""What the app remembers between runs and reads back at start: the **last session**
(:class:`LastSession`, saved to the settings as ``session/last`` and reopened when the app
starts), the **recent models** (:func:`recent_sources`, :func:`add_recent_source`) and the
**reading of the files a session names** on the app's loading thread (:func:`open_source`,
:func:`read_session_files`). The live, evented state itself is
:class:`~dmlviewer.core.session.Session`.

- **Last session**: :meth:`Session.to_dict <dmlviewer.core.session.Session.to_dict>` gives what
  can be reopened in another process (dataset path and format, each persistent slot's
  ``ModelSource.to_dict()``, the pair as dataset-relative paths, model A's feature file and
  model B's (``compare_features``), the display options); :meth:`LastSession.from_dict` reads it
  back, checking every field, since settings text is untrusted (:class:`SessionError`, one
  line). Sessions saved before a key existed still read (a missing key is None).
- **Recent models**: :func:`add_recent_source` and :func:`recent_sources` keep a list of model
  source dicts, newest first, without duplicates.
- **Reading what a session names**: :func:`read_session_files` reads the dataset, the models
  and the remembered feature files, each file only when it still exists and fits (the dataset's
  identity; model B's file also model B's checksum); what does not is skipped with a log line.

:mod:`dmlviewer.core.session` reads and writes through this module (``Session.to_dict``,
``Session.from_dict``); this module never imports that one. No Qt here, and no torch at import
time (``ModelSource``, whose package imports torch, is imported where a source is read).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from dmlviewer.core.data.format_names import FORMATS as DATASET_FORMATS
from dmlviewer.core.data.identity import dataset_identity, features_fit_dataset
from dmlviewer.core.slot_features import SLOTS, features_mismatch

if TYPE_CHECKING:
    from dmlviewer.core.models.source import ModelSource

log = logging.getLogger(__name__)

#: Entries kept in the recent-models list.
RECENT_MODELS = 10
#: The longest path text accepted from settings.
_MAX_TEXT = 4096


class SessionError(ValueError):
    """A session's value that cannot be used as given: a field of a remembered session (settings
    text is untrusted), or a pair index or pinned point given to ``Session`` (one line saying
    which field)."""


#: The text fields of a remembered session (a key saved before it existed reads as None).
_PATH_KEYS = ("dataset", "format", "query", "reference", "features", "compare_features")


@dataclass
class LastSession:
    """A remembered session, not yet opened: paths and model sources. ``features``: model A's
    feature file; ``compare_features``: model B's (the compare slot's, issue 41), reopened only
    beside model B."""

    dataset: str | None = None
    format: str | None = None
    models: dict = field(default_factory=dict)  # slot -> ModelSource (dicts in to_dict)
    query: str | None = None
    reference: str | None = None
    features: str | None = None
    display: dict = field(default_factory=dict)  # DisplayOptions.to_dict(); read with DisplayOptions.update
    compare_features: str | None = None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"version": 1}
        for key in ("dataset", "format", "query", "reference", "features", "compare_features", "display"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        models = {name: (source if isinstance(source, dict) else source.to_dict())
                  for name, source in self.models.items()}
        if models:
            out["models"] = models
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "LastSession":
        from dmlviewer.core.models.errors import ModelError
        from dmlviewer.core.models.source import ModelSource

        if isinstance(data, (str, bytes)):
            if len(data) > 16 * _MAX_TEXT:
                raise SessionError("the remembered session is too long to be one")
            try:
                data = json.loads(data)
            except ValueError:
                raise SessionError("the remembered session is not JSON") from None
        if not isinstance(data, dict):
            raise SessionError(f"the remembered session is a {type(data).__name__}, not an object")
        out: dict[str, Any] = {}
        for key in _PATH_KEYS:
            value = data.get(key)
            if value in (None, ""):
                continue
            if not isinstance(value, str) or len(value) > _MAX_TEXT or "\x00" in value:
                raise SessionError(f"the remembered session has a bad {key!r}")
            out[key] = value
        if out.get("format") and out["format"] not in DATASET_FORMATS:
            raise SessionError(f"the remembered session has an unknown dataset format {out['format']!r:.40}")
        out["display"] = _display_values(data.get("display"))
        models = data.get("models") or {}
        if not isinstance(models, dict):
            raise SessionError("the remembered session's models are not an object")
        out["models"] = {}
        for name, value in models.items():
            if name not in SLOTS:
                raise SessionError(f"the remembered session has an unknown model slot {str(name)[:40]!r}")
            try:
                out["models"][name] = ModelSource.from_dict(value)
            except ModelError as exc:
                raise SessionError(f"the remembered session's {name} model: {exc}") from None
        return cls(**out)

    @staticmethod
    def display_from_settings(values: dict) -> dict:
        """Only the display options of the last session's settings (``session/last``), read
        without the model sources (so without importing torch: the window reads them while it
        is built); values are checked where they are used (``DisplayOptions.update``)."""
        text = values.get("last")
        if not text or not isinstance(text, (str, bytes)) or len(text) > 16 * _MAX_TEXT:
            return {}
        try:
            data = json.loads(text)
        except ValueError:
            return {}
        return _display_values(data.get("display")) if isinstance(data, dict) else {}

    @classmethod
    def from_settings(cls, values: dict) -> "LastSession":
        """From the app's settings: ``session/last`` (this module's JSON) when present, else
        the keys older versions wrote (``dataset``, ``format``, ``checkpoint`` as a plain path
        or ``imagenet:NAME``, ``query``, ``reference``, ``features``)."""
        if values.get("last"):
            return cls.from_dict(values["last"])
        old = {key: values.get(key) or None for key in ("dataset", "format", "query", "reference", "features")}
        if values.get("checkpoint"):
            old["models"] = {"primary": values["checkpoint"]}
        return cls.from_dict(old)


def _display_values(display: Any) -> dict:
    """Remembered display options as plain values (untrusted: each is checked by
    ``DisplayOptions.update`` where it is used); anything but an object is ignored."""
    if isinstance(display, dict) and len(display) <= 64:
        return {str(k)[:64]: v for k, v in display.items() if isinstance(v, (str, int, float, bool)) or v is None}
    if display not in (None, ""):
        log.warning("the remembered display options are not an object: ignored")
    return {}


# -- recent models ----------------------------------------------------------------------------

def recent_sources(items: Iterable[Any]) -> list["ModelSource"]:
    """The model sources of a remembered recent list (dicts, their JSON text, or plain paths
    written by older versions), newest first; entries that cannot be read are skipped (logged)."""
    from dmlviewer.core.models.errors import ModelError
    from dmlviewer.core.models.source import ModelSource

    out: list[ModelSource] = []
    seen: set[str] = set()
    for item in items or []:
        try:
            source = _normalized(ModelSource.from_dict(item))
        except (ModelError, TypeError, ValueError) as exc:
            log.warning("skipping a remembered model: %s", exc)
            continue
        key = _recent_key(source)
        if key not in seen:
            seen.add(key)
            out.append(source)
    return out


def add_recent_source(items: Iterable[Any], source: "ModelSource", limit: int = RECENT_MODELS) -> list[dict]:
    """``source`` first, then the other remembered sources (no duplicates, at most ``limit``),
    as dicts; a live module (``kind="python"``) leaves the list as it was."""
    known = recent_sources(items)
    if source.persistent:
        source = _normalized(source)
        known = [source] + [s for s in known if _recent_key(s) != _recent_key(source)]
    return [s.to_dict() for s in known[:limit]]


def _recent_key(source: "ModelSource") -> str:
    """What makes two recent models one entry: the source without the user's label."""
    from dataclasses import replace

    return replace(source, label=None).to_json() if source.kind != "python" else source.to_json()


def _normalized(source: "ModelSource") -> "ModelSource":
    """The same source with its files as absolute paths (so one file is one entry)."""
    from dataclasses import replace

    def absolute(path: str | None) -> str | None:
        if not path:
            return path
        try:
            return str(Path(path).expanduser().resolve())
        except OSError:
            return path

    if source.kind == "checkpoint":
        return replace(source, path=absolute(source.path))
    if source.kind == "code":
        entry = source.entry or ""
        file, _, name = entry.rpartition(":")
        if file.endswith(".py"):
            entry = f"{absolute(file)}:{name}"
        return replace(source, entry=entry, weights=absolute(source.weights))
    return source


# -- reading what a session names (on a loading thread) ----------------------------------------

def open_source(source: "ModelSource", device: str = "cpu") -> tuple[Any, dict]:
    """``(model, info)`` of ``source`` on ``device`` (a device saved on another machine falls
    back to the CPU); a file the source needs and that is gone is named in one line."""
    from dmlviewer.core.models import ModelError, resolve_device

    missing = source.missing()
    if missing:
        raise ModelError(missing)  # "checkpoint not found: PATH"
    try:
        device = str(resolve_device(device))
    except ValueError:
        device = "cpu"
    return source.open(device)


def read_session_files(dataset: str | None = None, fmt: str | None = None, model: Any = None,
                       features: str | None = None, last_session: dict | None = None,
                       demo: Callable[[], tuple] | None = None, device: str = "cpu",
                       step: Callable[[str], None] = lambda text: None) -> dict:
    """Read the files of a session, for the app's loading thread (torch is imported here).

    ``model``: a ``ModelSource``, its dict, or a checkpoint path / ``imagenet:NAME``.
    ``last_session``: the raw settings of the last session (:meth:`LastSession.from_settings`),
    used when its dataset still exists, else ``demo`` (a function giving ``(dataset folder,
    checkpoint or None)``) is opened instead. ``step(text)`` reports each step.

    Returns ``{"format", "errors": [(title, exception, source or None)], "model": ((model, info),
    source), "compare": ((model, info), source), "dataset": (dataset, path), "features":
    (features, path), "compare_features": (features, path), "notice": text}`` with the keys of
    what was read (``compare``: the last session's model B, only when its model A is the model
    opened; ``compare_features``: model B's remembered feature file, only beside model B). A
    remembered feature file is read only when it still exists and fits the dataset read (model
    B's: and model B's checksum); one that does not is left out with a log line. Nothing raises
    (every failure is an entry of ``errors``, whose title says what could not be opened)."""
    from dmlviewer.core.models.source import ModelSource

    result: dict = {"errors": [], "format": fmt}
    remembered_features = None  # the last session's feature file: opened only if it fits the dataset
    remembered_b = None  # model B's: opened only beside model B, if it fits the dataset and model B
    sources: list[tuple[str, ModelSource]] = []  # (title of the error, source); the last one is opened
    compare_source = None  # the last session's model B, reopened beside its own model A only
    if last_session is not None:
        try:
            record = LastSession.from_settings(last_session)
        except ValueError as exc:
            result["errors"].append(("Cannot restore the last session", exc, None))
            record = None
        if record is not None and record.dataset and Path(record.dataset).exists():
            dataset, demo, result["format"] = record.dataset, None, record.format
            if not features:
                features = remembered_features = _existing(record.features, "model A")
            if record.models.get("primary") is not None:
                sources.append(("Cannot reopen the last session's model", record.models["primary"]))
                compare_source = record.models.get("compare")
                remembered_b = _existing(record.compare_features, "model B") if compare_source else None
        elif record is not None and record.dataset:
            result["notice"] = f"The last session's dataset {record.dataset} is gone: opened the demo."
    if model is not None:
        try:
            if isinstance(model, ModelSource):
                source = model
            elif isinstance(model, dict):
                source = ModelSource.from_dict(model)
            else:
                source = ModelSource.from_text(str(model))
            sources.append((f"Cannot open {_KIND_WORDS.get(source.kind, 'model')}", source))
        except ValueError as exc:
            result["errors"].append(("Cannot open model", exc, None))
    if demo is not None:
        try:
            step("Preparing the demo dataset (generated on the first start, a few seconds)…")
            root, shipped = demo()
            dataset = str(root)
            if not sources and shipped:
                sources.append(("Cannot open checkpoint", ModelSource.from_text(str(shipped))))
            if shipped is None:
                result["notice"] = " ".join(filter(None, (result.get("notice"), "No demo checkpoint in this build "
                                                          "(resources/demo_checkpoint.pt): open a checkpoint.")))
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            result["errors"].append(("Cannot prepare the demo", exc, None))
    for title, source in sources[-1:]:
        step(f"Loading the model {source.display()}…")
        try:
            result["model"] = (open_source(source, device), source)
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            result["errors"].append((title, exc, source))
    if compare_source is not None and "model" in result and sources[-1][1] == record.models.get("primary"):
        step(f"Loading model B {compare_source.display()}…")
        try:
            result["compare"] = (open_source(compare_source, device), compare_source)
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            result["errors"].append(("Cannot reopen the last session's model B", exc, compare_source))
    for key, title, path in (("dataset", "Cannot open dataset", dataset),
                             ("features", "Cannot open features", features),
                             ("compare_features", "Cannot open model B's features", remembered_b)):
        if not path or (key == "compare_features" and ("compare" not in result or "dataset" not in result)):
            continue
        step(f"Loading {_FILE_WORDS[key]} {Path(path).name}…")
        path = str(Path(path).expanduser())
        try:
            if key == "dataset":
                from dmlviewer.core.data import open_dataset

                result[key] = (open_dataset(path, format=result["format"]), path)
            else:  # lazily, as File > Open Features opens it (the paths, not the embeddings)
                from dmlviewer.core.evaluate import open_features

                result[key] = (open_features(path), path)
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            result["errors"].append((title, exc, None))
    if "dataset" in result:
        from dmlviewer.core.data.identity import listing_fingerprint

        listing_fingerprint(result["dataset"][0])  # the dataset's identity: here, not on the GUI thread
    for key, remembered, model_b in (("features", remembered_features, None),
                                     ("compare_features", remembered_b, result.get("compare"))):
        if remembered and key in result and "dataset" in result:
            problem = _remembered_problem(result[key][0], result["dataset"], model_b)
            if problem:
                log.info("not reopening %s: %s", remembered, problem)
                del result[key]
    return result


#: How :func:`read_session_files` names the files it reads in its steps.
_FILE_WORDS = {"dataset": "the dataset", "features": "the features", "compare_features": "model B's features"}


def _existing(path: str | None, whose: str) -> str | None:
    """``path``, a remembered feature file of ``whose`` model, while it exists; None (logged) when gone."""
    if not path:
        return None
    if Path(path).expanduser().exists():
        return path
    log.info("not reopening %s's feature file %s: it is gone", whose, path)
    return None


def _remembered_problem(features: Any, dataset: tuple, model_b: tuple | None = None) -> str | None:
    """Why a remembered feature file must not be reopened with ``dataset`` (``(dataset, path)``
    as read) and, for model B's (``model_b``: ``((model, info), source)`` as read), with model B
    (the session's rule, :func:`~dmlviewer.core.slot_features.features_mismatch`); None: it fits."""
    opened, path = dataset
    attrs = getattr(features, "attrs", None) or {}
    fits = features_fit_dataset(attrs, lambda: features.paths, opened, dataset_identity(opened, path))
    if model_b is None:
        return None if fits else f"computed from another dataset than {path}"
    (_, info), _source = model_b
    found = features_mismatch(features, fits, True, info.get("sha256") or None, "compare")
    return None if found is None else found[1]


#: How each kind of model source is named in error titles ("Cannot open checkpoint").
_KIND_WORDS = {"checkpoint": "checkpoint", "pretrained": "pretrained backbone", "code": "model from code",
               "python": "model"}


def kind_words(kind: str) -> str:
    """A kind of model source in words, for error titles."""
    return _KIND_WORDS.get(kind, "model")
