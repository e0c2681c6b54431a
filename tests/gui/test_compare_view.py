"""Two models in the pair view (issue 24 item 3): File > Compare With Model, both rows' partial
maps driven by real mouse events, the difference view, Stop Comparing, and jobs of two models.

Expected maps are computed from each model's own explanation (``PairExplanation.partial_map``
and ``overall``), colour-mapped by a plain reference implementation, independently of the
renderers the view uses.
"""

from __future__ import annotations

import numpy as np
import pytest

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from _mouse import hover, viewport_pos
from _paints import PaintLog

from dmlviewer.gui.pair.colormaps import overlay_lut
from dmlviewer.gui.pair.hover_link import QUERY, REFERENCE
from dmlviewer.core.explain.hover import overlay_shape

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def other_ckpt(tmp_path_factory):
    """A second small_cnn checkpoint: small_ckpt's architecture (conftest) with other random
    weights (seed 1)."""
    import torch

    from dmlviewer.core.models import build_model, default_config, save_checkpoint

    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("ckpt-b") / "other.pt"
    save_checkpoint(path, build_model(default_config(backbone="small_cnn", dim=32, image_size=64)))
    return path


def wait_compare(qtbot, view, timeout: int = 30000) -> None:
    qtbot.waitUntil(lambda: view.state in ("ready", "failed") and view.rows[1].state in ("ready", "failed"),
                    timeout=timeout)
    assert view.state == "ready" and view.rows[1].state == "ready"


@pytest.fixture
def compared(window, demo_root, small_ckpt, other_ckpt, wait_ready, qtbot):
    """A window with small_ckpt as model A and other_ckpt as model B on the demo data."""
    assert window.open_checkpoint(small_ckpt)
    assert window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    window.open_compare(other_ckpt)  # in the background, as the menu does
    qtbot.waitUntil(lambda: window.session.slot("compare") is not None, timeout=30000)
    wait_compare(qtbot, window.pair_view)
    return window


def colour(values: np.ndarray, scale: float, lut: np.ndarray, signed: bool = False) -> np.ndarray:
    """Reference colour mapping: ``[0, s]`` (or ``[-s, s]``) onto the 256-entry table."""
    index = (values * (127.5 / scale) + 127.5) if signed else values * (255.0 / scale)
    return lut[np.clip(index, 0, 255).astype(np.uint8)]


def expected_partial(expl, side: str, x: float, y: float, lut: np.ndarray) -> np.ndarray:
    """The "each map" overlay of ``expl``'s partial map at (x, y) (positive sign)."""
    other = expl.image_shape_reference if side == "query" else expl.image_shape_query
    values = expl.partial_map_image(side, x, y, overlay_shape(other))
    peak = float(expl.partial_map(side, x, y).max())
    return colour(values, peak if peak > 0 else 1.0, lut)


def agree(a: np.ndarray, b: np.ndarray) -> float:
    """Share of pixels of the same colour (a pixel on a bin edge may round to the next one)."""
    return float(np.mean(np.all(a == b, axis=-1)))


def test_compare_opens_a_second_row_and_names_both_models(compared, small_ckpt, other_ckpt):
    window, view = compared, compared.pair_view
    assert len(view.rows) == 2 and all(pane.isVisible() for pane in view.rows[1].panes) and view.compare_controls.isVisible()
    assert window.compare_label.isVisible()
    # named by run folder and file (issue 31 item 1); the backbone both have tells them not apart
    name_a, name_b = f"{small_ckpt.parent.name}/small.pt", f"{other_ckpt.parent.name}/other.pt"
    assert window.model_label.text() == f"A: {name_a}" and window.compare_label.text() == f"B: {name_b}"
    # two labels share the bar: the names; the rule and the architecture are in the tooltip (the
    # pair view says each model's rule under the images)
    assert "decomposition: " in window.compare_label.toolTip() and "small_cnn" in window.compare_label.toolTip()
    assert str(other_ckpt) in window.compare_label.toolTip()  # the whole path
    assert f"A: {name_a} vs B: {name_b}" in window.windowTitle()
    a, b = view.explanation.similarity, view.rows[1].explanation.similarity
    assert f"{a:+.4f}" in view.info.text() and f"{b:+.4f}" in view.info.text()
    assert window.similarity_label.text() == f"A {a:+.4f} · B {b:+.4f}"
    # row B shows row A's images: its captions name the model and the role; the tooltip has the rest
    for top, bottom, role in zip(view.panes, view.rows[1].panes, ("Query", "Reference")):
        file = top.title.text().split(" · ")[-1]  # "file.jpg #index", A's caption's last part
        assert f"<b>B</b> {name_b} · " in bottom.title.text()
        assert role in bottom.title.text()
        assert file not in bottom.title.text() and file in bottom.title.toolTip()
    # The second row shows model B's overall maps (positive sign, each pane its own scale).
    for pane, side in zip(view.rows[1].panes, ("query", "reference")):
        np.testing.assert_allclose(pane.overlay_image(), view.rows[1].explanation.overall("decomposition", side,
                                                                                          "positive"), atol=1e-6)
    assert window.compare.stop_action.isEnabled()


