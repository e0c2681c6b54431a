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
import threading

import numpy as np
import pytest
from PySide6.QtCore import QTimer
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QDialog, QFileDialog

from _isolated import app_env

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


def _svg_texts(svg: bytes) -> list[str]:
    import xml.etree.ElementTree as ET

    return [t.text or "" for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]


def _svg_group(svg: bytes, gid: str):
    import xml.etree.ElementTree as ET

    return next((g for g in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}g") if g.get("id") == gid), None)


def _check_scene_is_the_screen(view, scene, session) -> None:
    """Every pane of the scene shows what the screen pane shows: the same options, the same
    colour-bar levels as the screen (the partial map on "Each map": the screen's 0..1 bar of
    the map's peak, and the read-out's peak), each bar's top a grid cell's value."""
    from dmlviewer.core.scene.colormaps import shown_map
    from dmlviewer.core.scene.levels import sign_part

    d = session.display
    assert scene.display == d.to_dict()
    assert len(scene.rows) == len([r for r in view.rows if r.state == "ready"])
    pinned = session.pinned
    for row, screen_row in zip(scene.rows, view.rows):
        for j, (pane, screen) in enumerate(zip(row.panes, screen_row.panes)):
            o = pane.overlay
            key = screen._colorbar_key
            signed = d.sign == "signed" or o.kind == "difference"
            assert o.colormap == shown_map(d.colormap, signed) and key[:2] == (d.colormap, signed)
            assert o.opacity == pytest.approx(d.opacity) == pytest.approx(screen.overlay_item.opacity())
            if o.kind == "partial" and d.scale == "map":
                assert key[2:4] == ((-1.0, 1.0) if signed else (0.0, 1.0))
                if np.any(o.data):
                    assert f"peak {o.levels[1]:.2g}" in screen.readout.text()
                else:  # an empty partial map has no peak (issue 42 item 9): both say so
                    assert "nothing to show" in screen.readout.text() and pane.message
                    assert "peak" not in screen.readout.text()
            else:
                assert key[2:4] == pytest.approx(o.levels, rel=1e-6), (row.name, pane.side, o.kind)
            if o.kind == "overall":  # the data's largest cell, not a statistic of a resized map
                grid = sign_part(screen_row.explanation.overall_grid(d.method, pane.side), d.sign)
                top = float(np.abs(grid).max()) if signed else float(grid.max())
                if not d.shared_scale:
                    assert o.levels[1] == pytest.approx(top, rel=1e-6)
            assert (pane.point is not None) == (pinned is not None and pinned[0] == j)
            if o.kind != "difference":
                assert (o.kind == "partial") == (pinned is not None and pinned[0] != j)
    assert [(m.query_xy, m.reference_xy) for m in scene.rows[0].matches] == \
        [(tuple(m["query_xy"]), tuple(m["reference_xy"])) for m in (view.lines.matches if d.matches else [])]


def test_export_view_is_what_is_on_screen_for_random_view_states(ready, qtbot, tmp_path):
    """Issue 39: method, sign, scale mode, colour map, opacity, pinned point, matches, set on the
    session (the old export fixed matches=5 and ignored the pin, scale mode and opacity): the
    exported scene's panes and colour bars are the screen's and the data's, and the figure is
    the same at 1x, 2x and 4x but for its pixels."""
    from dmlviewer.core.scene.draw import figure_bytes, level_text

    view, session = ready.pair_view, ready.session
    rng = np.random.default_rng(39)
    h, w = view.explanation.image_shape_query
    for state in range(4):
        d = session.display
        d.method = ["decomposition", "decomposition_bias", "gradcam", "decomposition"][state]
        d.sign = ["positive", "signed", "negative", "positive"][state]
        d.scale = ["map", "pair", "map", "pair"][state]
        d.colormap = str(rng.choice(["jet", "inferno", "viridis", "turbo", "plasma"]))
        d.opacity = float(rng.uniform(0.3, 1.0))
        d.matches = state % 2 == 0
        session.set_pinned((int(rng.integers(0, 2)), float(rng.uniform(0, w - 1)), float(rng.uniform(0, h - 1)))
                           if state != 1 else None)
        qtbot.waitUntil(lambda: view._maps_state(view.rows[0]) == "done", timeout=60000)
        qtbot.waitUntil(lambda: view.link.pinned == session.pinned, timeout=10000)
        target = export.pair_view_target(view, session)
        scene = target.figure(1)
        _check_scene_is_the_screen(view, scene, session)
        svgs = {k: figure_bytes(scene, "svg", k) for k in ((1, 2, 4) if state == 0 else (1,))}
        assert len({tuple(_svg_texts(svg)) for svg in svgs.values()}) == 1
        svg = svgs[1]
        for row in scene.rows:
            for pane in row.panes:
                group = _svg_group(svg, f"colorbar {row.name} {pane.side}")
                labels = [t.text for t in group.iter("{http://www.w3.org/2000/svg}text")][:-1]
                assert labels[0] == level_text(pane.overlay.levels[0])
                assert labels[-1] == level_text(pane.overlay.levels[1])
                assert (_svg_group(svg, f"pinned {row.name} {pane.side}") is not None) == (pane.point is not None)
        lines = [g for g in ET_groups(svg) if g.startswith("match A ")]
        assert len(lines) == len(scene.rows[0].matches) == (len(view.lines.matches) if d.matches else 0)
    # the files: PNG at 2x has twice the pixels; the PDF keeps text as text and maps sharp at 300 dpi
    paths = {(k, suffix): export.write_figure(scene, tmp_path / f"pair{k}{suffix}", k)
             for k in (1, 2) for suffix in (".png", ".pdf")}
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
    one, two = QImage(str(paths[1, ".png"])), QImage(str(paths[2, ".png"]))
    assert (two.width(), two.height()) == (2 * one.width(), 2 * one.height())
    pdf = pypdf.PdfReader(io.BytesIO(paths[1, ".pdf"].read_bytes()))
    text = " ".join(pdf.pages[0].extract_text().split())
    assert "Similarity (cosine)" in text and f"{view.explanation.similarity:+.4f}" in text
    page_inches = float(pdf.pages[0].mediabox.width) / 72
    widest = max(im.image.width for im in pdf.pages[0].images)
    assert widest / (page_inches * 0.45) >= 300  # a pane is under half the page wide


def ET_groups(svg: bytes) -> list[str]:
    import xml.etree.ElementTree as ET

    return [g.get("id") or "" for g in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}g")]


def test_the_group_tab_and_plots_export(ready, tmp_path, qtbot):
    group = export.group_target(ready.group_tabs, ready.pair_view)
    assert group is not None
    scene = group.figure(1)
    svg = export.write_figure(scene, tmp_path / "group.svg").read_text(encoding="utf-8")
    assert any(t.startswith("Group 1 of 4: contributes") for t in _texts(svg))
    # the tab's panes: the same levels (one scale for every group, the grid's largest cell) and colours
    for pane, screen in zip(scene.rows[0].panes, ready.group_tabs.panes):
        assert screen._colorbar_key[0] == pane.overlay.colormap == "viridis (light)"
        assert screen._colorbar_key[2:4] == pytest.approx(pane.overlay.levels, rel=1e-6)

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


def test_the_group_tab_exports_as_the_tab_draws_it(ready, tmp_path):
    """Issue 42 item 6 on screen, issue 39 in the export: the sparse group map as grid cells
    with the alpha ramp of gamma 0.5, opacity 0.85, the cells carrying 80 % of the share
    outlined and drawn at least 0.6 opaque, and the concentration line (the old export blended
    a bilinear map at 0.6 with the linear ramp, without outlines or the line)."""
    from dmlviewer.core.scene.colormaps import alpha_ramp
    from dmlviewer.core.scene.draw import cell_outline, composite, figure_bytes, overlay_colours

    tabs = ready.group_tabs
    for group in (0, tabs.group_count - 1):
        tabs.tabs.setCurrentIndex(group)
        scene = export.group_target(tabs, ready.pair_view).figure(1)
        assert tabs.share_label.text().startswith(scene.notes[0])  # share and concentration line
        assert "% of its positive share on" in scene.notes[0]
        svg = figure_bytes(scene, "svg")
        for pane, screen in zip(scene.rows[0].panes, tabs.panes):
            o = pane.overlay
            assert not o.smooth and o.opacity == pytest.approx(screen.overlay_item.opacity()) == 0.85
            assert np.array_equal(o.data, screen.overlay_item.image)  # the grid's cells, the tab's values
            assert np.array_equal(o.cells, screen.cells)
            lut, tab_lut = overlay_colours(o), screen._lut
            assert np.array_equal(lut[:, :3], tab_lut[:, :3])
            assert np.array_equal(alpha_ramp(False, 1.5, 0.5), alpha_ramp(False, o.ramp, o.gamma))
            lifted = lut[:, 3] != alpha_ramp(False, o.ramp, o.gamma)
            tab_lifted = tab_lut[:, 3] != alpha_ramp(False, o.ramp, o.gamma)
            # the same entries lifted to 0.6, but for the index of the weakest outlined cell
            # (pyqtgraph indexes a value by 256 steps, the core by 255: at most one entry apart)
            assert np.all(lut[lifted, 3] == 153) and np.all(tab_lut[tab_lifted, 3] == 153)
            assert abs(int(lifted.sum()) - int(tab_lifted.sum())) <= 1
            # every outlined cell is drawn at least 0.6 x 0.85 opaque: over a black and a white
            # photograph a pixel is c·a and 255·(1 − a) + c·a
            gh, gw, k = *o.data.shape, 4
            black, white = (composite(type(pane)(**dict(pane.__dict__, image=np.full_like(pane.image, v))),
                                      (gh * k, gw * k)).astype(float) for v in (0, 255))
            alpha = 1.0 - (white - black).mean(axis=2) / 255.0
            assert np.all(alpha[1::k, 1::k][o.cells] >= 0.6 * 0.85 - 0.01)
            assert np.all(alpha.reshape(gh, k, gw, k).std(axis=(1, 3)) < 0.01)  # a cell is one block
            # the outline: a vector path of the regions' edges on the pane
            group_svg = _svg_group(svg, f"cells A {pane.side}")
            assert group_svg is not None and o.cells.any()
            assert len(list(group_svg.iter("{http://www.w3.org/2000/svg}path"))) == \
                len(cell_outline(o.cells, pane.image.shape[:2]))
        assert export.write_figure(scene, tmp_path / f"group{group}.png").exists()


def test_the_menu_entry_writes_the_chosen_file_and_copies_it(ready, tmp_path, monkeypatch, qtbot):
    """The scene is drawn off the GUI thread, in the job queue (the window stays responsive);
    the file, its source and the clipboard are written when the job ends."""
    from PySide6.QtWidgets import QApplication

    action = next(a for a in ready.menuBar().actions()[0].menu().actions() if a.text() == "&Export View…")
    out = tmp_path / "view.png"

    def choose(dialog):
        dialog.scale.setCurrentIndex(1)  # 2x
        assert dialog.source.isEnabled()  # the pair view is a scene: its source can be written
        dialog.source.setChecked(True)
        return QDialog.Accepted

    monkeypatch.setattr(export.ExportDialog, "exec", choose)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), "PNG image (*.png)"))
    QApplication.clipboard().clear()
    # matplotlib draws in the job queue: the draw function records its thread and waits for the
    # GUI thread's event loop (a timer), which it would never get if it ran on the GUI thread
    from dmlviewer.core.scene import draw

    drawing, served = [], threading.Event()
    real = draw._draw

    def recording(*args, **kwargs):
        drawing.append(threading.get_ident())
        drawing.append(served.wait(30))
        return real(*args, **kwargs)

    monkeypatch.setattr(draw, "_draw", recording)
    QTimer.singleShot(200, served.set)
    action.trigger()
    job = _job_named(ready.runner, "Export View to view.png")
    qtbot.waitUntil(lambda: job.ended, timeout=120000)
    assert job.state == "finished" and not ready.dialogs
    assert drawing and threading.get_ident() not in drawing[0::2] and all(drawing[1::2])
    assert out.exists()
    source = np.load(tmp_path / "view.npz")  # the figure's source beside it
    assert int(source["rows"]) == 1 and (tmp_path / "view.py").exists()
    image = QImage(str(out))
    from dmlviewer.core.scene.draw import PANE_WIDTH, PNG_PPI

    assert image.width() >= 2 * (2 * PANE_WIDTH / 72 * PNG_PPI)  # two panes side by side at 2x
    assert not QApplication.clipboard().image().isNull()
    assert QApplication.clipboard().image().size() == image.size()
    # the pair view's context menu holds the same entry
    assert [a.text() for a in ready.pair_view.actions()] == ["Export View…"]


