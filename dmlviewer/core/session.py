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
- **Last session**: :meth:`Session.to_dict` gives what can be reopened in another process, as
  :class:`~dmlviewer.core.last_session.LastSession` records it; reading it back, the recent
  models and reading a session's files at start are :mod:`dmlviewer.core.last_session`'s.

No Qt here (a test enforces it), and no torch at import time: the app imports this module on its
GUI thread before torch is loaded; ``ModelSource`` (whose package imports torch) is imported
where a source is read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from psygnal import Signal, SignalGroup

from dmlviewer.core.data.identity import DatasetIdentity, dataset_identity, features_fit_dataset
from dmlviewer.core.display import DisplayOptions
from dmlviewer.core.last_session import LastSession, SessionError
from dmlviewer.core.slot_features import SLOTS, SlotFeatures, features_mismatch

if TYPE_CHECKING:
    from dmlviewer.core.models.source import ModelSource

log = logging.getLogger(__name__)


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
        :data:`~dmlviewer.core.slot_features.FEATURES_MISMATCH_HEADINGS`, and the sentence of :meth:`features_problem`, which
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
        """What the last session reopens (see :class:`~dmlviewer.core.last_session.LastSession`);
        live modules are left out, and model B's feature file with them."""
        models = {name: slot.source.to_dict() for name, slot in self.slots.items()
                  if slot.source is not None and slot.source.persistent}
        paths = getattr(self.dataset, "paths", None)

        def rel(index: int | None) -> str | None:
            return None if index is None or paths is None else str(paths[index])

        compare_features = self.slot_features["compare"].path if "compare" in models else None
        return LastSession(self.dataset_path, self.dataset_format, models, rel(self.query_index),
                           rel(self.reference_index), self.features_path, self.display.to_dict(),
                           compare_features).to_dict()

    @staticmethod
    def from_dict(data: Any) -> "LastSession":
        """The last session from settings (a dict or its JSON text), every field checked;
        :class:`SessionError` with one line for a value that cannot be right."""
        return LastSession.from_dict(data)