def test_hover_on_either_query_drives_both_models_partial_maps(compared):
    view = compared.pair_view
    (qa, ra), (qb, rb) = view.panes, view.rows[1].panes
    ea, eb = view.explanation, view.rows[1].explanation
    lut = overlay_lut(view.cmap_combo.currentData())

    side, x, y = hover(qa, view.link, 20.0, 41.0)  # a real mouse move on model A's query
    assert side == QUERY
    first_a, first_b = ra.overlay_image().copy(), rb.overlay_image().copy()
    assert agree(first_a, expected_partial(ea, "query", x, y, lut)) > 0.98
    assert agree(first_b, expected_partial(eb, "query", x, y, lut)) > 0.98
    assert not np.array_equal(first_a, first_b)  # two models, two maps
    assert qa.crosshair is not None and qb.crosshair is not None  # the crosshair on both queries

    side, x2, y2 = hover(qb, view.link, 50.0, 10.0)  # now on model B's query: A's row follows
    assert side == QUERY
    second_a, second_b = ra.overlay_image().copy(), rb.overlay_image().copy()
    assert not np.array_equal(first_a, second_a) and not np.array_equal(first_b, second_b)
    assert agree(second_a, expected_partial(ea, "query", x2, y2, lut)) > 0.98
    assert agree(second_b, expected_partial(eb, "query", x2, y2, lut)) > 0.98
    assert "B’s similarity" in rb.readout.text()

    side, x3, y3 = hover(rb, view.link, 30.0, 30.0)  # the reference side drives both queries
    assert side == REFERENCE
    assert agree(qa.overlay_image(), expected_partial(ea, "reference", x3, y3, lut)) > 0.98
    assert agree(qb.overlay_image(), expected_partial(eb, "reference", x3, y3, lut)) > 0.98


def test_shared_scale_colours_both_rows_by_the_larger_maximum(compared):
    view = compared.pair_view
    view.shared_scale_box.setChecked(True)
    ea, eb = view.explanation, view.rows[1].explanation
    lut = overlay_lut(view.cmap_combo.currentData())
    _, x, y = hover(view.panes[QUERY], view.link, 33.0, 20.0)
    peak = max(float(ea.partial_map("query", x, y).max()), float(eb.partial_map("query", x, y).max()))
    for pane, expl in ((view.panes[REFERENCE], ea), (view.rows[1].panes[REFERENCE], eb)):
        values = expl.partial_map_image("query", x, y, overlay_shape(expl.image_shape_reference))
        assert agree(pane.overlay_image(), colour(values, peak, lut)) > 0.98
    # Overall maps: one level range for A's and B's map of the same image.
    view.link._left(QUERY)
    levels = [p.overlay_item.levels for p in (view.panes[QUERY], view.rows[1].panes[QUERY])]
    np.testing.assert_allclose(levels[0], levels[1])


def test_difference_view_is_a_minus_b(compared):
    view = compared.pair_view
    view.compare_view_combo.setCurrentIndex(view.compare_view_combo.findData("difference"))
    assert view.difference
    ea, eb = view.explanation, view.rows[1].explanation
    for pane, side in zip(view.rows[1].panes, ("query", "reference")):
        want = ea.overall("decomposition", side, "positive") - eb.overall("decomposition", side, "positive")
        np.testing.assert_allclose(pane.overlay_image(), want, atol=1e-6)
        low, high = pane.overlay_item.levels
        assert low == pytest.approx(-high) and high > 0  # one symmetric scale
    assert "A − B" in view.rows[1].panes[QUERY].title.text()

    _, x, y = hover(view.panes[QUERY], view.link, 40.0, 25.0)
    diff = ea.partial_map("query", x, y) - eb.partial_map("query", x, y)
    renderer = view.rows[1].link.renderers[QUERY]
    np.testing.assert_allclose(renderer.grid_map(x, y), diff, atol=1e-6)
    values = eb.partial_map_image("query", x, y, overlay_shape(eb.image_shape_reference))
    values = ea.partial_map_image("query", x, y, overlay_shape(ea.image_shape_reference)) - values
    want = colour(values, float(np.abs(diff).max()), overlay_lut(view.cmap_combo.currentData(), True), signed=True)
    assert agree(view.rows[1].panes[REFERENCE].overlay_image(), want) > 0.98


def test_a_model_compared_with_itself_gives_a_zero_difference(window, demo_root, small_ckpt, wait_ready, qtbot):
    assert window.open_checkpoint(small_ckpt)
    assert window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    window.open_compare(small_ckpt)
    qtbot.waitUntil(lambda: window.session.slot("compare") is not None, timeout=30000)
    view = window.pair_view
    wait_compare(qtbot, view)
    view.compare_view_combo.setCurrentIndex(view.compare_view_combo.findData("difference"))
    for diff in view.difference_maps().values():
        assert np.all(diff == 0)
    _, x, y = hover(view.panes[QUERY], view.link, 20.0, 20.0)
    assert np.all(view.rows[1].link.renderers[QUERY].grid_map(x, y) == 0)
    assert view.rows[1].similarity == pytest.approx(view.explanation.similarity, abs=1e-6)
    # Two slots with the same file: their jobs still read differently.
    assert window.labels.job_name("primary") != window.labels.job_name("compare")


def test_both_rows_are_drawn_in_one_view_per_side_and_a_hover_paints_each_side_once(compared, qtbot):
    """Issue 40: the query's panes of A and B share one graphics view, the references' another,
    so a real mouse move that draws both rows' partial maps and crosshairs paints each side's
    viewport once, not once per row."""
    from PySide6.QtWidgets import QApplication

    view = compared.pair_view
    (qa, ra), (qb, rb) = (row.panes for row in view.rows)
    assert qa.graphics is qb.graphics and ra.graphics is rb.graphics and qa.graphics is not ra.graphics
    assert qa.view.sceneBoundingRect().bottom() <= qb.view.sceneBoundingRect().top()  # B under A

    hover(qa, view.link, 20.0, 30.0)
    for _ in range(5):  # everything the first point left to lay out and paint
        QApplication.processEvents()
    first = (ra.overlay_image().copy(), rb.overlay_image().copy())
    logs = [PaintLog(side.viewport()) for side in view.sides.columns]
    hover(qa, view.link, 40.0, 12.0)
    QApplication.processEvents()
    assert [len(log.regions) for log in logs] == [1, 1]
    assert qa.crosshair is not None and qb.crosshair is not None  # both rows drawn in that one paint
    assert not np.array_equal(first[0], ra.overlay_image()) and not np.array_equal(first[1], rb.overlay_image())