def _job_named(runner, name: str):
    found = [j for j in [*runner.jobs, *runner.history] if j.name == name]
    assert len(found) == 1, [j.name for j in [*runner.jobs, *runner.history]]
    return found[0]


def test_a_failed_export_says_so_in_one_dialog(ready, tmp_path, monkeypatch, qtbot):
    """A drawing that fails in the job (here matplotlib raising) is said once, in the window's
    dialog of a failed job, and leaves no file."""
    from dmlviewer.core.scene import draw

    def broken(*_args, **_kwargs):
        raise RuntimeError("no room for the figure")

    monkeypatch.setattr(draw, "_draw", broken)
    monkeypatch.setattr(export.ExportDialog, "exec", lambda dialog: QDialog.Accepted)
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "view.pdf"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), "PDF document (*.pdf)"))
    job = export.export_view(ready, "Pair view")
    assert job is _job_named(ready.runner, "Export View to view.pdf")
    qtbot.waitUntil(lambda: job.ended, timeout=60000)
    qtbot.wait(100)
    assert job.state == "failed" and len(ready.dialogs) == 1
    assert ready.dialogs[0][0] == "Could not export the view to view.pdf"  # the job's own words
    assert "no room for the figure" in ready.dialogs[0][1]
    assert list(out.parent.iterdir()) == []


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
    scene = export.pair_view_target(view, window.session).figure(1)
    assert len(scene.rows) == 2
    row = scene.rows[1]
    assert [p.caption.split(":")[0] for p in row.panes] == ["A − B", "A − B"]
    for pane, screen in zip(row.panes, view.rows[1].panes):
        assert pane.overlay.kind == "difference" and pane.overlay.signed
        assert pane.overlay.levels == pytest.approx(screen._colorbar_key[2:4], rel=1e-6)
        assert pane.overlay.levels[1] >= top * (1 - 1e-6)  # grid cells: at least the upsampled maps' largest
    # the drawn data is A's grid map minus B's, not B's map
    a_grid = view.rows[0].explanation.overall_grid(view.method, "query")
    b_grid = view.rows[1].explanation.overall_grid(view.method, "query")
    from dmlviewer.core.scene.levels import sign_part

    assert np.allclose(row.panes[0].overlay.data, sign_part(a_grid, view.sign) - sign_part(b_grid, view.sign))
    texts = _texts(export.write_figure(scene, tmp_path / "diff.svg").read_text(encoding="utf-8"))
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
