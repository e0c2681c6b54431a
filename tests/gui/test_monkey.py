"""Monkey test: every menu action, every dialog, hostile text in every field, every safe button.

The main window is opened on the small demo fixtures (model A and, compared with it, model B);
then every action reachable from the menu bar (and every other ``QAction`` of the window) is
triggered, every window or dialog that opens gets hostile strings typed into each of its text
fields and spin boxes with real key events, and each of its safe buttons is clicked. Modal
calls (file dialogs, message boxes, input dialogs, ``QDialog.exec``) answer at once, so nothing
ever blocks.

The test fails on any exception escaping a slot or a Qt virtual method (pytest-qt captures
them) and on any error dialog (``errors.show_error`` is recorded by the ``dialogs`` fixture):
typing into a form must never raise, bad input is refused when the form is used.

The actions are discovered generically (``menuBar()`` walk and ``findChildren(QAction)``),
never by the main window's attribute names. Buttons that start long work or quit are skipped
by their text (:data:`DENY`).
"""

from __future__ import annotations

import re

import pytest
import shiboken6
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeyEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QAbstractButton, QAbstractSpinBox, QApplication, QDialog, QFileDialog, QInputDialog, QLineEdit, QMenu,
    QMessageBox, QPlainTextEdit, QWidget,
)

pytestmark = pytest.mark.gui

#: What a person might type into any field.
HOSTILE = ["/", "..", "~", "x" * 300, "é中😀", "-1", "1e309", "nan"]
#: Buttons and actions never pressed (by their text, "&" and "…"/"..." ignored): quitting, and
#: buttons that start long jobs (training, evaluation, extraction, dataset-wide runs).
DENY = re.compile(r"^(quit|start|evaluate|run( .*)?|extract.*|compute.*|faithfulness of this pair)$", re.I)
#: Actions triggered after all others: they close what the others act on (model B's Label Model B).
LAST = re.compile(r"^stop comparing$", re.I)


def _plain(text: str) -> str:
    return text.replace("&", "").replace("…", "").replace("...", "").strip()


def _denied(text: str) -> bool:
    return bool(DENY.match(_plain(text)))