def test_stop_comparing_returns_to_one_row(compared):
    window, view = compared, compared.pair_view
    row_b = view.rows[1]
    window.compare.stop_action.trigger()
    assert window.session.slot("compare") is None
    assert len(view.rows) == 1 and not any(pane.isVisible() for pane in row_b.panes) and not view.compare_controls.isVisible()
    assert not window.compare_label.isVisible() and not window.compare.stop_action.isEnabled()
    assert "vs B" not in window.windowTitle() and not window.model_label.text().startswith("A:")
    assert window.similarity_label.text().startswith("similarity +") or window.similarity_label.text().startswith(
        "similarity -")
    before = row_b.panes[REFERENCE].overlay_image()
    hover(view.panes[QUERY], view.link, 20.0, 41.0)
    assert view.panes[REFERENCE].overlay_image().ndim == 3  # A's partial map as before
    assert row_b.panes[REFERENCE].overlay_image() is before or not row_b.panes[REFERENCE].isVisible()


def test_a_compare_model_that_cannot_be_opened_is_a_dialog(compared, tmp_path, qtbot):
    window = compared
    bad = tmp_path / "broken.pt"
    bad.write_bytes(b"not a checkpoint")
    window.open_compare(bad)
    qtbot.waitUntil(lambda: bool(window.dialogs), timeout=30000)
    title, message, _ = window.dialogs[-1]
    assert title.startswith("Cannot compare with") and "\n" not in message
    assert window.session.slot("compare") is not None  # model B as it was


def test_compare_models_window_lists_pairs_and_opens_one(compared, small_ckpt, qtbot):
    window = compared
    tool = window.show_compare_window()
    assert tool.run_button.isEnabled()
    tool.pairs_spin.setValue(4)
    tool.start()
    assert f"A ({small_ckpt.parent.name}/small.pt)" in tool.job.name and "/other.pt)" in tool.job.name
    qtbot.waitUntil(lambda: tool.job.ended, timeout=120000)
    qtbot.waitUntil(lambda: tool.result is not None, timeout=5000)
    rows = tool.result["pairs"]
    assert tool.table.rowCount() == len(rows) > 0
    disagreement = [row["disagreement"] for row in rows]
    assert disagreement == sorted(disagreement, reverse=True)  # most disagreeing first
    pick = rows[-1]
    tool.table.cellClicked.emit(len(rows) - 1, 1)
    assert (window.query_index, window.reference_index) == (pick["query"], pick["reference"])
    # The similarities listed are each model's own for that pair.
    view = window.pair_view
    wait_compare(qtbot, view)
    assert pick["similarity"][0] == pytest.approx(view.explanation.similarity, abs=1e-4)
    assert pick["similarity"][1] == pytest.approx(view.rows[1].similarity, abs=1e-4)


def test_a_comparison_of_a_replaced_compare_model_is_dropped(compared, small_ckpt, qtbot):
    window = compared
    tool = window.show_compare_window()
    tool.pairs_spin.setValue(2)
    tool.start()
    job = tool.job
    window.open_compare(small_ckpt)  # model B replaced while the job runs
    qtbot.waitUntil(lambda: window.session.slot("compare").source.display() == "small.pt", timeout=30000)
    qtbot.waitUntil(lambda: job.ended, timeout=120000)
    qtbot.waitUntil(lambda: "dropped" in tool.status.text() or tool.result is not None, timeout=5000)
    assert tool.result is None and tool.table.rowCount() == 0
    assert "dropped" in tool.status.text()


def test_model_b_gets_the_grad_cam_maps_and_says_which_maps_are_a_only(compared, qtbot):
    view = compared.pair_view
    view.set_method("gradcam")
    qtbot.waitUntil(lambda: view.rows[1].overall.get("gradcam") is True and view.rows[0].overall.get("gradcam") is True,
                    timeout=30000)
    for pane, side in zip(view.rows[1].panes, ("query", "reference")):
        np.testing.assert_allclose(pane.overlay_image(),
                                   view.rows[1].explanation.overall("gradcam", side, "positive"), atol=1e-6)
    view.set_method("grad_transfer")  # needs A's Grad-CAM weights bank: shown for A only
    message = view.rows[1].panes[QUERY].message
    assert not message.isHidden() and "model A only" in message.text()
    assert view.rows[1].panes[QUERY].overlay_image() is None
    hover(view.panes[QUERY], view.link, 20.0, 20.0)
    assert view.rows[1].panes[REFERENCE].overlay_image() is None  # no B map under a note saying A only


