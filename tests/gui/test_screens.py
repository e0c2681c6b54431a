"""Every window fits a 1366 x 768 laptop screen, forms scroll instead of taking the wheel.

The screen checks run the app in a subprocess on Qt's offscreen platform configured with one
screen of a given size (``offscreen:configfile=``), so what Qt reports as the available area is
that of the simulated laptop: windows are opened as a user opens them and their frames, minimum
sizes and buttons are compared with it. A geometry saved on a 1920 x 1200 screen is then
restored on the small one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from _isolated import app_env

pytestmark = pytest.mark.gui

_PROBE = r'''
import json, sys
from PySide6.QtCore import QRect
from dmlviewer.gui.window.app import create_app
app = create_app()
from dmlviewer.gui.window.main_window import MainWindow

mode, dataset, checkpoint = sys.argv[1:4]
window = MainWindow()
if mode == "save":  # a big window on a big screen, closed (its geometry is saved)
    window.show()
    window.setGeometry(QRect(60, 60, 1800, 1100))
    app.processEvents()
    window.close()
    print(json.dumps({"saved": [window.width(), window.height()]}))
    sys.exit(0)
window.show()
window.open_checkpoint(checkpoint)
window.open_dataset(dataset)
tools = window.tools
views = {"training": tools.show_training(), "evaluation": tools.show_evaluation(),
         "localization": tools.show_localization(), "embedding": tools.show_embedding()}
for _ in range(20):
    app.processEvents()

def rect(r):
    return [r.x(), r.y(), r.width(), r.height()]

def inside(widget, top):
    """Whether widget lies wholly inside top's client area and is visible."""
    p = widget.mapTo(top, widget.rect().topLeft())
    return widget.isVisible() and top.rect().contains(QRect(p, widget.size()))

screen = app.primaryScreen().availableGeometry()
out = {"screen": rect(screen), "windows": {}}
for name, w in [("main", window), *views.items()]:
    m = w.minimumSizeHint().expandedTo(w.minimumSize())
    out["windows"][name] = {"frame": rect(w.frameGeometry()), "minimum": [m.width(), m.height()]}
out["visible"] = {
    "status bar": inside(window.statusBar(), window),
    "retrieval dock": inside(window.retrieval_dock, window),
    "browser dock": inside(window.browser_dock, window),
    "pair view toolbar": inside(window.pair_view.toolbar_widget, window),
    "training Start": inside(views["training"].start_button, views["training"]),
    "training Close": inside(views["training"].close_button, views["training"]),
    "localization Run": inside(views["localization"].localize_button, views["localization"]),
}
combo = window.pair_view.method_combo
out["map combo shows"] = combo.width() >= combo.fontMetrics().horizontalAdvance("Decomposition+Bias")
print(json.dumps(out))
window.shutdown()
'''


def _run(tmp_path: Path, width: int, height: int, mode: str, dataset: Path, checkpoint: Path) -> dict:
    config = tmp_path / f"screen-{width}x{height}.json"
    config.write_text(json.dumps({"synchronousWindowSystem": True, "windowFrameMargins": False, "screens": [
        {"name": "screen", "x": 0, "y": 0, "width": width, "height": height, "logicalDpi": 96,
         "logicalBaseDpi": 96, "dpr": 1}]}))
    env = app_env(tmp_path / "home", QT_QPA_PLATFORM=f"offscreen:configfile={config}")
    done = subprocess.run([sys.executable, "-c", _PROBE, mode, str(dataset), str(checkpoint)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_window_fits_a_1366x768_screen_even_after_a_bigger_one(tmp_path, demo_root, small_ckpt):
    saved = _run(tmp_path, 1920, 1200, "save", demo_root, small_ckpt)
    assert saved["saved"] == [1800, 1100]  # the big screen kept the big window
    out = _run(tmp_path, 1366, 768, "open", demo_root, small_ckpt)
    sx, sy, sw, sh = out["screen"]
    assert (sw, sh) == (1366, 768)
    for name, w in out["windows"].items():
        x, y, width, height = w["frame"]
        assert sx <= x and sy <= y and x + width <= sx + sw and y + height <= sy + sh, (name, w)
        assert w["minimum"][0] <= sw and w["minimum"][1] <= sh, (name, w)
    assert all(out["visible"].values()), out["visible"]
    assert out["map combo shows"]


def _wheel(widget, delta: int = -120) -> None:
    """One wheel notch (down for a negative ``delta``) over the middle of ``widget``, given to its
    window as the window system gives it: Qt finds the widget under the mouse and propagates
    the event to its parents as for a real wheel."""
    window = widget.window()
    local = widget.mapTo(window, widget.rect().center())
    event = QWheelEvent(QPointF(local), QPointF(widget.mapToGlobal(widget.rect().center())), QPoint(),
                        QPoint(0, delta), Qt.NoButton, Qt.NoModifier, Qt.NoScrollPhase, False)
    QApplication.sendEvent(window.windowHandle(), event)


def test_spin_boxes_leave_the_wheel_to_the_form_unless_focused(qtbot, runner):
    from dmlviewer.gui.training.dialog import TrainingDialog

    dialog = TrainingDialog(runner)
    qtbot.addWidget(dialog)
    dialog.resize(1000, 500)  # short enough for the form to scroll
    dialog.show()
    qtbot.waitExposed(dialog)
    spin = dialog.form.widgets["diversity"]
    combo = dialog.form.widgets["loss"]
    area = spin.parentWidget()
    while area is not None and not hasattr(area, "verticalScrollBar"):
        area = area.parentWidget()
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0
    before, loss = spin.value(), combo.currentIndex()
    for widget in (spin, combo):
        area.ensureWidgetVisible(widget)
        start = bar.value()
        assert start < bar.maximum()
        _wheel(widget)
        assert bar.value() > start  # the form scrolled
    assert spin.value() == before and combo.currentIndex() == loss  # nothing changed
    assert not spin.hasFocus()
    spin.setFocus(Qt.MouseFocusReason)  # clicked into: now the wheel is the spin box's
    qtbot.waitUntil(spin.hasFocus, timeout=2000)
    # (straight to the spin box: a synthetic event is not passed on from its text field the way
    # the window system's is)
    pos = QPointF(spin.rect().center())
    QApplication.sendEvent(spin, QWheelEvent(pos, QPointF(spin.mapToGlobal(pos.toPoint())), QPoint(),
                                             QPoint(0, 120), Qt.NoButton, Qt.NoModifier, Qt.NoScrollPhase, False))
    assert spin.value() == pytest.approx(before + spin.singleStep())