class ModalCalls(list):
    """``(title, fields, buttons)`` per dialog run with ``exec()``, and the file dialogs asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []


@pytest.fixture
def no_modal_calls(monkeypatch):
    """File dialogs and message boxes answer "cancelled" at once; a dialog run with ``exec()`` is
    fuzzed like any window and then rejected; a text input dialog is a real one, fuzzed so, and
    accepted with the text typed last. Returns, per dialog run with ``exec()``, its title and
    the numbers of fields typed into and buttons clicked; ``.asked`` lists the file dialogs'
    titles (which show how far an action got before the user would choose a path)."""
    seen = ModalCalls()

    def file_dialog(answer):
        def ask(parent=None, caption: str = "", *args, **kwargs):
            seen.asked.append(caption)
            return answer

        return staticmethod(ask)

    for name in ("getOpenFileName", "getSaveFileName", "getOpenFileNames"):
        monkeypatch.setattr(QFileDialog, name, file_dialog(("", "")))
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", file_dialog(""))
    for name in ("about", "information", "warning", "critical"):
        monkeypatch.setattr(QMessageBox, name, staticmethod(lambda *a, **k: QMessageBox.Ok))
    for name in ("getItem", "getInt", "getDouble"):
        monkeypatch.setattr(QInputDialog, name, staticmethod(lambda *a, **k: (None, False)))

    def get_text(parent, title: str, label: str, echo=QLineEdit.Normal, text: str = "", *args, **kwargs):
        dialog = QInputDialog(parent)
        dialog.setWindowTitle(title)
        dialog.setLabelText(label)
        dialog.setTextValue(text)
        dialog.exec()  # fuzzed (below)
        answer = dialog.textValue()
        dialog.deleteLater()
        return answer, True

    def exec_(dialog) -> int:
        dialog.show()
        seen.append((dialog.windowTitle(), *_fuzz(dialog)))
        dialog.hide()
        return QDialog.Rejected

    monkeypatch.setattr(QInputDialog, "getText", staticmethod(get_text))
    monkeypatch.setattr(QDialog, "exec", exec_)
    return seen


def _fields(root: QWidget) -> list[QWidget]:
    """Editable, visible text fields and spin boxes under ``root``."""
    out = []
    for kind in (QLineEdit, QPlainTextEdit, QAbstractSpinBox):
        for w in root.findChildren(kind):
            if isinstance(w, QLineEdit) and isinstance(w.parentWidget(), QAbstractSpinBox):
                continue  # typed into through its spin box
            if not (w.isVisibleTo(root) and w.isEnabled()) or w.isReadOnly():
                continue
            out.append(w)
    return out


def _key_clicks(field: QWidget, text: str) -> None:
    """Key press and release events for each character (``QTest.keyClicks`` for ASCII; a key
    event carrying the character, as an input method sends it, for the others)."""
    for ch in text:
        if ch.isascii():
            QTest.keyClicks(field, ch)
            continue
        for kind in (QEvent.KeyPress, QEvent.KeyRelease):
            QApplication.sendEvent(field, QKeyEvent(kind, Qt.Key_unknown, Qt.NoModifier, ch))


def _type_into(field: QWidget, text: str) -> None:
    field.setFocus()
    QTest.keyClick(field, Qt.Key_A, Qt.ControlModifier)  # select all: the text replaces the field's
    _key_clicks(field, text)
    QTest.keyClick(field, Qt.Key_Tab)  # leaves the field (editingFinished); Return would press a default button
    QApplication.processEvents()


def _fuzz(root: QWidget, buttons: bool = True) -> tuple[int, int]:
    """Hostile text into every field of ``root``, then a click on every safe, enabled button.
    Returns the numbers of fields typed into and of buttons clicked."""
    typed = clicked = 0
    for field in _fields(root):
        typed += 1
        for text in HOSTILE:
            if not shiboken6.isValid(field) or not field.isEnabled() or not field.isVisible():
                break  # an earlier entry disabled or hid it
            # a 300-character string into a spin box proves nothing its 8-character tail does not
            _type_into(field, text if isinstance(field, (QLineEdit, QPlainTextEdit)) else text[:8])
    if not buttons:
        return typed, clicked
    for button in root.findChildren(QAbstractButton):
        if not shiboken6.isValid(root):
            break  # a button closed and deleted its window
        if not shiboken6.isValid(button) or not (button.isVisible() and button.isEnabled()) or _denied(button.text()):
            continue
        if _plain(button.text()).lower() == "close":
            continue  # closing ends the fuzzing of this window, not a bug to look for
        QTest.mouseClick(button, Qt.LeftButton)
        QApplication.processEvents()
        clicked += 1
    return typed, clicked


def _menu_actions(window) -> list[QAction]:
    """Every leaf action reachable from the menu bar (sub-menus filled as when opened)."""
    out: list[QAction] = []

    def walk(menu: QMenu) -> None:
        menu.aboutToShow.emit()  # recent-file lists fill themselves here
        for action in menu.actions():
            if action.menu() is not None:
                walk(action.menu())
            elif not action.isSeparator():
                out.append(action)

    for action in window.menuBar().actions():
        if action.menu() is not None:
            walk(action.menu())
    return out


def _from_pyqtgraph(obj: QObject | None) -> bool:
    """Whether ``obj`` belongs to a pyqtgraph plot (its own context menus are not ours)."""
    while obj is not None:
        if type(obj).__module__.startswith("pyqtgraph"):
            return True
        obj = obj.parent()
    return False


def _all_actions(window) -> list[QAction]:
    """The menu bar's actions, then the window's others; those of :data:`LAST` at the end."""
    actions = _menu_actions(window)
    for action in window.findChildren(QAction):
        if (action not in actions and not action.isSeparator() and action.menu() is None and action.text()
                and not _from_pyqtgraph(action)):
            actions.append(action)
    return sorted(actions, key=lambda action: bool(LAST.match(_plain(action.text()))))


def test_monkey(window, qtbot, demo_root, small_ckpt, wait_ready, no_modal_calls):
    assert window.open_dataset(demo_root) and window.open_checkpoint(small_ckpt)
    window.open_compare(small_ckpt)  # model B too: its actions (Label Model B) are enabled
    qtbot.waitUntil(lambda: window.session.slot("compare") is not None, timeout=30000)
    wait_ready(window.pair_view)
    before = {id(w) for w in QApplication.topLevelWidgets() if w.isVisible()}
    triggered = []
    for action in _all_actions(window):
        if not action.isEnabled() or _denied(action.text()):
            continue
        triggered.append(_plain(action.text()))
        action.trigger()
        if action.isCheckable():
            action.trigger()  # a dock shown or hidden comes back as it was
        QApplication.processEvents()
    assert len(triggered) >= 10, triggered
    assert any("Evaluate" in t for t in triggered) and any("Train" in t for t in triggered)

    # every window the actions opened, then the main window itself
    opened = [w for w in QApplication.topLevelWidgets() if w.isVisible() and id(w) not in before
              and w is not window]
    fuzzed = list(no_modal_calls)  # (title, fields, buttons) of the dialogs run with exec()
    for w in opened:
        if shiboken6.isValid(w):
            title = w.windowTitle()
            fuzzed.append((title, *_fuzz(w)))
    fuzzed.append(("main window", *_fuzz(window)))
    window.runner.cancel_all()
    print("\n".join(f"{title}: {fields} fields, {buttons} buttons" for title, fields, buttons in fuzzed))
    titles = " ".join(title for title, _, _ in fuzzed)
    for expected in ("Train", "Evaluation", "Localization", "Embedding", "Import", "Pretrained", "Model from Code",
                     "Compare Models", "Compare With", "Label model A", "Label model B", "Export View"):
        assert expected.lower() in titles.lower(), (expected, fuzzed)
    assert "Write Report" in no_modal_calls.asked  # Tools > Report got as far as asking where to write
    assert sum(fields for _, fields, _ in fuzzed) >= 40 and sum(b for _, _, b in fuzzed) >= 10, fuzzed
    assert window.isVisible()
    assert window.dialogs == [], window.dialogs