def test_two_rows_fit_1366x768(compared, qtbot):
    window, view = compared, compared.pair_view
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366, timeout=5000)
    qtbot.wait(200)  # the docks give way (gui/window/dock_layout.py), then the splitters settle
    assert window.frameGeometry().height() <= 768 + 40 and window.width() <= 1366
    for pane in view.all_panes:  # each photograph's area stays usable (about 310 x 250 px measured)
        width, height = pane.view.width(), pane.view.height()
        assert width >= 200 and height >= 200, (pane.title.text(), width, height)
        # the colour bar's title lies along the bar, whole or elided, never cut off by the pane's edge
        axis = pane.colorbar.axis
        label, length = axis.label, axis.geometry().height()
        bottom, extent = label.pos().y(), label.boundingRect().width()  # drawn upwards from its position
        assert 0 <= bottom - extent and bottom <= length, (axis.labelText, bottom, extent, length)
        assert pane.colorbar.toolTip() in ("similarity share per cell", "fraction of this map's maximum")
        # a new title (another map, another scale) is centred on the bar too, not only after a resize
        pane.set_colorbar("jet", False, (0.0, 1.0), "share")
        bottom, extent = label.pos().y(), label.boundingRect().width()
        assert abs((bottom - extent / 2) - length / 2) <= 2, (bottom, extent, length)
    # both similarities read in full in a crowded status bar (long names, a hover message): the
    # names give way
    window.dataset_label.setText("demo-data (cub): 800 images, 20 classes")
    window.model_label.setText("A: demo_checkpoint.pt · exact decomposition")
    window.compare_label.setText("B: imagenet:efficientnet_lite0 · exact decomposition")
    window.statusBar().showMessage("query (20, 92): this position explains 12.3 % of the similarity [pinned, "
                                   "Esc to release]")
    qtbot.wait(50)
    label = window.similarity_label
    assert label.text().startswith("A +") and " · B " in label.text()
    assert label.contentsRect().width() >= label.fontMetrics().horizontalAdvance(label.text()), label.width()


def test_difference_renderer_brings_two_grids_onto_one():
    """Models with other feature grids (another backbone or stride): A − B on the larger grid,
    each map resized as ``agreement.common_grid`` does, then coloured on [-s, s]."""
    import cv2

    from dmlviewer.core.explain.agreement import common_grid
    from dmlviewer.core.explain.hover import DifferenceRenderer, HoverRenderer, colormap_lut

    rng = np.random.default_rng(0)
    shape, out = (60, 80), (30, 40)
    a = HoverRenderer(rng.normal(size=(16, 12)).astype(np.float32), shape, (4, 4), out, (3, 4), signed=True)
    b = HoverRenderer(rng.normal(size=(4, 30)).astype(np.float32), shape, (2, 2), out, (5, 6), signed=True)
    lut = colormap_lut("jet")
    diff = DifferenceRenderer(a, b, lut=lut)
    for x, y in ((10.0, 5.0), (70.5, 44.0)):
        ga, gb = common_grid(a.grid_map(x, y).copy(), b.grid_map(x, y).copy())
        want = ga - gb
        got = diff.grid_map(x, y)
        assert got.shape == (5, 6)
        np.testing.assert_allclose(got, want, atol=1e-5)
        rgba = diff.render(x, y)
        s = float(np.abs(want).max())
        assert diff.last_scale == pytest.approx(s, rel=1e-5)
        up = cv2.resize(want * (127.5 / s) + 127.5, (out[1], out[0]), interpolation=cv2.INTER_LINEAR)
        assert agree(rgba, lut[np.clip(up, 0, 255).astype(np.uint8)]) > 0.98
    with pytest.raises(ValueError):
        DifferenceRenderer(a, HoverRenderer(np.zeros((4, 4), np.float32), (10, 10), (2, 2), out, (2, 2)))


def test_hover_benchmark_with_two_models_draws_both_rows(qapp):
    from dmlviewer.bench.hover import measure

    result = measure(events=40, image_size=64, warmup=5, compare=True)
    assert result["models"] == 2 and result["sent"] == 40 and result["events"] >= 35
    assert 0 < result["p50_ms"] <= result["p95_ms"]


def test_only_the_latest_model_b_asked_for_is_shown(compared, small_ckpt, other_ckpt, qtbot, caplog):
    """Two File > Compare With Model requests in a row: the first one's model, whenever it is
    read, never replaces the second; Stop Comparing drops a model B still loading."""
    import logging

    caplog.set_level(logging.INFO, logger="dmlviewer.gui.doors.compare_model")
    window = compared

    def dropped() -> int:
        return sum("dropped model B other.pt" in r.getMessage() for r in caplog.records)

    window.open_compare(other_ckpt)
    window.open_compare(small_ckpt)
    qtbot.waitUntil(lambda: dropped() == 1 and window.session.slot("compare").source.display() == "small.pt",
                    timeout=30000)
    window.open_compare(other_ckpt)
    window.stop_comparing()
    qtbot.waitUntil(lambda: dropped() == 2, timeout=30000)
    assert window.session.slot("compare") is None


def test_a_model_b_with_another_grid_compares_on_the_common_grid(window, demo_root, small_ckpt, tmp_path,
                                                                  wait_ready, qtbot):
    """Model B at another input size (a finer feature grid): both rows hover, and the
    difference is taken on the larger grid."""
    import torch

    from dmlviewer.core.explain.agreement import common_grid
    from dmlviewer.core.models import build_model, default_config, save_checkpoint

    torch.manual_seed(2)
    finer = tmp_path / "finer.pt"
    save_checkpoint(finer, build_model(default_config(backbone="small_cnn", dim=32, image_size=128)))
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    window.open_compare(finer)
    qtbot.waitUntil(lambda: window.session.slot("compare") is not None, timeout=30000)
    view = window.pair_view
    wait_compare(qtbot, view)
    ea, eb = view.explanation, view.rows[1].explanation
    assert tuple(eb.grid_reference) != tuple(ea.grid_reference)
    view.compare_view_combo.setCurrentIndex(view.compare_view_combo.findData("difference"))
    _, x, y = hover(view.panes[QUERY], view.link, 30.0, 12.0)
    a, b = common_grid(ea.partial_map("query", x, y), eb.partial_map("query", x, y))
    np.testing.assert_allclose(view.rows[1].link.renderers[QUERY].grid_map(x, y), a - b, atol=1e-5)
    assert view.rows[1].panes[REFERENCE].overlay_image().shape == (*overlay_shape(ea.image_shape_reference), 4)


