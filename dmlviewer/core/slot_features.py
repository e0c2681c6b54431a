"""The feature file of each model slot (issue 41): model A's (``"primary"``) and model B's
(``"compare"``), each bound to the open dataset's identity and to its own slot's checkpoint.

:class:`~dmlviewer.core.session.Session` keeps one :class:`SlotFeatures` per slot and asks this
module why a file must not be shown (:func:`features_mismatch`): computed from another dataset
(its ``dataset_fingerprint``), not saying which checkpoint computed it, or computed by another
checkpoint than its slot's (``checkpoint_sha256``). The sentences of the primary slot are the
ones the app has always shown; those of model B name model B. No Qt here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A short heading for each cause of :func:`features_mismatch`, agreeing with its sentence.
FEATURES_MISMATCH_HEADINGS = {
    "dataset": "Features of another dataset.",
    "unrecorded": "Features of an unknown model.",
    "model": "Features of another model.",
}

#: The model slots: the model on screen, and the second model of a comparison (issue 24).
SLOTS = ("primary", "compare")
#: How the sentences name each slot's model (the primary slot is "the open one").
SLOT_NAMES = {"primary": "model A", "compare": "model B"}


@dataclass
class SlotFeatures:
    """One slot's feature file: the open features (``open_features``' or ``read_features``'
    object), the file it was read from and whether the user chose it (a file that does not fit
    is then flagged, not replaced without asking)."""

    features: Any = None
    path: str | None = None
    chosen: bool = False

    def key(self) -> str:
        """What a job that reads these features is stamped with ("" when none is open)."""
        if self.features is None:
            return ""
        created = (getattr(self.features, "attrs", None) or {}).get("created", "")
        return f"{self.path}|{created}|{id(self.features)}"

    def clear(self) -> None:
        self.features, self.path, self.chosen = None, None, False


def features_mismatch(features: Any, fits_dataset: bool, model_open: bool, model_sha: str | None,
                      slot: str = "primary") -> tuple[str, str] | None:
    """Why ``features`` must not be shown with the open dataset and ``slot``'s model: (a key of
    :data:`FEATURES_MISMATCH_HEADINGS`, one sentence naming the model for model B); None when
    they may. ``fits_dataset``: the file's dataset identity is the open dataset's
    (:func:`~dmlviewer.core.data.identity.features_fit_dataset`); ``model_open``: the slot holds
    a model (without one only the dataset is checked); ``model_sha``: its checkpoint's sha256."""
    if features is None:
        return None
    attrs = getattr(features, "attrs", None) or {}
    whose = "These features" if slot == "primary" else f"These features of {SLOT_NAMES.get(slot, slot)}"
    if not fits_dataset:
        root = str(attrs.get("dataset_root") or "") or "another folder"
        return "dataset", (f"{whose} were computed from another dataset ({root}) than the open one: "
                           "their neighbours are not shown.")
    if not model_open:
        return None
    stored = str(attrs.get("checkpoint_sha256", "") or "")
    if not stored:
        return "unrecorded", (f"{whose} do not say which checkpoint computed them, so they may "
                              "belong to another model: their neighbours are not shown.")
    if model_sha and stored != model_sha:
        against = "the open one" if slot == "primary" else f"{SLOT_NAMES.get(slot, slot)}'s"
        return "model", (f"{whose} were computed by another checkpoint (sha256 {stored[:12]}…) than "
                         f"{against} ({model_sha[:12]}…): their neighbours are not shown.")
    return None
