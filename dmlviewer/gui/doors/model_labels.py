"""The open models' names: distinct names by slot, the user's own labels, and one-line summaries.

Model A (the ``"primary"`` slot) and model B (``"compare"``) are named where the user reads them
(views, job names, tables, exports) by ``core.models.naming``: distinct from each other, or the
user's label (File > Label Model A/B…, kept in the model's source, so the last session keeps
it too).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QInputDialog


class ModelLabels:
    """Names of the open models of ``window`` (the ``MainWindow``) and File > Label Model A/B…
    (``actions`` by slot, enabled while that slot holds a model)."""

    def __init__(self, window: Any) -> None:
        self.window = window
        self.session = window.session
        self.actions: dict[str, QAction] = {}
        for slot, text in (("primary", "Label Model A…"), ("compare", "Label Model B…")):
            action = QAction(text, window)
            action.setEnabled(False)
            action.setStatusTip("Give the model a name of your own, shown in the views, tables and exports")
            action.triggered.connect(lambda _=False, s=slot: self.ask_label(s))
            self.actions[slot] = action

    def names(self) -> dict[str, str]:
        """The open models' names by slot, distinct from each other (``core.models.naming``)."""
        from dmlviewer.core.models.naming import distinct_names
        from dmlviewer.core.session import SLOTS

        open_ = [(name, self.session.slot(name)) for name in SLOTS if self.session.slot(name) is not None]
        # side by side, what tells them apart: a backbone both have is said in the tooltips only
        names = distinct_names([(slot.source, slot.info) for _, slot in open_], shared_traits=False)
        return {name: text for (name, _), text in zip(open_, names)}

    def display_name(self, slot: str = "primary") -> str:
        """The model of ``slot`` by its name (distinct from the other open model's; the user's
        label when it has one; "the model" when none is open)."""
        return self.names().get(slot, "the model")

    def job_name(self, slot: str = "primary") -> str:
        """The model of ``slot`` in words, for job names; while comparing "A (…)" or "B (…)",
        so that two models' jobs never read the same."""
        name = self.display_name(slot)
        if self.session.slot("compare") is not None:
            name = f"{'A' if slot == 'primary' else 'B'} ({name})"
        return name

    def update_actions(self, names: dict[str, str]) -> None:
        """Label Model A/B… is offered for the slots in ``names`` (the open ones)."""
        for slot, action in self.actions.items():
            action.setEnabled(slot in names)

    def label_model(self, slot: str, label: str | None) -> None:
        """Give the model of ``slot`` a label of the user's (None or "": its own name again); the
        label is part of its source, so the views, tables, exports and the last session keep it."""
        entry = self.session.slot(slot)
        if entry is None or entry.source is None:
            return
        label = (label or "").strip()[:80] or None
        if entry.source.kind == "python":  # a live module's label is its class name when none is given
            label = label or type(entry.model).__name__
        self.session.set_label(slot, label)  # the window follows the session's label event

    def ask_label(self, slot: str) -> None:
        """File > Label Model A/B…: a name of the user's for the model (empty: its own name)."""
        entry = self.session.slot(slot)
        if entry is None:
            return
        current = entry.source.label if entry.source is not None and entry.source.kind != "python" else ""
        text, ok = QInputDialog.getText(self.window, f"Label model {'A' if slot == 'primary' else 'B'}",
                                        "A name for this model in the views, tables and exports "
                                        "(empty: its file name):", text=current or "")
        if ok:
            self.label_model(slot, text)


def model_summary(model) -> str:
    """One line: backbone, pooling, grouping head and embedding size; a two-branch model's
    branches as ``query / reference`` where they differ."""
    from dmlviewer.core.models.two_branch import BRANCHES, TwoBranchModel

    def parts(c: dict) -> tuple[str, str]:
        grouping = c.get("grouping", "none")
        head = c.get("pooling", "?") + ("" if grouping == "none" else f" + {grouping}-grouping ×{c.get('groups')}")
        return c.get("backbone", "?"), head

    if isinstance(model, TwoBranchModel):
        sides = [parts(model.branch(side).config) for side in BRANCHES]
        backbone, head = (" / ".join(dict.fromkeys(p[i] for p in sides)) for i in (0, 1))
        backbone = "two-branch " + backbone
    else:
        backbone, head = parts(model.config)
    return f"{backbone} · {head} · {getattr(model, 'dim', None) or model.config.get('dim', '?')}-d"