@pytest.fixture
def diagnosed(compared, qtbot):
    """The Compare Models window of ``compared`` after a comparison on both splits (4 pairs)."""
    tool = compared.show_compare_window()
    assert tool.split_combo.currentData() == "both"  # the diagnosis is the default
    tool.pairs_spin.setValue(4)
    tool.start()
    qtbot.waitUntil(lambda: tool.job.ended, timeout=120000)
    qtbot.waitUntil(lambda: tool.result is not None, timeout=5000)
    return tool


def test_compare_window_diagnosis_table_shows_each_split_of_each_model(diagnosed):
    """Train and test Recall@1 and training-split localization of both models, each from its
    own split's figures, the larger of each column in bold, and the verdict line names the
    models that training localization and test Recall@1 rank first."""
    tool = diagnosed
    table, models = tool.diagnosis_table, tool.result["models"]
    assert table.rowCount() == 2 and [m["name"] for m in models] == ["A", "B"]
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    for r, model in enumerate(models):
        train, test = model["by_split"]["train"], model["by_split"]["test"]
        expected = {"Recall@1 train": train["recall@1"], "Recall@1 test": test["recall@1"],
                    "Localization train (Decomposition)": train["localization"]["decomposition"]["best_accuracy"],
                    "Localization train (Decomposition+Bias)":
                        train["localization"]["decomposition_bias"]["best_accuracy"],
                    "MAP@R test": test["map@r"]}
        assert train["recall@1"] != test["recall@1"] or train["map@r"] != test["map@r"]  # two splits, not one twice
        for title, value in expected.items():
            assert table.item(r, headers.index(title)).text() == f"{value:.3f}"
    for title in ("Recall@1 test", "Localization train (Decomposition)"):
        c = headers.index(title)
        values = [float(table.item(r, c).text()) for r in range(2)]
        bold = [table.item(r, c).font().bold() for r in range(2)]
        if values[0] != values[1]:
            assert bold == [values[0] > values[1], values[1] > values[0]]
    c_test, c_loc = headers.index("Recall@1 test"), headers.index("Localization train (Decomposition)")
    first = {c: "AB"[[table.item(r, c).font().bold() for r in range(2)].index(True)]
             for c in (c_test, c_loc) if any(table.item(r, c).font().bold() for r in range(2))}
    note = tool.diagnosis_note.text()
    if len(first) == 2:
        assert f"ranks model {first[c_loc]} first" in note and f"Recall@1 ranks model {first[c_test]} first" in note
        assert ("does not agree" in note) == (first[c_loc] != first[c_test])


def test_compare_window_lists_retrieval_disagreements_and_opens_them(diagnosed):
    """Every query where exactly one model's nearest neighbour is of its class is listed; a row
    opens the query with the wrong model's neighbour (another class), a 'Nearest B' cell with
    model B's neighbour."""
    tool = diagnosed
    window, dataset = tool.window_, tool.window_.session.dataset
    entries = tool.result["retrieval_disagreements"]
    table = tool.retrieval_table
    assert table.rowCount() == len(entries) > 0
    assert tool.lists.tabText(1) == f"Retrieval disagreements ({len(entries)})"
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    for r, entry in enumerate(entries):
        rights = {table.item(r, headers.index(title)).text() for title in ("A right", "B right")}
        assert rights == {"yes", "no"}
    entry = entries[0]
    query = entry["index"]
    table.cellClicked.emit(0, headers.index("Query"))
    assert window.query_index == query
    assert dataset.labels[window.reference_index] != dataset.labels[query]  # the wrong model's neighbour
    table.cellClicked.emit(0, headers.index("Nearest B"))
    assert (window.query_index, window.reference_index) == (query, entry["nearest"][1])


def test_compare_window_sanity_check_curve(compared, qtbot):
    """The randomization check of model B runs as a job; the curve of each method starts at 1
    (the trained model) and then follows the check's mean Spearman per depth, one pen and one
    legend entry per method."""
    tool = compared.show_compare_window()
    tool.split_combo.setCurrentIndex(tool.split_combo.findData("test"))
    tool.check_model_combo.setCurrentIndex(tool.check_model_combo.findData("compare"))
    tool.check_pairs_spin.setValue(2)
    tool.check_depths_spin.setValue(3)
    assert tool.check_button.isEnabled()
    tool.start_check()
    assert "/other.pt)" in tool.check_job.name and tool.check_job.name.count(" and ") == 0
    qtbot.waitUntil(lambda: tool.check_job.ended, timeout=180000)
    qtbot.waitUntil(lambda: tool.check_result is not None, timeout=5000)
    result = tool.check_result
    depths, methods = result["depths"], result["methods"]
    assert 1 <= len(depths) <= 3 and result["num_pairs"] == 2
    curves = tool.check_plot.listDataItems()
    assert len(curves) == len(methods)
    pens = set()
    for curve, method in zip(curves, methods):
        xs, ys = curve.getData()
        assert list(xs) == list(range(len(depths) + 1)) and ys[0] == 1.0
        np.testing.assert_allclose(ys[1:], [d["methods"][method]["overall_map_spearman"]["mean"] for d in depths])
        pens.add((curve.opts["pen"].color().name(), curve.opts["pen"].style().value))
    assert len(pens) == len(methods)
    decomposition = curves[methods.index("decomposition")].getData()[1]
    assert decomposition[-1] < 0.99  # a re-initialized model's maps are not the trained model's
    legend = [label.text for _, label in tool.check_legend.items]
    assert "Decomposition" in legend and len(legend) == len(methods)


