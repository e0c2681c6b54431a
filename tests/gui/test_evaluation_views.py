"""Evaluation, localization and embedding views: the numbers they show are the command line's
(run as a subprocess on the same files), the table copies/exports what it shows, the plots hold
the results, and the embedding map projects and picks the right images."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QApplication

from dmlviewer.gui.retrieval.embedding_view import EmbeddingView, pca_2d, projection_job
from dmlviewer.gui.evaluation.evaluation_view import METRIC_ROWS, EvaluationView
from dmlviewer.gui.evaluation.localization_view import LocalizationView
from dmlviewer.gui.jobs.job import JobState

pytestmark = pytest.mark.gui
JOB_TIMEOUT_MS = 120_000


def cli_json(*args: str) -> object:
    """``dmlviewer ARGS --json`` in a subprocess; its stdout parsed."""
    proc = subprocess.run([sys.executable, "-m", "dmlviewer", *args, "--json"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def evaluation(qtbot, runner):
    view = EvaluationView(runner)
    qtbot.addWidget(view)
    return view


def _evaluate(qtbot, view, checkpoint: Path, dataset: Path, out: Path):
    view.set_sources(checkpoint=str(checkpoint), dataset=str(dataset))
    view.inputs.device.setCurrentText("cpu")
    view.out.setText(str(out))
    assert view.run_button.isEnabled(), view.run_button.toolTip()
    with qtbot.waitSignal(view.evaluated, timeout=JOB_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(view.run_button, Qt.LeftButton)
    return blocker.args[0]


def _column_values(table, column: int) -> dict[str, float]:
    keys = table.row_keys()
    return {keys[i]: table.item(i, column).data(Qt.UserRole) for i in range(table.rowCount())
            if table.item(i, column).data(Qt.UserRole) is not None}


def test_evaluation_table_equals_cli_and_copies_and_exports(qtbot, evaluation, demo_root, small_ckpt, tmp_path):
    column = _evaluate(qtbot, evaluation, small_ckpt, demo_root, tmp_path / "gui.h5")
    assert Path(column.features).is_file() and evaluation.table.columnCount() == 1
    shown = _column_values(evaluation.table, 0)
    expected = cli_json("evaluate", "--checkpoint", str(small_ckpt), "--dataset", str(demo_root),
                        "--split", "test", "--out", str(tmp_path / "cli.h5"), "--device", "cpu")
    assert set(shown) == set(expected) == {k for k, _ in METRIC_ROWS}
    for key, value in expected.items():
        assert shown[key] == pytest.approx(value, abs=1e-6), key

    # Ctrl+C on the whole table: tab-separated, header row + one row per metric, as displayed
    table = evaluation.table
    table.selectAll()
    QApplication.clipboard().clear()
    qtbot.keyClick(table, Qt.Key_C, Qt.ControlModifier)
    rows = [line.split("\t") for line in QApplication.clipboard().text().strip().splitlines()]
    assert rows[0] == ["metric", column.title]
    copied = {r[0]: float(r[1]) for r in rows[1:]}
    assert copied.keys() == expected.keys()
    for key, value in expected.items():
        assert copied[key] == pytest.approx(value, abs=5e-5)  # 4 decimals shown

    evaluation.export_csv(str(tmp_path / "m.csv"))
    with open(tmp_path / "m.csv", newline="") as f:
        assert list(csv.reader(f)) == rows


def test_comparison_columns_best_values_and_localization_row(qtbot, evaluation, demo_root, small_ckpt,
                                                             agroup_ckpt, tmp_path):
    first = _evaluate(qtbot, evaluation, small_ckpt, demo_root, tmp_path / "a.h5")
    evaluation.out.setText("")
    second = _evaluate(qtbot, evaluation, agroup_ckpt, demo_root, tmp_path / "b.h5")
    table = evaluation.table
    assert table.columnCount() == 2 and [c.title for c in table.columns] == [first.title, second.title]
    a, b = _column_values(table, 0), _column_values(table, 1)
    for i, key in enumerate(table.row_keys()):
        if key == "num_queries":
            continue
        for j, value in enumerate((a[key], b[key])):
            is_best = value == max(a[key], b[key])
            assert table.item(i, j).font().bold() == is_best, key

    # re-adding an evaluated file replaces its column; its metrics come from the file's attributes
    assert evaluation.add_features(str(tmp_path / "a.h5")) == 0
    assert table.columnCount() == 2 and _column_values(table, 0) == pytest.approx(a)

    # a localization accuracy row goes to the checkpoint's column only
    evaluation.add_localization(str(small_ckpt), "decomposition", 0.625)
    row = table.row_keys().index("localization (decomposition)")
    assert table.item(row, 0).text() == "0.6250" and table.item(row, 1).text() == ""


def test_localization_and_correspondence_views_show_cli_numbers(qtbot, runner, demo_root, small_ckpt):
    view = LocalizationView(runner)
    qtbot.addWidget(view)
    view.set_sources(checkpoint=str(small_ckpt), dataset=str(demo_root))
    view.inputs.device.setCurrentText("cpu")
    view.set_methods(["decomposition", "gradcam"])
    view.thresholds.set_range(0.1, 0.7, 0.1)
    view.limit.setValue(6)
    computed = []
    view.localization_computed.connect(lambda *args: computed.append(args))
    with qtbot.waitSignal(runner.job_finished, timeout=JOB_TIMEOUT_MS):
        qtbot.mouseClick(view.localize_button, Qt.LeftButton)
    expected = cli_json("localize", "--checkpoint", str(small_ckpt), "--dataset", str(demo_root),
                        "--method", "decomposition,gradcam", "--thresholds", "0.1:0.7:0.1", "--limit", "6",
                        "--device", "cpu")
    assert view.results == expected
    items = view.plot.getPlotItem().listDataItems()
    curves = [item for item in items if isinstance(item, pg.PlotDataItem)]
    stars = [item for item in items if isinstance(item, pg.ScatterPlotItem)]
    assert len(curves) == len(stars) == 2
    for curve, row in zip(curves, expected):
        x, y = curve.getData()
        assert list(x) == pytest.approx(row["thresholds"]) and list(y) == pytest.approx(row["accuracy"])
    marked = sorted((float(s.data["x"][0]), float(s.data["y"][0])) for s in stars)
    assert marked == sorted((r["best_threshold"], r["best_accuracy"]) for r in expected)
    assert computed == [(str(small_ckpt), r["method"], r["best_accuracy"]) for r in expected]
    assert view.best_table.rowCount() == 2

    view.max_pairs.setValue(4)
    with qtbot.waitSignal(runner.job_finished, timeout=JOB_TIMEOUT_MS):
        qtbot.mouseClick(view.correspond_button, Qt.LeftButton)
    expected = cli_json("correspond", "--checkpoint", str(small_ckpt), "--dataset", str(demo_root),
                        "--pairs", "4", "--device", "cpu")
    assert view.correspondence == expected
    bars = [item for item in view.bar_plot.getPlotItem().items if type(item).__name__ == "BarGraphItem"]
    assert list(bars[0].opts["height"]) == pytest.approx([expected["partial_map_accuracy"],
                                                          expected["overall_map_accuracy"]])


def test_pca_matches_the_covariance_eigenvectors():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)) @ rng.normal(size=(6, 6))
    xy = pca_2d(x)
    centred = x - x.mean(0)
    w, v = np.linalg.eigh(np.cov(centred, rowvar=False))
    top = v[:, np.argsort(w)[::-1][:2]]
    reference = centred @ top
    for k in range(2):  # equal up to the sign of each axis
        assert np.allclose(np.abs(xy[:, k]), np.abs(reference[:, k]), atol=1e-4)
    assert np.var(xy[:, 0]) >= np.var(xy[:, 1])


def test_embedding_view_projects_hovers_and_picks_a_query(qtbot, runner, demo_root, small_ckpt, tmp_path):
    from dmlviewer.core.evaluate import evaluate, read_features
    from dmlviewer.core.progress import run_to_end

    features_path = tmp_path / "f.h5"
    run_to_end(evaluate(small_ckpt, demo_root, "all", features_path, device="cpu"))
    features = read_features(features_path)
    view = EmbeddingView(runner)
    qtbot.addWidget(view)
    view.resize(800, 700)
    view.show()
    qtbot.waitExposed(view)
    view.set_features(str(features_path))
    with qtbot.waitSignal(runner.job_finished, timeout=JOB_TIMEOUT_MS):
        view.project("pca")
    xy = view.projection["xy"]
    assert len(xy) == len(features) == len(view.scatter.data)
    assert np.allclose(xy, pca_2d(features.embeddings), atol=1e-5)
    assert len({b.color().name() for b in view.scatter.data["brush"]}) == len(np.unique(features.labels))
    # a legend entry per class, with the dataset's class names (the feature file carries them)
    from dmlviewer.core.data import open_dataset

    names = open_dataset(demo_root).class_names
    assert features.class_names == list(names)
    entries = [view.legend.item(i).text() for i in range(view.legend.count())]
    assert entries == [names[c] for c in np.unique(features.labels)]
    assert "principal component 1" in view.plot.getAxis("bottom").labelText
    # each axis's share of the variance, as the axis labels print it
    centred = features.embeddings - features.embeddings.mean(0)
    total = float((centred ** 2).sum(1).mean())
    assert view.projection["variance"] == pytest.approx([float(np.var(xy[:, k])) / total for k in range(2)], rel=1e-3)
    assert 0.05 < view.projection["variance"][0] < 1
    assert f"{100 * view.projection['variance'][0]:.0f}% of the variance" in view.plot.getAxis("bottom").labelText

    # hover a point: its image appears; click it: it becomes the query
    k = 7

    def point_on_screen():
        scene = view.plot.getPlotItem().vb.mapViewToScene(QPointF(float(xy[k, 0]), float(xy[k, 1])))
        return view.plot.mapFromScene(scene)

    # the axis labels and the legend set by the projection move the plot area once the layout
    # has run: hover where the point is drawn after that
    previous = None
    while previous != point_on_screen():
        previous = point_on_screen()
        qtbot.wait(20)
    at = point_on_screen()
    qtbot.mouseMove(view.plot.viewport(), at)
    qtbot.waitUntil(lambda: view.hovered is not None, timeout=5000)
    assert np.allclose(xy[view.hovered], xy[k], atol=1e-3)  # the point under the cursor (or one on it)
    view.loader.wait_idle()
    qtbot.waitUntil(lambda: view.preview.pixmap() is not None and not view.preview.pixmap().isNull(), timeout=5000)
    assert view.preview.isVisible() and view.preview.pixmap().width() <= view.THUMB
    assert names[int(features.labels[view.projection["rows"][view.hovered]])] in view.preview.toolTip()
    with qtbot.waitSignal(view.query_selected, timeout=5000) as blocker:
        qtbot.mouseClick(view.plot.viewport(), Qt.LeftButton, pos=at)
    row, path = blocker.args
    assert path == features.paths[row] and np.allclose(xy[row], xy[k], atol=1e-3)

    # t-SNE runs in the worker on a seeded sample
    result = None
    for event in projection_job(str(features_path), "tsne", max_points=12):
        if event.kind == "done":
            result = event.data["result"]
    assert result["xy"].shape == (12, 2) and len(set(result["rows"].tolist())) == 12
    assert runner.jobs == [] and all(j.state == JobState.FINISHED for j in runner.history)


def test_tools_menu_opens_prefilled_views_and_points_pick_queries(qtbot, window, demo_root, small_ckpt):
    from dmlviewer.gui.window.tools import install_tools

    tools = getattr(window, "tools", None) or install_tools(window)
    assert window.open_dataset(demo_root) and window.open_checkpoint(small_ckpt)
    texts = [a.text().replace("&", "") for a in window.tools_menu.actions()]
    for text in ("Train a Model…", "Evaluate Checkpoints…", "Localization and Correspondence…",
                 "Embedding Projection…"):
        assert text in texts
    views = [a.text().replace("&", "") for a in window.view_menu.actions()]
    assert "Jobs" in views and "Jobs" not in texts  # docks are shown from the View menu
    action = next(a for a in window.tools_menu.actions() if a.text().replace("&", "") == "Evaluate Checkpoints…")
    action.trigger()
    assert tools.evaluation.isVisible()
    assert tools.evaluation.inputs.checkpoint.text() == str(small_ckpt)
    assert tools.evaluation.inputs.dataset.text() == str(demo_root)
    training = tools.show_training()
    assert training.form.widgets["dataset"].text() == str(demo_root)
    training.close()
    # a point of the embedding map, identified by its path, becomes the main window's query
    target = 5
    tools.select_query(row=0, path=window.dataset.paths[target])
    assert window.query_index == target and window.reference_index not in (None, target)


@pytest.mark.parametrize("text", ["/", "..", "~", "~nobody-such", "x" * 300, "é中😀", "a\x00b"])
def test_evaluation_fields_take_any_text_and_are_checked_on_evaluate(qtbot, evaluation, demo_root, small_ckpt,
                                                                     text):
    """Typing never validates (nor raises: issue 23 item 1, "/" raised "PosixPath('/') has an
    empty name"); Evaluate checks the fields and says what is wrong in one line, running nothing."""
    inputs = evaluation.inputs
    for field in (inputs.checkpoint, inputs.dataset, evaluation.out):
        field.edit.clear()
        qtbot.keyClicks(field.edit, text) if text.isascii() and "\x00" not in text else field.setText(text)
    assert evaluation.out.text() == text.strip()  # nothing was proposed for a checkpoint that is not a file
    assert evaluation.run_button.isEnabled()  # checked when pressed, not per keystroke
    qtbot.mouseClick(evaluation.run_button, Qt.LeftButton)
    assert evaluation.job is None and evaluation.runner.jobs == []
    status = evaluation.status.text()
    assert f"Cannot evaluate: checkpoint {text.strip()}" in status.replace("&amp;", "&")
    assert ("dataset folder" in status) == (text not in ("/", ".."))  # those two are folders
    assert "Traceback" not in status and "Error" not in status


def test_evaluation_proposes_a_features_file_for_an_existing_checkpoint_only(qtbot, evaluation, small_ckpt):
    qtbot.keyClicks(evaluation.inputs.checkpoint.edit, str(small_ckpt.parent) + "/")
    assert evaluation.out.text() == ""  # a folder: no features file proposed
    qtbot.keyClicks(evaluation.inputs.checkpoint.edit, small_ckpt.name)
    assert Path(evaluation.out.text()).name == f"{small_ckpt.stem}-test.h5"


def test_localization_is_disabled_with_the_reason_on_a_dataset_without_boxes(qtbot, runner, demo_root,
                                                                            small_ckpt, tmp_path):
    """Issue 23 item 8: said before running, not after ("no image of split 'test' has a box")."""
    import shutil

    boxless = tmp_path / "boxless"
    shutil.copytree(demo_root, boxless)
    (boxless / "bounding_boxes.txt").unlink()
    view = LocalizationView(runner)
    qtbot.addWidget(view)
    view.set_sources(checkpoint=str(small_ckpt), dataset=str(boxless), dataset_format="cub")
    qtbot.waitUntil(lambda: not view.localize_button.isEnabled(), timeout=5000)  # checked once typing pauses
    tip = view.localize_button.toolTip()
    assert "No image of the test split of boxless has a ground-truth box" in tip and "bounding_boxes.txt" in tip
    assert view.correspond_button.isEnabled() and view.faithfulness_button.isEnabled()
    assert view.run_localization() is None and runner.jobs == []
    assert "ground-truth box" in view.status.text()
    # the demo dataset has boxes: enabled again
    view.set_sources(dataset=str(demo_root), dataset_format="cub")
    qtbot.waitUntil(view.localize_button.isEnabled, timeout=5000)
    assert "ground-truth boxes" in view.localize_button.toolTip()


def test_tool_windows_stay_in_front_of_the_main_window(qtbot, window):
    """Issue 23 item 8: the localization window dropped behind the main window. The tool windows
    are dialog-type windows of the main window (window managers keep those in front of it)."""
    from dmlviewer.gui.window.tools import install_tools

    tools = getattr(window, "tools", None) or install_tools(window)
    for view in (tools.show_localization(), tools.show_evaluation()):
        qtbot.waitExposed(view)
        assert view.isWindow() and view.windowType() == Qt.Dialog
        assert view.parentWidget() is window
        assert view.windowHandle().transientParent() is window.windowHandle()
        assert view.windowFlags() & Qt.WindowMinMaxButtonsHint and view.windowFlags() & Qt.WindowCloseButtonHint
