"""The app's state as one headless, evented object that the widgets bind to (issues 23 and 30),
in the manner of napari's ``ViewerModel``: the dataset with its identity, the models in named
slots, the pair, the feature file, the jobs with their stamps, the device, the pinned point and
the display options live here, and every change is announced once on
:attr:`Session.events` (a psygnal ``SignalGroup``, the event library napari and magicgui use;
the display options announce theirs on ``session.display.events``).

- **Dataset identity**: the resolved root plus a fingerprint of the listing
  (:mod:`dmlviewer.core.data.identity`); two folders with the same file names are two datasets.
- **Slots** hold a model with its ``info`` (from :func:`~dmlviewer.core.models.open_model`) and
  the :class:`~dmlviewer.core.models.source.ModelSource` it was opened from: ``"primary"`` (the
  model on screen) and ``"compare"`` (model B of a comparison, issue 24).
- **Features**: each slot has its feature file (:mod:`dmlviewer.core.slot_features`; the
  primary slot's is ``features``, ``features_path``), bound to the dataset identity
  (:meth:`Session.features_fit`: the file's ``dataset_fingerprint``) and to its slot's model
  checksum (:meth:`Session.features_problem`); another dataset drops features that do not fit it.
- **Freshness, one rule**: a background result is shown only when :meth:`Session.accepts` the
  :class:`Stamp` taken when its work started: the dataset identity and the model of its slot
  (and, for work that reads them, the feature file, or the pair on screen) are still what is
  open. No widget keeps a counter of its own (issue 39 item 5).
- **Jobs**: the background jobs working for what is open (:meth:`Session.add_job`), each with
  its kind and stamp, so that a widget can say "computing" while one runs.
- **Last session**: :meth:`Session.to_dict` gives what can be reopened in another process
  (dataset path and format, each persistent slot's ``ModelSource.to_dict()``, the pair as
  dataset-relative paths, the feature file, the display options); :meth:`Session.from_dict`
  reads it back as a :class:`LastSession`, checking every field, since settings text is
  untrusted.
- **Recent models**: :func:`add_recent_source` and :func:`recent_sources` keep a list of model
  source dicts, newest first, without duplicates.

No Qt here (a test enforces it), and no torch at import time: the app imports this module on its
GUI thread before torch is loaded; ``ModelSource`` (whose package imports torch) is imported
where a source is read.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from psygnal import Signal, SignalGroup

from dmlviewer.core.data.identity import DatasetIdentity, dataset_identity, features_fit_dataset
from dmlviewer.core.display import DisplayOptions

if TYPE_CHECKING:
    from dmlviewer.core.models.source import ModelSource

log = logging.getLogger(__name__)

#: The model slots: the model on screen, and the second model of a comparison (issue 24).
SLOTS = ("primary", "compare")
#: Dataset formats a remembered session may name (``core.data`` detects them from the folder).
from dmlviewer.core.data.format_names import FORMATS as DATASET_FORMATS  # noqa: E402
#: Entries kept in the recent-models list.
RECENT_MODELS = 10
#: The longest path text accepted from settings.
_MAX_TEXT = 4096


#: A short heading for each cause of :meth:`Session.features_mismatch`, agreeing with its sentence.
from dmlviewer.core.slot_features import FEATURES_MISMATCH_HEADINGS, SlotFeatures, features_mismatch  # noqa: E402,F401


class SessionError(ValueError):
    """A remembered session that cannot be used as given (one line saying which field)."""


#: The pinned point's sides by name (``set_pinned`` takes either form).
PIN_SIDES = {"query": 0, "reference": 1}


def pinned_point(point: Any) -> tuple[int, float, float]:
    """``point`` (``(side, x, y)``, side 0/1 or "query"/"reference") as the session keeps it,
    ``(0 or 1, x, y)``, or :class:`SessionError` naming what is wrong."""
    import math

    try:
        side, x, y = point
    except (TypeError, ValueError):
        raise SessionError(f"pinned: {point!r} is not (side, x, y)") from None
    if isinstance(side, str) and side in PIN_SIDES:
        side = PIN_SIDES[side]
    elif isinstance(side, bool) or side not in (0, 1):
        raise SessionError(f"pinned: side {side!r} is not 0 or 'query', 1 or 'reference'")
    try:
        x, y = float(x), float(y)
    except (TypeError, ValueError):
        raise SessionError(f"pinned: x, y {point[1]!r}, {point[2]!r} are not numbers") from None
    if not (math.isfinite(x) and math.isfinite(y)):
        raise SessionError(f"pinned: x, y {x}, {y} are not finite")
    return int(side), x, y


# -- events -----------------------------------------------------------------------------------

class SessionEvents(SignalGroup):
    """The session's events, each emitted once per change, after the state has changed:
    ``dataset()``, ``model(slot)``, ``label(slot)`` (a model's name of the user's changed, the
    model did not), ``pair()``, ``features(slot)``, ``device()``, ``jobs()``, ``pinned()``. The
    display options have their own (``session.display.events``)."""

    dataset = Signal()
    model = Signal(str)
    label = Signal(str)
    pair = Signal()
    features = Signal(str)
    device = Signal()
    jobs = Signal()
    pinned = Signal()


# -- state ------------------------------------------------------------------------------------

@dataclass
class ModelSlot:
    """A model open in a slot: the model, ``info`` from ``open_model`` and its source;
    ``serial`` tells this opening from any other (a model without a checksum, e.g. a live
    module, is the same model only while it stays in its slot)."""

    model: Any
    info: dict
    source: "ModelSource | None" = None
    serial: int = 0

    @property
    def sha256(self) -> str | None:
        return self.info.get("sha256") or None


@dataclass(frozen=True)
class Stamp:
    """What a job's result belongs to: the dataset (its identity), the model (weights' sha256,
    or for a model without one its slot's ``serial``) of ``slot`` and, for work that reads
    them, the feature file and the pair on screen (``pair``: the session's
    :attr:`~Session.pair_generation`); ``generation`` is the session's count of dataset and
    model changes when the stamp was taken."""

    generation: int
    dataset: DatasetIdentity | None
    model_sha: str | None
    slot: str = "primary"
    features: str | None = None
    model_serial: int | None = None
    pair: int | None = None


@dataclass(frozen=True)
class JobEntry:
    """A background job working for what is open: its kind (``"extract"``, ``"grad"``,
    ``"open-compare"`` …), its name, the stamp taken when it was queued and the runner's
    handle of it (to cancel it)."""

    kind: str
    name: str
    stamp: Stamp
    handle: Any = None


class Session:
    """The app's state (see the module docstring). Change it through the ``set_*`` methods (and
    ``display``'s fields), so that every observer hears of it."""

    def __init__(self, device: str = "cpu") -> None:
        self.events = SessionEvents()
        self.display = DisplayOptions()
        self.dataset: Any = None
        self.dataset_path: str | None = None
        self.dataset_format: str | None = None
        self.dataset_identity: DatasetIdentity | None = None
        self.slots: dict[str, ModelSlot] = {}
        self.query_index: int | None = None
        self.reference_index: int | None = None
        #: model B's own reference (issue 41: A's and B's top-1 of one query), None: row B shows
        #: ``reference_index`` as row A does
        self.reference_b: int | None = None
        #: each slot's feature file (``features``, ``features_path``, ``features_chosen``: the primary's)
        self.slot_features: dict[str, SlotFeatures] = {name: SlotFeatures() for name in SLOTS}
        self.device: str = device
        self.jobs: dict[Any, JobEntry] = {}
        self.pinned: tuple | None = None  # (0 query or 1 reference, x, y) of the pinned point, None: none
        self.generation = 0
        #: counts changes of the pair on screen (another pair, dataset or input size, or
        #: :meth:`renew_pair`): what a pair's explanation is stamped with
        self.pair_generation = 0
        self._serials = 0  # the last ModelSlot.serial given
        self._fit_cache: dict[str, tuple] = {}  # slot -> ((features id, dataset id, identity), fits, features)
        self.window: Any = None  # the window showing this session (``dmlviewer.view`` sets it)

    def close(self) -> None:
        """Close the window showing this session (``dmlviewer.view``'s), if any."""
        if self.window is not None:
            self.window.close()

    # -- the primary slot, as most callers see it
    def slot(self, name: str = "primary") -> ModelSlot | None:
        return self.slots.get(name)

    @property
    def model(self) -> Any:
        slot = self.slots.get("primary")
        return None if slot is None else slot.model

    @property
    def model_info(self) -> dict | None:
        slot = self.slots.get("primary")
        return None if slot is None else slot.info

    @property
    def model_source(self) -> "ModelSource | None":
        slot = self.slots.get("primary")
        return None if slot is None else slot.source

    @property
    def model_sha(self) -> str | None:
        slot = self.slots.get("primary")
        return None if slot is None else slot.sha256

    @property
    def features(self) -> Any:
        return self.slot_features["primary"].features

    @property
    def features_path(self) -> str | None:
        return self.slot_features["primary"].path

    @property
    def features_chosen(self) -> bool:
        """The primary slot's feature file was opened by the user (not computed here)."""
        return self.slot_features["primary"].chosen

    # -- changes
    def set_dataset(self, dataset: Any, path: str | None, fmt: str | None = None,
                    identity: DatasetIdentity | None = None) -> None:
        """Open ``dataset`` (read from ``path``; ``fmt`` the format asked for, None: detected;
        ``identity``: computed where it was opened, else here). The pair is cleared (its indices
        belonged to the previous dataset), and so are features that do not fit it."""
        if dataset is not None and identity is None:
            identity = dataset_identity(dataset, path)
        self.dataset, self.dataset_path, self.dataset_format = dataset, path, fmt or None
        self.dataset_identity = identity if dataset is not None else None
        self.generation += 1
        self.pair_generation += 1
        had_pair = self.query_index is not None or self.reference_index is not None
        self.query_index = self.reference_index = self.reference_b = None
        stale_features = [name for name, held in self.slot_features.items() if held.features is not None
                          and dataset is not None and not self.features_fit(slot=name)]
        for name in stale_features:
            log.info("closing %s: computed from another dataset", self.slot_features[name].path)
            self.slot_features[name].clear()
        had_pin, self.pinned = self.pinned is not None, None
        self.events.dataset.emit()
        if had_pair:
            self.events.pair.emit()
        for name in stale_features:
            self.events.features.emit(name)
        if had_pin:
            self.events.pinned.emit()

    def set_model(self, model: Any, info: dict | None = None, source: "ModelSource | None" = None,
                  slot: str = "primary") -> None:
        """Put ``model`` into ``slot`` (None empties the slot; emptying the compare slot drops
        model B's own reference, with a pair event)."""
        if slot not in SLOTS:
            raise ValueError(f"unknown model slot {slot!r}: one of {', '.join(SLOTS)}")
        if model is None:
            if self.slots.pop(slot, None) is None:
                return
        else:
            self._serials += 1
            self.slots[slot] = ModelSlot(model, dict(info or {}), source, self._serials)
        self.generation += 1
        self.events.model.emit(slot)
        if model is None and slot == "compare" and self.reference_b is not None:
            self.set_pair(self.query_index, self.reference_index)

    def set_label(self, slot: str, label: str | None) -> None:
        """Name the model of ``slot`` (None: its own name again). The label is part of its
        source, so views, tables, exports and the last session keep it; the model is unchanged
        (``events.label``, not ``events.model``)."""
        entry = self.slots.get(slot)
        if entry is None or entry.source is None:
            raise ValueError(f"{slot}: no model with a source is open in this slot")
        if entry.source.label != label:
            entry.source = replace(entry.source, label=label)
            self.events.label.emit(slot)

    def set_pair(self, query_index: int | None, reference_index: int | None,
                 reference_b: int | None = None) -> None:
        """Show the pair of dataset images ``query_index`` and ``reference_index`` (None: not
        chosen); ``reference_b``: model B's row shows the query against this image instead (A's
        and B's top-1 side by side, issue 41; None: both rows on ``reference_index``). An index
        that is not one of the open dataset's raises :class:`SessionError` naming its field and
        changes nothing."""
        query_index = self._image_index("query_index", query_index)
        reference_index = self._image_index("reference_index", reference_index)
        reference_b = self._image_index("reference_b", reference_b)
        if reference_b == reference_index:
            reference_b = None  # one reference for both rows
        if (query_index, reference_index, reference_b) == (self.query_index, self.reference_index,
                                                           self.reference_b):
            return
        self.query_index, self.reference_index, self.reference_b = query_index, reference_index, reference_b
        self.pair_generation += 1
        self.events.pair.emit()
        if self.pinned is not None:
            self.set_pinned(None)

    def row_reference(self, slot: str = "primary") -> int | None:
        """The reference image of ``slot``'s row: model B's own (:attr:`reference_b`) when set,
        else the pair's."""
        if slot == "compare" and self.reference_b is not None:
            return self.reference_b
        return self.reference_index

    def _image_index(self, name: str, index: Any) -> int | None:
        """``index`` as an image index of the open dataset, or :class:`SessionError` naming ``name``."""
        if index is None:
            return None
        try:
            if isinstance(index, (bool, float, str)):
                raise TypeError
            number = int(index)
        except (TypeError, ValueError):
            raise SessionError(f"{name}: {index!r} is not an image index") from None
        listing = getattr(self.dataset, "paths", None)  # the dataset's images, as its identity reads them
        size = None if listing is None else len(listing)
        if number < 0 or (size is not None and number >= size):
            raise SessionError(f"{name}: {number} is not an image of the open dataset "
                               f"({'no dataset' if size is None else f'0 to {size - 1}'})")
        return number

    def renew_pair(self) -> None:
        """The pair on screen is shown anew (other photographs than the dataset's pair, or the
        same pair explained at another input size): explanations stamped before are stale."""
        self.pair_generation += 1

    def set_features(self, features: Any, path: str | None, chosen: bool = False, slot: str = "primary") -> None:
        """Retrieve from ``features`` (read from ``path``) with ``slot``'s model; ``chosen``:
        opened by the user (a file that does not fit is then flagged, not replaced without asking)."""
        if slot not in SLOTS:
            raise ValueError(f"unknown model slot {slot!r}: one of {', '.join(SLOTS)}")
        held = self.slot_features[slot]
        if features is held.features and path == held.path and bool(chosen) == held.chosen:
            return
        held.features, held.path, held.chosen = features, path, bool(chosen)
        self.events.features.emit(slot)

    def set_device(self, device: str) -> None:
        if device == self.device:
            return
        self.device = device
        self.events.device.emit()

    def set_pinned(self, point: tuple | None) -> None:
        """Pin ``point`` of the pair: ``(side, x, y)`` with ``side`` the image the point is on,
        0 or ``"query"`` for the query, 1 or ``"reference"`` for the reference, and ``x, y`` in
        that image's pixels (from its top left corner); None releases the pin. The point is kept
        as ``(0 or 1, float x, float y)``; a value that is not such a point raises
        :class:`SessionError` naming the field and changes nothing."""
        point = None if point is None else pinned_point(point)
        if point == self.pinned:
            return
        self.pinned = point
        self.events.pinned.emit()

    # -- features: bound to the dataset identity and to the model's checksum
    def features_fit(self, features: Any = None, slot: str = "primary") -> bool:
        """Were ``features`` (default: ``slot``'s) computed from the open dataset? True
        without a dataset (nothing to check against yet); see
        :func:`~dmlviewer.core.data.identity.features_fit_dataset`."""
        features = self.slot_features[slot].features if features is None else features
        if features is None or self.dataset is None or self.dataset_identity is None:
            return True
        key = (id(features), id(self.dataset), self.dataset_identity)
        cached = self._fit_cache.get(slot)
        if cached is not None and cached[0] == key:  # a file without a fingerprint reads its paths
            return cached[1]
        attrs = getattr(features, "attrs", None) or {}
        fits = features_fit_dataset(attrs, lambda: features.paths, self.dataset, self.dataset_identity)
        self._fit_cache[slot] = (key, fits, features)  # the features kept alive while their id is the key
        return fits

    def features_problem(self, features: Any = None, slot: str = "primary") -> str | None:
        """Why ``features`` (default: ``slot``'s) must not be shown with the open dataset and
        ``slot``'s model, in one sentence (None: they may)."""
        found = self.features_mismatch(features, slot)
        return None if found is None else found[1]

    def features_mismatch(self, features: Any = None, slot: str = "primary") -> tuple[str, str] | None:
        """Why ``features`` (default: ``slot``'s) must not be shown: (its cause, a key of
        :data:`FEATURES_MISMATCH_HEADINGS`, and the sentence of :meth:`features_problem`, which
        names model B for its slot); None when they may be shown."""
        features = self.slot_features[slot].features if features is None else features
        if features is None:
            return None
        held = self.slots.get(slot)
        return features_mismatch(features, self.features_fit(features, slot), held is not None,
                                 None if held is None else held.sha256, slot)

    def features_ready(self, slot: str = "primary") -> bool:
        """Does ``slot`` hold a model and a feature file that may be shown with it?"""
        return (self.slots.get(slot) is not None and self.slot_features[slot].features is not None
                and self.features_mismatch(slot=slot) is None)

    # -- jobs and freshness
    def stamp(self, slot: str = "primary", features: bool = False, pair: bool = False) -> Stamp:
        """What a job started now works for (keep it with the job; see :meth:`accepts`);
        ``features``: the work reads the slot's feature file too; ``pair``: it explains the pair
        on screen."""
        model = self.slots.get(slot)
        return Stamp(self.generation, self.dataset_identity, None if model is None else model.sha256, slot,
                     self.slot_features[slot].key() if features else None, None if model is None else model.serial,
                     self.pair_generation if pair else None)

    def accepts(self, stamp: Stamp | None) -> bool:
        """May a result made under ``stamp`` be shown? True while the same dataset (identity) and
        the same model weights of its slot are open (and the same feature file, for a stamp
        taken with ``features``, and the same pair, for one taken with ``pair``); False for the
        results of what is no longer open. The one freshness rule of the app."""
        if stamp is None:
            return False
        if stamp.features is not None and stamp.features != self.slot_features[stamp.slot].key():
            return False
        if stamp.pair is not None and stamp.pair != self.pair_generation:
            return False
        if stamp.generation == self.generation:
            return True
        now = self.stamp(stamp.slot)
        if stamp.dataset != now.dataset:
            return False
        if stamp.model_sha is not None:
            return stamp.model_sha == now.model_sha
        return stamp.model_serial is not None and stamp.model_serial == now.model_serial

    def add_job(self, job_id: Any, kind: str, name: str = "", stamp: Stamp | None = None,
                handle: Any = None) -> JobEntry:
        """Remember a job queued for what is open now (``stamp``: default, taken now)."""
        entry = JobEntry(kind, name, stamp or self.stamp(), handle)
        self.jobs[job_id] = entry
        self.events.jobs.emit()
        return entry

    def end_job(self, job_id: Any) -> JobEntry | None:
        """Forget a job that ended (finished, failed or cancelled); its entry, None if unknown."""
        entry = self.jobs.pop(job_id, None)
        if entry is not None:
            self.events.jobs.emit()
        return entry

    def running(self, kind: str, slot: str | None = None) -> list[Any]:
        """Ids of the jobs of ``kind`` that work for what is open now (``slot``: for that slot's model only)."""
        return [job_id for job_id, entry in self.jobs.items() if entry.kind == kind and self.accepts(entry.stamp)
                and (slot is None or entry.stamp.slot == slot)]

    def stale_jobs(self) -> list[Any]:
        """Ids of the jobs that work for a dataset or model no longer open."""
        return [job_id for job_id, entry in self.jobs.items() if not self.accepts(entry.stamp)]

    # -- the last session
    def to_dict(self) -> dict:
        """What the last session reopens (see :class:`LastSession`); live modules are left out."""
        models = {name: slot.source.to_dict() for name, slot in self.slots.items()
                  if slot.source is not None and slot.source.persistent}
        paths = getattr(self.dataset, "paths", None)

        def rel(index: int | None) -> str | None:
            return None if index is None or paths is None else str(paths[index])

        return LastSession(self.dataset_path, self.dataset_format, models, rel(self.query_index),
                           rel(self.reference_index), self.features_path, self.display.to_dict()).to_dict()

    @staticmethod
    def from_dict(data: Any) -> "LastSession":
        """The last session from settings (a dict or its JSON text), every field checked;
        :class:`SessionError` with one line for a value that cannot be right."""
        return LastSession.from_dict(data)