def test_compare_window_fits_1366x768(diagnosed, qtbot):
    tool = diagnosed
    tool.resize(1366, 768)
    tool.show()
    qtbot.waitExposed(tool)
    hint = tool.minimumSizeHint()
    assert hint.width() <= 1366 and hint.height() <= 768
    assert tool.table.height() >= 150 and tool.check_plot.height() >= 150


def test_diagnosis_figures_of_one_split_leave_the_other_empty_and_leaders_rank_each_column():
    from dmlviewer.gui.evaluation.compare_window import diagnosis_figures, leaders

    loc = {"decomposition": {"best_accuracy": 0.4}, "decomposition_bias": {"best_accuracy": 0.3}}
    result = {"split": "test", "models": [
        {"name": "A", "recall@1": 0.7, "map@r": 0.2, "localization": loc},
        {"name": "B", "recall@1": 0.6, "map@r": 0.2, "localization": None}]}
    rows = diagnosis_figures(result)
    assert [name for name, _ in rows] == ["A", "B"]
    assert rows[0][1]["Recall@1 test"] == 0.7 and rows[0][1]["Recall@1 train"] is None
    assert rows[0][1]["Localization train (Decomposition)"] is None  # a test-split localization is not the diagnosis
    first = leaders(rows)
    assert first["Recall@1 test"] == "A" and first["MAP@R test"] == "tie" and first["Recall@1 train"] is None
    both = {"split": "both", "models": [
        {"name": "A", "by_split": {"train": {"recall@1": 0.9, "localization": loc}, "test": {"recall@1": 0.5}}},
        {"name": "B", "by_split": {"train": {"recall@1": 0.8, "localization": {
            "decomposition": {"best_accuracy": 0.6}}}, "test": {"recall@1": 0.55}}}]}
    first = leaders(diagnosis_figures(both))
    assert first["Localization train (Decomposition)"] == "B" and first["Recall@1 test"] == "B"
    assert first["Recall@1 train"] == "A" and first["Localization train (Decomposition+Bias)"] is None


def test_sanity_check_ticks_name_a_two_branch_models_layers_without_the_branch_suffix():
    from dmlviewer.gui.evaluation.compare_window import tick_label

    assert tick_label({"label": "backbone.net.stages.3 (both branches)"}) == "+ stage 4"
    assert tick_label({"label": "head.projection.out (both branches)"}) == "+ head"
    assert tick_label({"label": "backbone.net.stages.1 .. backbone.net.stages.0"}) == "+ stage 2"


def test_a_point_pinned_before_model_b_opens_is_starred_on_both_rows_and_the_status_names_each_model(
        window, demo_root, small_ckpt, other_ckpt, wait_ready, qtbot):
    """Issue 42 item 5: in compare mode the pinned star was drawn on row A's query only (row B,
    opened after the pin, never got it), and the status line "+22.49 % of the similarity" did
    not say which model's. Now the star is on both queries and the line gives each model's share."""
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    view = window.pair_view
    wait_ready(view)
    qa, ra = view.panes
    QTest.mouseClick(qa.graphics.viewport(), Qt.LeftButton, Qt.NoModifier, viewport_pos(qa, 20.0, 41.0))
    qtbot.waitUntil(lambda: view.link.pinned is not None, timeout=2000)
    side, x, y = view.link.pinned
    messages: list[str] = []
    view.status_message.connect(messages.append)
    window.open_compare(other_ckpt)
    qtbot.waitUntil(lambda: window.session.slot("compare") is not None, timeout=30000)
    wait_compare(qtbot, view)
    qb, rb = view.rows[1].panes
    assert qa.pin is not None and qb.pin is not None  # the star on both queries
    assert ra.pin is None and rb.pin is None
    lut = overlay_lut(view.cmap_combo.currentData())
    assert agree(rb.overlay_image(), expected_partial(view.rows[1].explanation, "query", x, y, lut)) > 0.98
    ea, eb = view.explanation, view.rows[1].explanation
    want = (f"A {100.0 * ea.share('query', x, y):+.2f}%, B {100.0 * eb.share('query', x, y):+.2f}% "
            "of each model's similarity")
    # the status line keeps its pace (at most one every STATUS_INTERVAL_MS): the newest comes last
    qtbot.waitUntil(lambda: bool(messages) and want in messages[-1], timeout=2000)
    assert "[pinned" in messages[-1]


