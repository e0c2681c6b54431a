"""Occlusion in the pair view (its Map choice and its point-to-point hover), the faithfulness of
the pair on screen (Tools menu window) and the Faithfulness tab of the Localization and
Correspondence window, each checked against the core's results."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtTest import QTest

from dmlviewer.core.explain.grid import bilinear_weights, upsample
from dmlviewer.core.explain.occlusion import OcclusionMaps, occlusion
from dmlviewer.core.progress import run_to_end
from dmlviewer.gui.pair.colormaps import overlay_lut
from dmlviewer.gui.pair.hover_link import QUERY
from dmlviewer.core.explain.hover import overlay_shape

pytestmark = pytest.mark.gui


@pytest.fixture
def loaded(window, demo_root, agroup_ckpt, wait_ready):
    assert window.open_checkpoint(agroup_ckpt)
    assert window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    return window


def _hover(pane, link, x: float, y: float):
    scene = pane.view.mapViewToScene(QPointF(x + 0.5, y + 0.5))
    QTest.mouseMove(pane.graphics.viewport(), pane.graphics.mapFromScene(scene))
    link.flush()
    return link.hover


def test_occlusion_map_and_its_point_to_point_hover(loaded, qtbot):
    view = loaded.pair_view
    view.scale_combo.setCurrentIndex(view.scale_combo.findData("pair"))  # checked on the whole pair's scale
    view.set_method("occlusion")
    qtbot.waitUntil(lambda: isinstance(view.rows[0].overall.get("occlusion"), OcclusionMaps), timeout=30000)
    # the same maps as the core computes for these two images (the core's cache holds them)
    core = run_to_end(occlusion(view.model, view.images.query, view.images.reference, "blur"))
    assert core is view.rows[0].overall["occlusion"]
    q, r = view.panes
    for pane, side in ((q, "query"), (r, "reference")):
        shape = view.explanation.image_shape_query if side == "query" else view.explanation.image_shape_reference
        want = np.maximum(upsample(core.overall_grid(side), shape), 0)
        np.testing.assert_allclose(pane.overlay_image(), want, atol=1e-7)
    # hover on the query: the reference shows the occlusion interaction row of that point
    side, x, y = _hover(q, view.link, 20.0, 30.0)
    assert side == QUERY
    expl = view.explanation
    idx, wts = bilinear_weights(x, y, expl.image_shape_query, expl.grid_query)
    row = sum(w * core.point_to_point[i] for i, w in zip(idx, wts)).reshape(expl.grid_reference)
    values = upsample(row, overlay_shape(expl.image_shape_reference))
    from dmlviewer.core.explain.hover import pair_scale

    peak = pair_scale(core.point_to_point)  # the "Whole pair" scale chosen above
    want = overlay_lut(view.cmap_combo.currentData())[np.clip(values * (255.0 / peak), 0, 255).astype(np.uint8)]
    assert np.mean(np.all(r.overlay_image() == want, axis=-1)) > 0.98
    assert "occlusion interaction" in loaded.statusBar().currentMessage()
    # another baseline recomputes; back to Decomposition, hover shows the decomposition again
    view.set_occlusion_baseline("mean")
    qtbot.waitUntil(lambda: isinstance(view.rows[0].overall.get("occlusion"), OcclusionMaps)
                    and view.rows[0].overall["occlusion"].baseline == "mean", timeout=30000)
    view.set_method("decomposition")
    _hover(r, view.link, 33.0, 12.0)
    _hover(q, view.link, 20.0, 30.0)
    assert "% of the similarity" in loaded.statusBar().currentMessage()  # the point's share, decomposition again
    assert view._hover_tensor(view.rows[0]) is expl.point_to_point


def test_pair_faithfulness_window_from_the_tools_menu(loaded, qtbot):
    action = next(a for a in loaded.tools_menu.actions() if "Faithfulness of This Pair" in a.text())
    action.trigger()
    window = loaded.tools.pair_faithfulness
    assert window is not None and window.isVisible()
    qtbot.waitUntil(lambda: window.result is not None, timeout=60000)
    result = window.result
    methods = list(result["methods"])
    assert methods[:2] == ["decomposition", "decomposition_bias"]
    assert {"occlusion", "point_to_point", "group_0", "group_3", "random", "oracle"} <= set(methods)
    assert "grad_transfer" not in methods  # needs a feature file
    deletion = window.plots.plots["deletion"].listDataItems()
    assert len(deletion) == len(methods)
    x, y = deletion[0].getData()
    np.testing.assert_allclose(y, result["methods"]["decomposition"]["deletion"])
    np.testing.assert_allclose(x, result["fractions"])
    assert window.table.rowCount() == len(methods)
    assert window.table.item(0, 1).text() == f"{result['methods']['decomposition']['deletion_auc']:.4f}"
    assert window.job.name.startswith("Faithfulness of Query ") and "<" not in window.job.name  # plain text


def test_localization_window_faithfulness_tab(runner, qtbot, demo_root, small_ckpt):
    from dmlviewer.gui.evaluation.localization_view import LocalizationView

    view = LocalizationView(runner)
    qtbot.addWidget(view)
    view.set_sources(checkpoint=str(small_ckpt), dataset=str(demo_root))
    view.set_methods(["decomposition", "gradcam"])
    view.faith_pairs.setValue(4)
    view.faith_oracle.setValue(0)
    view.faith_baseline.setCurrentText("mean")
    view.show()
    assert view.faithfulness_button.isEnabled()
    job = view.run_faithfulness()
    qtbot.waitUntil(lambda: job.ended, timeout=120000)
    assert job.state == "finished", job.error
    results = job.result
    assert [r["method"] for r in results] == ["decomposition", "gradcam", "occlusion", "point_to_point", "random"]
    assert view.tabs.currentIndex() == 1 and view.tabs.tabText(1) == "Faithfulness"
    assert view.faith_table.rowCount() == len(results)
    items = view.faith_plots.plots["insertion"].listDataItems()
    np.testing.assert_allclose(items[2].getData()[1], results[2]["insertion_curve"])
    view.faith_pairing.setCurrentIndex(1)  # different-class pairs
    items = view.faith_plots.plots["insertion"].listDataItems()
    np.testing.assert_allclose(items[2].getData()[1], results[2]["different_class"]["insertion_curve"])
    assert all(r["baseline"] == "mean" and r["num_pairs"] == 2 for r in results)


def test_faithfulness_plots_name_every_curve_in_a_legend_with_its_own_pen(qtbot):
    """Issue 23 item 10: a legend, distinct colours and line styles, names not cut off."""
    from PySide6.QtWidgets import QApplication

    from dmlviewer.gui.evaluation.faithfulness_view import REFERENCE_STYLE, AucTable, FaithfulnessPlots, method_label

    methods = ["decomposition", "decomposition_bias", "gradcam", "gradcam_nonorm", "rgradcam", "occlusion",
               "point_to_point", "group_0", "group_1", "group_2", "group_3", "random", "oracle"]
    fractions = np.linspace(0, 1, 5)
    rows = [{"method": m, "fractions": fractions, "deletion": 1 - fractions * (k + 1) / 20,
             "insertion": fractions * (k + 1) / 20, "deletion_auc": 0.5, "insertion_auc": 0.5, "num_pairs": 3}
            for k, m in enumerate(methods)]
    plots, table = FaithfulnessPlots(), AucTable()
    for w in (plots, table):
        qtbot.addWidget(w)
    plots.resize(900, 420)
    plots.show_curves(rows)
    table.show_rows(rows)
    table.resize(500, 300)
    table.show()
    QApplication.processEvents()

    labels = [method_label(m) for m in methods]
    assert labels[:3] == ["Decomposition", "Decomposition+Bias", "Grad-CAM"]
    assert labels[7:] == ["Group 1", "Group 2", "Group 3", "Group 4", "Random order (floor)", "Greedy oracle (ceiling)"]
    assert plots.legend.names() == labels  # one legend, below both plots, in the rows' order
    for kind, plot in plots.plots.items():
        assert [item.name() for item in plot.getPlotItem().listDataItems()] == labels
    pens = [plots.curves[m][0].opts["pen"] for m in methods]
    looks = [(pen.color().name(), pen.style()) for pen in pens]
    assert len(set(looks)) == len(methods)  # no two curves alike
    # no method looks like the floor or the ceiling: never dashed as they are (the oracle is white,
    # the floor grey), and a map without a colour of its own is never grey or white
    assert not {s for _, s in looks[:-2]} & {s for _, s in REFERENCE_STYLE.values()}
    reserved = {color.lower() for color, _ in REFERENCE_STYLE.values()}
    assert not {c for c, _ in looks[6:-2]} & reserved
    assert len({s for _, s in looks[:4]}) == 4  # neighbours differ in line style as well
    # the table names the methods as the legend does, in full, and selects them by key
    metrics = table.fontMetrics()
    for i, label in enumerate(labels):
        assert table.item(i, 0).text() == label and table.method_at(i) == methods[i]
        assert table.columnWidth(0) >= metrics.horizontalAdvance(label) + table.iconSize().width()
    plots.highlight("gradcam")
    assert plots.curves["gradcam"][0].opts["pen"].widthF() == 4.0
    assert plots.curves["decomposition"][0].opts["pen"].widthF() == 2.0


def test_faithfulness_curves_have_their_methods_colours(qtbot, runner):
    """A method has the same colour in every view: the faithfulness curves, the AUC table's icons
    and the localization curves take ``METHOD_COLORS``, as the sanity check does, whatever
    methods come before."""
    from PySide6.QtGui import QColor

    from dmlviewer.gui.evaluation.faithfulness_view import AucTable, FaithfulnessPlots, method_label
    from dmlviewer.gui.evaluation.localization_view import LocalizationView
    from dmlviewer.gui.common.widgets import METHOD_COLORS

    fractions = np.linspace(0, 1, 5)
    point_to_point = set()  # its colour in each plot: one, whatever other methods are drawn
    for methods in (["gradcam", "occlusion", "random", "point_to_point"],
                    ["point_to_point", "rgradcam", "decomposition", "gradcam", "oracle"]):
        rows = [{"method": m, "fractions": fractions, "deletion": 1 - fractions, "insertion": fractions,
                 "deletion_auc": 0.5, "insertion_auc": 0.5, "num_pairs": 1} for m in methods]
        plots, table = FaithfulnessPlots(), AucTable()
        for w in (plots, table):
            qtbot.addWidget(w)
        plots.show_curves(rows)
        table.show_rows(rows)
        for i, method in enumerate(methods):
            if method not in METHOD_COLORS:
                continue
            expected = QColor(METHOD_COLORS[method]).name()
            for kind, plot in plots.plots.items():  # read back from the plot's items, in the rows' order
                item = plot.getPlotItem().listDataItems()[i]
                if method == "point_to_point":
                    point_to_point.add(item.opts["pen"].color().name())
                assert item.name() == method_label(method)
                assert item.opts["pen"].color().name() == expected, (kind, method)
            icon = table.item(i, 0).icon().pixmap(34, 12).toImage()
            line = {icon.pixelColor(x, 6).name() for x in range(2, 32)}  # the icon's line sample (dashed or not)
            assert expected in line, method
    assert len(point_to_point) == 1

    view = LocalizationView(runner)
    qtbot.addWidget(view)
    view.show_localization([{"method": m, "pairing": "same", "thresholds": [0.1, 0.5], "accuracy": [0.2, 0.4],
                             "best_threshold": 0.5, "best_accuracy": 0.4, "num_images": 3}
                            for m in ("rgradcam", "decomposition")])
    curves = [c for c in view.plot.getPlotItem().listDataItems() if c.name()]  # not the best points' stars
    assert [c.opts["pen"].color().name() for c in curves] == [
        QColor(METHOD_COLORS[m]).name() for m in ("rgradcam", "decomposition")]
    drawn = [plot.getPlotItem().listDataItems() for plot in plots.plots.values()][0]  # the last rows' plot
    styles = {item.name(): item.opts["pen"].style() for item in drawn}
    assert [c.opts["pen"].style() for c in curves] == [styles[method_label(m)] for m in ("rgradcam", "decomposition")]
    # part correspondence: the partial map (point-to-point) and the overall (Decomposition) map
    view.show_correspondence({"partial_map_accuracy": 0.7, "overall_map_accuracy": 0.3, "num_pairs": 2,
                              "num_parts": 6, "chance_accuracy": 0.02})
    import pyqtgraph as pg

    bars = next(item for item in view.bar_plot.getPlotItem().items if isinstance(item, pg.BarGraphItem))
    assert [b.color().name() for b in bars.opts["brushes"]] == [
        QColor(METHOD_COLORS[m]).name() for m in ("point_to_point", "decomposition")]


def test_no_two_faithfulness_curves_look_alike_and_groups_take_point_to_points_colour():
    """Every method and group of a four-group model with every reference order: no two pens
    share colour and line style (Group 4 was point-to-point's solid sky blue); the groups are
    drawn in point-to-point's colour while it has styles to spare."""
    from dmlviewer.gui.evaluation.faithfulness_view import method_pens
    from dmlviewer.gui.common.widgets import METHOD_COLORS

    methods = [*METHOD_COLORS, "group_0", "group_1", "group_2", "group_3", "random", "oracle"]
    pens = method_pens(methods)
    looks = [(pen.color().name(), pen.style()) for pen in pens.values()]
    assert list(pens) == methods and len(set(looks)) == len(looks)
    sky = METHOD_COLORS["point_to_point"].lower()
    assert [pens[f"group_{g}"].color().name() for g in range(3)] == [sky] * 3
    few = method_pens(["gradcam", "point_to_point", "group_0", "group_1"])
    assert len({(p.color().name(), p.style()) for p in few.values()}) == 4
    for method in ("gradcam", "point_to_point"):  # the same look whatever else is drawn
        assert (few[method].color(), few[method].style()) == (pens[method].color(), pens[method].style())
