"""The training dialog trains a two-branch (cross-view) model from a cvusa dataset (issue 25):
the dataset chooses two branches, the fields that do not apply are greyed out, problems are
the two-branch core's, and a run through the widgets writes a two-branch checkpoint by the same
core as ``train --branches 2`` (its metric lines plotted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

sys.path.insert(0, str(Path(__file__).parent))
import _fixtures_part2 as fx

from dmlviewer.gui.jobs.job import JobState
from dmlviewer.gui.training.dialog import TrainingDialog
from dmlviewer.gui.training.form import TWO_BRANCH_FIELDS

pytestmark = pytest.mark.gui
RUN_TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    from dmlviewer.core.data.cross_view import make_cross_view_data

    root = tmp_path_factory.mktemp("two_branch_dialog")
    cv = make_cross_view_data(root / "cv", pairs=8, seed=5, aerial_size=32, panorama_shape=(16, 64))
    return {"cv": cv, "demo": fx.make_small_demo(root / "demo")}


@pytest.fixture
def dialog(qtbot, runner):
    d = TrainingDialog(runner, open_checkpoint=lambda path: None)
    qtbot.addWidget(d)
    return d


def _type(qtbot, path_edit, text: str) -> None:
    path_edit.edit.clear()
    qtbot.keyClicks(path_edit.edit, text)


def test_a_cvusa_dataset_chooses_two_branches_and_greys_out_what_does_not_apply(qtbot, dialog, data, tmp_path):
    form, w = dialog.form, dialog.form.widgets
    _type(qtbot, w["out"], str(tmp_path / "run"))
    _type(qtbot, w["dataset"], str(data["cv"]))
    assert form.two_branch() and not form.branches_note.isHidden() and "S/2 x 2S" in form.branches_note.text()
    assert w["pooling"].currentData() == "gmp" and w["dim"].value() == 64  # the cross-view recipe's values
    assert not form.recipe.isEnabled()
    for name, widget in w.items():
        assert widget.isEnabled() == (name in TWO_BRANCH_FIELDS), name
    assert "Street-to-aerial" in dialog.monitor.metric_plot.plotItem.titleLabel.text  # before the run, too
    # the note wraps and the batch line stays short: the form fits its scroll area (no clipped fields)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert form.minimumSizeHint().width() <= form.parentWidget().width()
    w["device"].setCurrentIndex(w["device"].findData("cpu"))
    assert dialog.start_button.isEnabled(), dialog.problems.text()
    w["classes_per_batch"].setValue(1)
    text = dialog.problems.text()
    assert not dialog.start_button.isEnabled() and "“Batch (classes)” (pairs per batch) must be at least 2" in text
    # a one-branch dataset: one branch again, with the recipe's values
    _type(qtbot, w["dataset"], str(data["demo"]))
    assert not form.two_branch() and w["loss"].isEnabled() and form.recipe.isEnabled()
    assert form.branches_note.isHidden()
    # two branches forced on a one-branch dataset are refused in the dialog's words
    form.branches.setCurrentIndex(form.branches.findData(2))
    assert not dialog.start_button.isEnabled()
    assert "two branches need a cross-view dataset" in dialog.problems.text()


def test_two_branch_run_through_the_dialog(qtbot, dialog, runner, data, tmp_path):
    from dmlviewer.core.models import load_checkpoint
    from dmlviewer.core.models.two_branch import TwoBranchModel

    w, out = dialog.form.widgets, tmp_path / "run"
    _type(qtbot, w["dataset"], str(data["cv"]))
    _type(qtbot, w["out"], str(out))
    w["device"].setCurrentIndex(w["device"].findData("cpu"))
    for name, value in {"epochs": 2, "classes_per_batch": 3, "image_size": 32, "dim": 8}.items():
        w[name].setValue(value)
    assert dialog.start_button.isEnabled(), dialog.problems.text()
    events = []
    runner.job_progress.connect(lambda job, ev: events.append(ev))
    with qtbot.waitSignal(runner.job_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(dialog.start_button, Qt.LeftButton)
        assert dialog.job is not None and dialog.job.process
    job, result = blocker.args
    assert job.state == JobState.FINISHED and Path(result["checkpoint"]) == out / "checkpoint.pt"
    model, info = load_checkpoint(out / "checkpoint.pt")
    assert isinstance(model, TwoBranchModel) and info["epoch"] == 2
    assert model.input_shapes == {"query": (16, 64), "reference": (32, 32)}
    assert json.loads((out / "config.json").read_text())["batch_pairs"] == 3
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    r1_x, r1_y = dialog.monitor.metric_series["recall@1"].curve.getData()
    assert list(r1_x) == [0, 1, 2] and list(r1_y) == pytest.approx([x["recall@1"] for x in lines])
    steps = [ev for ev in events if ev.kind == "step"]
    loss_x, _loss_y = dialog.monitor.loss_series["loss"].curve.getData()
    assert len(steps) == 4 and list(loss_x) == [1, 2, 3, 4]  # 6 training pairs in batches of 3, 2 epochs
    assert dialog.monitor.progress.value() == 1000
    assert dialog.checkpoint == str(out / "checkpoint.pt")
    assert "Street-to-aerial" in dialog.monitor.metric_plot.plotItem.titleLabel.text
    # the finished run's folder chosen again: Resume continues it through the same core
    _type(qtbot, w["out"], str(out))
    assert not dialog.start_button.isEnabled()
    w["resume"].setChecked(True)
    w["epochs"].setValue(3)
    assert dialog.start_button.isEnabled(), dialog.problems.text()
    with qtbot.waitSignal(runner.job_finished, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(dialog.start_button, Qt.LeftButton)
    assert load_checkpoint(out / "checkpoint.pt")[1]["epoch"] == 3


def test_settings_load_from_a_two_branch_run_folder(qtbot, dialog, data, tmp_path):
    from dmlviewer.core.train.cross_view import CrossViewConfig, train_cross_view

    run = tmp_path / "run"
    train_cross_view(CrossViewConfig(str(data["cv"]), str(run), epochs=1, dim=8, batch_pairs=3, lr=0.002,
                                     query_shape=(16, 64), reference_size=32, device="cpu", seed=7))
    assert dialog.load_settings(str(run))
    form, w = dialog.form, dialog.form.widgets
    assert form.two_branch()
    c = form.cross_view_config()
    assert (c.dim, c.batch_pairs, c.lr, c.reference_size, c.query_shape, c.seed, c.epochs) == \
        (8, 3, 0.002, 32, (16, 64), 7, 1)
    assert w["out"].text() == str(run) and not dialog.start_button.isEnabled()
    assert "already holds a run" in dialog.problems.text()
    w["resume"].setChecked(True)
    w["epochs"].setValue(2)
    assert dialog.start_button.isEnabled(), dialog.problems.text()


def test_two_branch_settings_are_remembered_apart_from_one_branch_settings(qtbot, runner, data):
    """A cross-view run's epochs, rate and sizes come back the next time a cvusa dataset is
    chosen (they were replaced by the cross-view defaults), and a one-branch form does not
    inherit them; nor does the cross-view form inherit the one-branch settings."""
    one = TrainingDialog(runner, dataset=str(data["demo"]))
    qtbot.addWidget(one)
    one.form.widgets["epochs"].setValue(3)
    one.form.widgets["lr"].setValue(0.002)
    one.save_settings()

    first = TrainingDialog(runner, dataset=str(data["cv"]))
    qtbot.addWidget(first)
    w = first.form.widgets
    from dmlviewer.core.train.cross_view import CrossViewConfig

    assert first.form.two_branch() and w["epochs"].value() == CrossViewConfig("", "").epochs  # the recipe's
    w["epochs"].setValue(11)
    w["lr"].setValue(0.0005)
    w["image_size"].setValue(96)
    first.show()
    first.close()  # hiding the dialog remembers its settings

    second = TrainingDialog(runner, dataset=str(data["cv"]))
    qtbot.addWidget(second)
    c = second.form.config()
    assert second.form.two_branch() and (c.epochs, c.lr, c.image_size) == (11, 0.0005, 96)
    single = TrainingDialog(runner, dataset=str(data["demo"]))
    qtbot.addWidget(single)
    c = single.form.config()
    assert not single.form.two_branch() and (c.epochs, c.lr) == (3, 0.002)


def test_the_dialog_and_train_branches_2_start_the_same_run(qtbot, dialog, data, tmp_path):
    """Issue 39 item 2: one mapping of the training options to a two-branch run, in the core
    (``core.train.cross_view_options``), behind both doors: the same values typed into the form
    and given as ``train --branches 2`` options make equal ``CrossViewConfig``s."""
    from dmlviewer.cli import build_parser
    from dmlviewer.commands.train_two_branch import config_from_args
    from dmlviewer.gui.training.form import set_combo

    form, w, out = dialog.form, dialog.form.widgets, tmp_path / "run"
    _type(qtbot, w["out"], str(out))
    _type(qtbot, w["dataset"], str(data["cv"]))
    assert form.two_branch()
    set_combo(w["pooling"], "gap")
    set_combo(w["device"], "cpu")
    for name, value in (("dim", 24), ("epochs", 3), ("lr", 0.002), ("classes_per_batch", 6), ("image_size", 48),
                        ("seed", 7)):
        w[name].setValue(value)
    args = build_parser().parse_args(["train", "--branches", "2", "--dataset", str(data["cv"]), "--out", str(out),
                                      "--pooling", "gap", "--device", "cpu", "--dim", "24", "--epochs", "3",
                                      "--lr", "0.002", "--classes-per-batch", "6", "--image-size", "48",
                                      "--seed", "7"])
    from_dialog, from_command = form.cross_view_config(), config_from_args(args)
    assert from_dialog == from_command
    assert (from_dialog.pooling, from_dialog.dim, from_dialog.batch_pairs, from_dialog.reference_size,
            from_dialog.query_shape, from_dialog.seed, from_dialog.pretrained) == ("gap", 24, 6, 48, (24, 96), 7, None)