def test_compare_window_what_changed_lists_broken_and_fixed_and_opens_them(compared, qtbot):
    """The "What changed" tab runs the change table of the open models as a job and lists every
    broken and fixed query; a mouse click on a row opens the query with A's top-1 on row A and
    B's on row B, on the "Top-1 A" cell with model A's top-1 on both rows."""
    from PySide6.QtCore import Qt

    from dmlviewer.core.evaluate.changes import compare_models_changes
    from dmlviewer.core.progress import run_to_end

    window = compared
    tool = window.show_compare_window()
    panel = tool.changes
    tool.lists.setCurrentWidget(panel)
    assert panel.run_button.isEnabled()
    qtbot.mouseClick(panel.run_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: panel.job is not None and panel.job.ended, timeout=120000)
    qtbot.waitUntil(lambda: panel.result is not None, timeout=5000)
    session = window.session
    a, b = session.slot("primary"), session.slot("compare")
    expected = run_to_end(compare_models_changes([("A", a.model, "", None), ("B", b.model, "", None)],
                                                 session.dataset, "test", num_workers=0))
    result = panel.result
    assert {k: result[k] for k in ("both_right", "a_only", "b_only", "both_wrong")} == {
        k: expected[k] for k in ("both_right", "a_only", "b_only", "both_wrong")}
    entries = [("broken", e) for e in result["broken"]] + [("fixed", e) for e in result["fixed"]]
    assert panel.table.rowCount() == len(entries) > 0
    assert f"A only {result['a_only']}" in panel.counts.text()
    kind, entry = entries[0]
    table = panel.table
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]

    def click(row: int, column: int) -> None:
        rect = table.visualRect(table.model().index(row, column))
        qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=rect.center())

    click(0, headers.index("Query"))  # both rows: A's top-1 on row A, B's on row B
    top_a, top_b = entry["top1"][0]["index"], entry["top1"][1]["index"]
    assert (window.query_index, window.reference_index, session.reference_b) == (entry["index"], top_a, top_b)
    wrong = top_b if kind == "broken" else top_a
    assert session.dataset.labels[wrong] != session.dataset.labels[entry["index"]]
    click(0, headers.index("Top-1 A"))  # that model's top-1 on both rows
    assert (window.query_index, window.reference_index, session.reference_b) == (entry["index"], top_a, None)


def test_a_changed_query_opens_each_model_on_its_own_top1(compared, qtbot):
    """Issue 41 item 2: a click on a broken or fixed query of the "What changed" tab shows row A
    on (query, A's top-1) and row B on (query, B's top-1): each row's photographs, captions and
    similarity (the model's cosine of its own pair) and hover (each model's partial map on its
    own reference; a point of a reference only on the row showing it); the browser marks both
    references, Export View draws each row's own reference, Swap or Stop Comparing go back to
    one pair; a bad ``reference_b`` from Python changes nothing."""
    from dmlviewer.core.data import load_dataset_image
    from dmlviewer.core.explain.localization import embed_images
    from dmlviewer.core.session import SessionError
    from dmlviewer.gui.retrieval.browser import MARK_ROLE
    from dmlviewer.gui.window.export import pair_view_scene

    window, view, session = compared, compared.pair_view, compared.session
    tool = window.show_compare_window()
    panel = tool.changes
    tool.lists.setCurrentWidget(panel)
    qtbot.mouseClick(panel.run_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: panel.result is not None, timeout=120000)
    entries = panel.result["broken"] + panel.result["fixed"]
    assert entries
    entry = entries[0]
    query, top_a, top_b = entry["index"], entry["top1"][0]["index"], entry["top1"][1]["index"]
    assert top_a != top_b
    table = panel.table
    column = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())].index("Query")
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=table.visualRect(table.model().index(0, column)).center())
    assert (session.query_index, session.reference_index, session.reference_b) == (query, top_a, top_b)
    wait_compare(qtbot, view)
    ds = session.dataset
    row_a, row_b = view.rows
    for row, reference in ((row_a, top_a), (row_b, top_b)):
        np.testing.assert_array_equal(row.panes[QUERY].image_item.image, load_dataset_image(ds, query))
        np.testing.assert_array_equal(row.panes[REFERENCE].image_item.image, load_dataset_image(ds, reference))
        assert f"#{reference}" in row.panes[REFERENCE].title.toolTip()
    assert f"#{top_b}" in row_b.panes[REFERENCE].title.text()  # B's own reference named on its pane
    # each row's similarity is its model's cosine of its own pair
    cosines = []
    for slot, reference in (("primary", top_a), ("compare", top_b)):
        e = embed_images(session.slot(slot).model, ds, np.array([query, reference]))
        cosines.append(float(e[0] @ e[1] / np.linalg.norm(e[0]) / np.linalg.norm(e[1])))
    assert row_a.similarity == pytest.approx(cosines[0], abs=1e-4)
    assert row_b.similarity == pytest.approx(cosines[1], abs=1e-4)
    assert window.similarity_label.text() == f"A {row_a.similarity:+.4f} · B {row_b.similarity:+.4f}"
    assert "on its own reference" in view.info.text()
    assert not view.compare_view_combo.isEnabled()  # A − B needs one pair
    # hover on the query: each model's partial map on its own reference
    lut = overlay_lut(view.cmap_combo.currentData())
    side, x, y = hover(row_a.panes[QUERY], view.link, 20.0, 30.0)
    assert side == QUERY
    shown_b = row_b.panes[REFERENCE].overlay_image()
    assert shown_b.shape[:2] == overlay_shape(row_b.explanation.image_shape_reference)
    assert agree(row_a.panes[REFERENCE].overlay_image(), expected_partial(row_a.explanation, "query", x, y, lut)) > 0.98
    assert agree(shown_b, expected_partial(row_b.explanation, "query", x, y, lut)) > 0.98
    # a point of a reference is drawn only on the row showing that reference
    side, x, y = hover(row_b.panes[REFERENCE], view.link, 25.0, 20.0)
    assert side == REFERENCE
    assert agree(row_b.panes[QUERY].overlay_image(), expected_partial(row_b.explanation, "reference", x, y, lut)) > 0.98
    overall_a = row_a.explanation.overall("decomposition", "query", "positive")
    np.testing.assert_allclose(row_a.panes[QUERY].overlay_image(), overall_a, atol=1e-6)  # A's own map stays
    assert row_a.panes[REFERENCE].crosshair is None and row_b.panes[REFERENCE].crosshair is not None
    side, x, y = hover(row_a.panes[REFERENCE], view.link, 25.0, 20.0)
    assert agree(row_a.panes[QUERY].overlay_image(), expected_partial(row_a.explanation, "reference", x, y, lut)) > 0.98
    overall_b = row_b.explanation.overall("decomposition", "query", "positive")
    np.testing.assert_allclose(row_b.panes[QUERY].overlay_image(), overall_b, atol=1e-6)
    assert row_b.panes[REFERENCE].crosshair is None
    # a click pins a point of B's reference on row B only
    pane_b = row_b.panes[REFERENCE]
    hover(pane_b, view.link, 25.0, 20.0)
    QTest.mouseClick(pane_b.graphics.viewport(), Qt.LeftButton, Qt.NoModifier, viewport_pos(pane_b, 25.0, 20.0))
    assert session.pinned is not None and session.pinned[0] == REFERENCE
    assert row_b.panes[REFERENCE].pin is not None and row_a.panes[REFERENCE].pin is None
    assert agree(row_b.panes[QUERY].overlay_image(), expected_partial(row_b.explanation, "reference",
                                                                       *session.pinned[1:], lut)) > 0.98
    np.testing.assert_allclose(row_a.panes[QUERY].overlay_image(), overall_a, atol=1e-6)
    view.link.unpin()
    # the browser marks the query and both references
    model = window.browser.model
    marks = {i: model.data(model.cell(model.row_of(i)), MARK_ROLE) for i in (query, top_a, top_b)}
    assert marks == {query: "query", top_a: "reference", top_b: "reference_b"}
    # Export View: each row drawn on its own reference
    scene = pair_view_scene(view, session)
    np.testing.assert_array_equal(scene.rows[0].panes[1].image, load_dataset_image(ds, top_a))
    np.testing.assert_array_equal(scene.rows[1].panes[1].image, load_dataset_image(ds, top_b))
    assert f"#{top_b}" in scene.rows[1].panes[1].caption
    # a bad reference_b from Python: one error naming the field, nothing changes
    with pytest.raises(SessionError, match="^reference_b: "):
        session.set_pair(query, top_a, len(ds))
    assert (session.query_index, session.reference_index, session.reference_b) == (query, top_a, top_b)
    # Swap: the reference becomes the query, both rows on that one pair
    qtbot.mouseClick(view.swap_button, Qt.LeftButton)
    assert (session.query_index, session.reference_index, session.reference_b) == (top_a, query, None)
    wait_compare(qtbot, view)
    np.testing.assert_array_equal(row_b.panes[REFERENCE].image_item.image, load_dataset_image(ds, query))
    assert view.compare_view_combo.isEnabled()
    # Stop Comparing: model B's reference goes with it (no "RB" mark left)
    session.set_pair(query, top_a, top_b)
    window.compare.stop_action.trigger()
    assert (session.query_index, session.reference_index, session.reference_b) == (query, top_a, None)
    assert model.data(model.cell(model.row_of(top_b)), MARK_ROLE) is None


