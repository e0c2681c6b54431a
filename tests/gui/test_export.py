"""File > Export View (issue 33 item 1): figures drawn from the data at the export resolution.

The SVG and the PDF of the pair view hold the captions and the similarity line as text and the
maps as images of the export resolution; a PNG at 2x has twice the pixels of the 1x one, the
same figure; the group tab and the plots export too; the menu entry writes the file.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys

import numpy as np
import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QDialog, QFileDialog

from _isolated import app_env

from dmlviewer.core.figures.pair import PANEL_SIDE
from dmlviewer.gui.window import export

pypdf = pytest.importorskip("pypdf")


@pytest.fixture
def ready(window, demo_root, agroup_ckpt, wait_ready, qtbot):
    assert window.open_checkpoint(agroup_ckpt)
    assert window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    qtbot.waitUntil(lambda: window.group_tabs.explanation is not None, timeout=30000)
    return window


def _texts(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_pair_view_exports_text_as_text_and_maps_at_the_export_resolution(ready, tmp_path):
    target = export.pair_view_target(ready.pair_view)
    assert target is not None
    images = ready.pair_view.images
    caption = export._plain(images.query_title)
    paths = {}
    for scale in (1, 2):
        figure = target.figure(scale)
        for suffix in (".svg", ".pdf", ".png"):
            paths[scale, suffix] = export.write_figure(figure, tmp_path / f"pair{scale}{suffix}")
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]

    expl = ready.pair_view.explanation
    similarity = f"{expl.similarity:+.4f}"
    for scale in (1, 2):
        svg = paths[scale, ".svg"].read_text(encoding="utf-8")
        texts = " ".join(_texts(svg))
        assert caption.split(" ")[0] in texts and "Decomposition" in texts and similarity in texts
        # the maps are drawn at the export resolution: the longer side is PANEL_SIDE x scale
        sizes = {(int(w), int(h)) for w, h in re.findall(r'<image x="[\d.]+" y="[\d.]+" width="(\d+)" '
                                                         r'height="(\d+)"', svg)}
        assert max(max(size) for size in sizes) >= PANEL_SIDE * scale
        pdf = pypdf.PdfReader(io.BytesIO(paths[scale, ".pdf"].read_bytes()))
        text = " ".join(pdf.pages[0].extract_text().split())  # pypdf may space words with tabs
        assert "Decomposition" in text and similarity in text and "Similarity (cosine)" in text
        pictures = [(im.image.width, im.image.height) for im in pdf.pages[0].images]
        assert max(max(size) for size in pictures) >= PANEL_SIDE * scale  # not resampled to the screen
    one, two = QImage(str(paths[1, ".png"])), QImage(str(paths[2, ".png"]))
    assert abs(two.width() - 2 * one.width()) <= 2 and abs(two.height() - 2 * one.height()) <= 2
    # the same figure: the 2x image shrunk to 1x looks like the 1x image
    small = two.scaled(one.width(), one.height())
    a, b = (np.asarray(im.convertToFormat(QImage.Format_RGB888).constBits()).astype(float) for im in (one, small))
    assert a.shape == b.shape and np.abs(a - b).mean() < 25


def test_the_group_tab_and_plots_export(ready, tmp_path, qtbot):
    group = export.group_target(ready.group_tabs, ready.pair_view)
    assert group is not None
    svg = export.write_figure(group.figure(1), tmp_path / "group.svg").read_text(encoding="utf-8")
    assert any(t.startswith("Group 1 of 4: contributes") for t in _texts(svg))

    import pyqtgraph as pg

    plot = pg.PlotWidget(title="Training loss")
    qtbot.addWidget(plot)
    plot.plot([0, 1, 2, 3], [1.0, 0.6, 0.4, 0.3], name="loss")
    plot.setLabel("bottom", "epoch")
    plot.show()
    qtbot.waitExposed(plot)
    found = [t for t in export.plot_targets() if "Training loss" in t.name]
    assert len(found) == 1
    svg = export.write_figure(found[0].figure(1), tmp_path / "plot.svg").read_text(encoding="utf-8")
    texts = _texts(svg)
    assert "Training loss" in texts and "loss" in texts and "epoch" in texts
    points = re.search(r'<polyline points="([^"]+)"', svg).group(1).split()
    assert len(points) == 4  # the curve's own data, not a screen grab
    # a scatter (the embedding's points) is points, not a line through them
    plot.plot([0, 1, 2, 3, 4], [2, 0, 1, 3, 0], pen=None, symbol="o", name="points")
    plot.addItem(pg.ScatterPlotItem([0.5, 1.5], [1.0, 2.0]))
    svg = export.write_figure(found[0].figure(1), tmp_path / "plot2.svg").read_text(encoding="utf-8")
    assert len(re.findall(r"<polyline ", svg)) == 1  # the loss curve's only
    assert len(re.findall(r"<circle ", svg)) == 4 + 5 + 2 + 2  # markers and the two dots' legend marks


def test_the_menu_entry_writes_the_chosen_file_and_copies_it(ready, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QApplication

    action = next(a for a in ready.menuBar().actions()[0].menu().actions() if a.text() == "&Export View…")
    out = tmp_path / "view.png"

    def choose(dialog):
        dialog.scale.setCurrentIndex(1)  # 2x
        return QDialog.Accepted

    monkeypatch.setattr(export.ExportDialog, "exec", choose)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), "PNG image (*.png)"))
    QApplication.clipboard().clear()
    action.trigger()
    assert out.exists()
    image = QImage(str(out))
    assert image.width() >= 2 * PANEL_SIDE * 2  # two panels side by side at 2x
    assert not QApplication.clipboard().image().isNull()
    assert QApplication.clipboard().image().size() == image.size()
    # the pair view's context menu holds the same entry
    assert [a.text() for a in ready.pair_view.actions()] == ["Export View…"]


_COPY_AND_EXIT = """
from PySide6.QtWidgets import QApplication
from dmlviewer.core.figures import Bars, Figure
from dmlviewer.gui.window import export
app = QApplication([])
export.copy_figure(Figure("", [[Bars("signed", ["a", "b"], [1.0, -1.0])]]))
assert not QApplication.clipboard().image().isNull()
"""


def test_a_copied_figure_does_not_crash_the_process_at_exit(tmp_path):
    """Offscreen, Qt's clipboard deletes its data after Python has finalized: the copied figure
    (a QMimeData made in Python) used to crash the exit there (exit code 139)."""
    env = app_env(tmp_path)
    done = subprocess.run([sys.executable, "-c", _COPY_AND_EXIT], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_plots_own_context_menu_exports_its_bars(qtbot, runner, tmp_path, monkeypatch):
    """The localization view's part-correspondence bars: the entry of the plot's own right-click
    menu (pyqtgraph's ViewBox menu) opens Export View with this plot chosen, and the SVG holds one
    rect per bar, heights in proportion to the values, and the axis titles as text."""
    from dmlviewer.gui.evaluation.localization_view import LocalizationView

    view = LocalizationView(runner)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    view.show_correspondence({"partial_map_accuracy": 0.8, "overall_map_accuracy": 0.4, "chance_accuracy": 0.1,
                              "num_parts": 15, "num_pairs": 20})
    entry = [a for a in view.bar_plot.getPlotItem().getViewBox().menu.actions() if a.text() == export.MENU_ENTRY]
    assert len(entry) == 1
    chosen, out = [], tmp_path / "bars.svg"

    def accept(dialog):
        chosen.append(dialog.what.currentText())
        return QDialog.Accepted

    monkeypatch.setattr(export.ExportDialog, "exec", accept)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), "SVG drawing (*.svg)"))
    entry[0].trigger()
    assert chosen and chosen[0].startswith("Plot: Part correspondence accuracy")
    svg = out.read_text(encoding="utf-8")
    texts = _texts(svg)
    assert {"Part correspondence accuracy", "peak in the same part", "point-to-point (partial map)",
            "overall map"} <= set(texts)
    heights = [float(h) for h in re.findall(r'<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)" '
                                            r'fill="#', svg)]
    assert len(heights) == 2 and heights[1] / heights[0] == pytest.approx(0.5, abs=0.01)
    # the PDF keeps the axis title as text; the PNG is the drawn figure
    figure = next(t for t in export.plot_targets() if t.source is view.bar_plot.getPlotItem()).figure(2)
    pdf = pypdf.PdfReader(io.BytesIO(export.write_figure(figure, tmp_path / "bars.pdf").read_bytes()))
    assert "peak in the same part" in " ".join(pdf.pages[0].extract_text().split())
    assert not QImage(str(export.write_figure(figure, tmp_path / "bars.png"))).isNull()


def test_the_difference_row_exports_as_shown(window, demo_root, small_ckpt, wait_ready, qtbot, tmp_path,
                                            tmp_path_factory):
    """With "Difference A − B" the figure's second row is A's overall maps minus B's on one
    symmetric colour bar (the view's difference_maps), not B's maps."""
    import torch

    from dmlviewer.core.models import build_model, default_config, save_checkpoint
    from tests.gui.test_compare_view import wait_compare

    torch.manual_seed(1)
    other = tmp_path_factory.mktemp("ckpt-b") / "other.pt"
    save_checkpoint(other, build_model(default_config(backbone="small_cnn", dim=32, image_size=64)))
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    view = window.pair_view
    wait_ready(view)
    window.open_compare(other)
    qtbot.waitUntil(lambda: window.session.slot("compare") is not None, timeout=30000)
    wait_compare(qtbot, view)
    view.compare_view_combo.setCurrentIndex(view.compare_view_combo.findData("difference"))
    assert view.difference
    diff = view.difference_maps(1)
    top = max(float(np.abs(d).max()) for d in diff.values())
    figure = export.pair_view_target(view).figure(1)
    assert len(figure.rows) == 2
    row = figure.rows[1]
    assert [p.caption.split(":")[0] for p in row] == ["A − B", "A − B"]
    for panel in row:
        assert panel.colorbar.low == pytest.approx(-top) and panel.colorbar.high == pytest.approx(top)
    # the drawn panel is the difference, not B's map
    from dmlviewer.core.figures.pair import map_panel

    query = view.images.query
    want = map_panel(query, diff["query"], "", 1.0, high=top, sign="signed").image
    assert np.array_equal(row[0].image, want)
    b_map = map_panel(query, view.rows[1].explanation.overall(view.method, "query", view.sign), "", 1.0,
                      high=top, sign="signed").image
    assert not np.array_equal(row[0].image, b_map)
    texts = _texts(export.write_figure(figure, tmp_path / "diff.svg").read_text(encoding="utf-8"))
    assert any(t.startswith("A − B: ") for t in texts)


def test_tools_report_writes_the_report_in_the_job_queue_and_opens_the_browser(ready, tmp_path, monkeypatch, qtbot):
    from PySide6.QtGui import QDesktopServices

    from dmlviewer.gui.jobs import report_job

    opened = []
    monkeypatch.setattr(report_job, "OPENER", None)  # QDesktopServices.openUrl, recorded
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()) or True)
    out = tmp_path / "report.html"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), "HTML page (*.html)"))
    action = next(a for a in ready.tools_menu.actions() if a.text() == "&Report on the Test Split…")
    action.trigger()
    qtbot.waitUntil(lambda: bool(opened) or bool(ready.dialogs), timeout=120000)
    assert opened == [str(out)]
    text = out.read_text(encoding="utf-8")
    assert "Retrieval failures · model A" in text and "<script" not in text
    assert report_job.report_models(ready)[0].name == "A"


@pytest.mark.parametrize("opener", ["fails", "openUrl says no"])
def test_tools_report_says_where_the_report_is_when_no_browser_opens_it(ready, tmp_path, monkeypatch, qtbot, qapp,
                                                                         opener):
    """Issue 42 item 7: the opener ends in failure (a real process exiting 3, as xdg-open does
    when Chromium refuses to run as root), or QDesktopServices.openUrl returns False: a notice
    names the file, Copy Path puts it on the clipboard and Show Folder opens its folder."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QDesktopServices

    from dmlviewer.gui.jobs import report_job

    opened = []
    if opener == "fails":
        monkeypatch.setattr(report_job, "OPENER", [sys.executable, "-c", "import sys; sys.exit(3)"], raising=False)
        monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()) or True)
    else:
        monkeypatch.setattr(report_job, "OPENER", None, raising=False)
        monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()) or False)
    out = tmp_path / "report.html"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), "HTML page (*.html)"))
    action = next(a for a in ready.tools_menu.actions() if a.text() == "&Report on the Test Split…")
    action.trigger()
    qtbot.waitUntil(lambda: getattr(ready, "report_notice", None) is not None and ready.report_notice.isVisible()
                    or bool(ready.dialogs), timeout=120000)
    assert not ready.dialogs and out.exists()
    box = ready.report_notice
    assert "no browser opened it" in box.text() and str(out) in box.informativeText()
    buttons = {b.text(): b for b in box.buttons()}
    opened.clear()
    qtbot.mouseClick(buttons["Copy Path"], Qt.LeftButton)
    assert qapp.clipboard().text() == str(out) and box.isVisible()  # the box stays for the other offer
    qtbot.mouseClick(buttons["Show Folder"], Qt.LeftButton)
    assert opened == [str(out.parent)]
    box.done(0)