@dataclass
class LastSession:
    """A remembered session, not yet opened: paths and model sources."""

    dataset: str | None = None
    format: str | None = None
    models: dict = field(default_factory=dict)  # slot -> ModelSource (dicts in to_dict)
    query: str | None = None
    reference: str | None = None
    features: str | None = None
    display: dict = field(default_factory=dict)  # DisplayOptions.to_dict(); read with DisplayOptions.update

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"version": 1}
        for key in ("dataset", "format", "query", "reference", "features", "display"):
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
        for key in ("dataset", "format", "query", "reference", "features"):
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
    (features, path), "notice": text}`` with the keys of what was read (``compare``: the last
    session's model B, only when its model A is the model opened); nothing raises (every
    failure is an entry of ``errors``, whose title says what could not be opened)."""
    from dmlviewer.core.models.source import ModelSource

    result: dict = {"errors": [], "format": fmt}
    remembered_features = None  # the last session's feature file: opened only if it fits the dataset
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
            if record.features and Path(record.features).exists() and not features:
                features = remembered_features = record.features
            if record.models.get("primary") is not None:
                sources.append(("Cannot reopen the last session's model", record.models["primary"]))
                compare_source = record.models.get("compare")
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
    for key, title, path in (("dataset", "Cannot open dataset", dataset), ("features", "Cannot open features", features)):
        if not path:
            continue
        step(f"Loading the {key} {Path(path).name}…")
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
    if remembered_features and "features" in result and "dataset" in result:
        opened, path = result["dataset"]
        identity = dataset_identity(opened, path)
        attrs = getattr(result["features"][0], "attrs", None) or {}
        if not features_fit_dataset(attrs, lambda: result["features"][0].paths, opened, identity):
            log.info("not reopening %s: computed from another dataset than %s", remembered_features, path)
            del result["features"]
    return result


#: How each kind of model source is named in error titles ("Cannot open checkpoint").
_KIND_WORDS = {"checkpoint": "checkpoint", "pretrained": "pretrained backbone", "code": "model from code",
               "python": "model"}


def kind_words(kind: str) -> str:
    """A kind of model source in words, for error titles."""
    return _KIND_WORDS.get(kind, "model")