def test_what_changed_reads_both_models_feature_files_instead_of_embedding_again(compared, qtbot):
    """Issue 41: with model A's and model B's feature files open and fitting (A's extracted by
    the Retrieval panel, B's by File ▸ Compute Features for Model B), the "What changed" job
    embeds nothing: both embeddings come from the files (``from_file`` [True, True], no
    embedding progress), the status line says so, and the counts are those of embedding both
    models now."""
    from dmlviewer.core.evaluate.changes import COUNT_KEYS, compare_models_changes
    from dmlviewer.core.progress import run_to_end

    window = compared
    session = window.session
    qtbot.waitUntil(lambda: session.features_ready("primary"), timeout=60000)
    window.compare.compute_features_action.trigger()
    qtbot.waitUntil(lambda: session.features_ready("compare"), timeout=60000)
    qtbot.waitUntil(lambda: not session.jobs, timeout=30000)
    events = []
    window.runner.job_progress.connect(lambda job, event: events.append((job.name, event.kind, event.message)))
    tool = window.show_compare_window()
    panel = tool.changes
    tool.lists.setCurrentWidget(panel)
    qtbot.mouseClick(panel.run_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: panel.job is not None and panel.job.ended, timeout=120000)
    qtbot.waitUntil(lambda: panel.result is not None, timeout=5000)
    result = panel.result
    assert result["from_file"] == [True, True]
    mine = [(kind, message) for name, kind, message in events if name == panel.job.name]
    assert ("log", f"model A: features from {session.features_path}") in mine
    assert ("log", f"model B: features from {session.slot_features['compare'].path}") in mine
    assert not any("embedding" in (message or "") for _kind, message in mine)  # nothing was embedded
    assert "A's embeddings from its feature file; B's embeddings from its feature file" in panel.status.text()
    a, b = session.slot("primary"), session.slot("compare")
    expected = run_to_end(compare_models_changes([("A", a.model, "", None), ("B", b.model, "", None)],
                                                 session.dataset, "test", num_workers=0))
    assert expected["from_file"] == [False, False]
    assert {k: result[k] for k in COUNT_KEYS} == {k: expected[k] for k in COUNT_KEYS}
    assert result["num_queries"] == expected["num_queries"]
