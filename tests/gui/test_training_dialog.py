"""The training dialog: inline validation, settings round trip, a real run through the
widgets (plots receive the run's numbers, the checkpoint appears) and cancellation mid-epoch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument

sys.path.insert(0, str(Path(__file__).parent))
import _fixtures_part2 as fx  # noqa: E402

from dmlviewer.core.fields import worded  # noqa: E402
from dmlviewer.core.train import TrainConfig, validate  # noqa: E402
from dmlviewer.gui.jobs.job import JobState  # noqa: E402
from dmlviewer.gui.training.dialog import TrainingDialog  # noqa: E402
from dmlviewer.gui.training.form import field_names  # noqa: E402
from dmlviewer.gui.training.monitor import breakable  # noqa: E402
from dmlviewer.gui.training.run import read_run_settings  # noqa: E402

pytestmark = pytest.mark.gui
RUN_TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return fx.make_small_demo(tmp_path_factory.mktemp("demo") / "data")


@pytest.fixture
def dialog(qtbot, runner):
    opened: list[str] = []
    d = TrainingDialog(runner, open_checkpoint=opened.append)
    d.opened = opened
    qtbot.addWidget(d)
    return d


def _type(qtbot, path_edit, text: str) -> None:
    path_edit.edit.clear()
    qtbot.keyClicks(path_edit.edit, text)


def _fill_small_run(qtbot, dialog, data: Path, out: Path, **spins) -> None:
    w = dialog.form.widgets
    _type(qtbot, w["dataset"], str(data))
    _type(qtbot, w["out"], str(out))
    w["backbone"].setCurrentIndex(w["backbone"].findData("small_cnn"))
    w["device"].setCurrentIndex(w["device"].findData("cpu"))
    values = dict(epochs=2, classes_per_batch=3, images_per_class=3, image_size=64, dim=32, num_workers=0)
    values.update(spins)
    for name, value in values.items():
        w[name].setValue(value)


def test_invalid_combinations_are_explained_and_block_start(qtbot, dialog, demo, tmp_path):
    _fill_small_run(qtbot, dialog, demo, tmp_path / "run")
    assert dialog.start_button.isEnabled(), dialog.problems.text()
    w = dialog.form.widgets
    w["diversity"].setValue(0.5)  # diversity without groups
    w["images_per_class"].setValue(1)  # no positive pairs
    text = dialog.problems.text().replace("\u200b", "")  # without the path break points
    assert not dialog.start_button.isEnabled()
    expected = validate(dialog.form.config())
    assert len(expected) == 2
    # the label lists what core.train.validate says, the options named by the dialog's fields
    assert "“Diversity weight” needs a grouping head" in text
    assert "“Batch (images per class)” must be at least 2 to form positive pairs (got 1)" in text
    for problem in expected:
        assert worded(problem, field_names(dialog.form.labels)).replace("<", "&lt;").replace(">", "&gt;") in text
    assert "--" not in text
    w["grouping"].setCurrentIndex(w["grouping"].findData("a"))
    w["groups"].setValue(4)
    w["images_per_class"].setValue(3)
    assert dialog.start_button.isEnabled(), dialog.problems.text()
    w["dim"].setValue(30)  # not divisible by 4 groups
    assert not dialog.start_button.isEnabled() and "divisible" in dialog.problems.text()


def test_settings_load_from_run_folder_round_trip(qtbot, dialog, demo, tmp_path):
    config = TrainConfig(dataset=str(demo), out=str(tmp_path / "old"), backbone="resnet18", pooling="gem",
                         grouping="c", groups=4, dim=64, loss="binomial", binomial="dgml",
                         deml_adversary=0.3, activation_decay=0.01, adversarial="adaptive",
                         adversarial_weight=0.7, epochs=7, classes_per_batch=5, images_per_class=4,
                         lr=3e-5, head_lr_mult=5.0, optimizer="sgd", scheduler="constant", device="cpu",
                         seed=11, log_every=3, ks=[1, 5])
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps(config.to_dict()))
    assert dialog.load_settings(str(tmp_path / "old"))
    assert dialog.form.config() == config  # options without a widget survive too (log_every, ks)
    assert read_run_settings(tmp_path / "old" / "config.json") == config
    # the loss's own hyper-parameters shown are those of the module the core builds (dgml: the official code's)
    assert "scale_pos = 1, scale_neg = 25, balanced = True, self_pairs = True" in dialog.form.loss_params.text()


def test_two_epoch_training_through_the_dialog(qtbot, dialog, runner, demo, tmp_path):
    out = tmp_path / "run"
    _fill_small_run(qtbot, dialog, demo, out)
    events = []
    shown = []  # what the bar and status said after each event
    runner.job_progress.connect(lambda job, ev: (events.append(ev), shown.append(
        (ev.kind, dialog.monitor.progress.value(), dialog.monitor.status.text()))))
    with qtbot.waitSignal(runner.job_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(dialog.start_button, Qt.LeftButton)
        assert dialog.job is not None and dialog.job.process
        assert not dialog.start_button.isEnabled() and dialog.cancel_button.isEnabled()
    job, result = blocker.args
    assert job is dialog.job and job.state == JobState.FINISHED
    checkpoint = out / "checkpoint.pt"
    assert checkpoint.is_file() and Path(result["checkpoint"]) == checkpoint
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert saved["epoch"] == 2
    assert read_run_settings(out) == dialog.run_config  # the core saved the dialog's settings
    assert dialog.run_config.out == str(out)

    # the plots hold exactly the run's numbers
    steps = [ev for ev in events if ev.kind == "step"]
    evals = [ev for ev in events if ev.kind == "eval"]
    assert len(steps) >= 2 and len(evals) == 3  # epoch 0 (before training), 1 and 2
    loss_x, loss_y = dialog.monitor.loss_series["loss"].curve.getData()
    assert list(loss_x) == [ev.current for ev in steps]
    assert list(loss_y) == pytest.approx([ev.data["loss"] for ev in steps])
    r1_x, r1_y = dialog.monitor.metric_series["recall@1"].curve.getData()
    jsonl = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [rec["metrics"] for rec in jsonl if rec["kind"] == "eval"]
    assert list(r1_x) == [0, 1, 2]
    assert list(r1_y) == pytest.approx([m["recall@1"] for m in logged])
    _, nmi_y = dialog.monitor.metric_series["nmi"].curve.getData()
    assert list(nmi_y) == pytest.approx([m["nmi"] for m in logged])
    assert saved["metrics"]["recall@1"] == pytest.approx(logged[-1]["recall@1"])
    assert dialog.monitor.progress.value() == 1000
    # the final evaluation reports its progress and the bar stays below 100 % until the end
    value, text = [(v, t) for k, v, t in shown if k == "evaluate"][-1]
    assert value < 1000 and "Evaluating after epoch 2: test 18/18 images" in text
    assert max(v for k, v, _ in shown) < 1000

    # offered to open the new checkpoint in the main window; the next run is proposed in a new
    # folder beside this one, so Start is ready at once
    assert dialog.open_button.isEnabled()
    _assert_ready_for_a_new_run(dialog, tmp_path / "run-2")
    # the finished run's folder, chosen again, is explained in the dialog's words
    _type(qtbot, dialog.form.widgets["out"], str(out))
    text = dialog.problems.text().replace("\u200b", "")
    assert not dialog.start_button.isEnabled()
    assert "the “Run folder” already holds a run (checkpoint.pt): tick “Resume the run in this folder”" in text
    assert f"e.g. {tmp_path / 'run-2'}" in text and "--" not in text
    # resuming the finished run needs more epochs: said before Start, as the trainer would refuse it
    dialog.form.widgets["resume"].setChecked(True)
    assert not dialog.start_button.isEnabled()
    assert ("nothing to resume: the run in the “Run folder” already finished its 2 epoch(s); raise “Epochs” above 2"
            in dialog.problems.text())
    dialog.form.widgets["epochs"].setValue(3)
    assert dialog.start_button.isEnabled(), dialog.problems.text()
    qtbot.mouseClick(dialog.open_button, Qt.LeftButton)
    assert dialog.opened == [str(checkpoint)]


def _assert_ready_for_a_new_run(dialog, folder: Path) -> None:
    """After a run: a fresh run folder is proposed, Resume is unticked and Start is enabled."""
    w = dialog.form.widgets
    assert w["out"].text() == str(folder) and not folder.exists()
    assert not w["resume"].isChecked()
    assert dialog.start_button.isEnabled(), dialog.problems.text()
    assert "Ready" in dialog.problems.text()
    assert f"the next run goes to {folder}" in dialog.monitor.log.toPlainText()


def test_run_folder_problems_speak_the_dialogs_language_and_never_clip(qtbot, dialog, demo, tmp_path):
    """Resume without a checkpoint, and an existing run folder, are said with the dialog's own
    controls; a problem or a status naming a long path wraps instead of being clipped."""
    from dmlviewer.core.train.config import CHECKPOINT_NAME

    held = tmp_path.joinpath(*[f"folder{k}nameswithoutspaces" for k in range(12)], "run")
    held.mkdir(parents=True)
    (held / CHECKPOINT_NAME).write_bytes(b"")
    _fill_small_run(qtbot, dialog, demo, tmp_path / "fresh")
    dialog.form.widgets["resume"].setChecked(True)
    text = dialog.problems.text()
    assert "nothing to resume: the “Run folder” holds no checkpoint.pt; untick “Resume the run in this folder”" in text
    dialog.form.widgets["resume"].setChecked(False)
    _type(qtbot, dialog.form.widgets["out"], str(held))
    text = dialog.problems.text()
    assert "already holds a run" in text and "--resume" not in text and "--out" not in text
    dialog.monitor.status.setText(breakable(f"Finished: {held / CHECKPOINT_NAME} (epoch 2, selected on recall@1)"))
    dialog.resize(900, 700)
    dialog.show()
    qtbot.waitExposed(dialog)
    for label in (dialog.problems, dialog.monitor.status):
        assert label.wordWrap()
        # laid out at the label's width, no line is wider than the label, all lines fit its height
        doc = QTextDocument()
        doc.setDefaultFont(label.font())
        doc.setHtml(label.text()) if "<" in label.text() else doc.setPlainText(label.text())
        assert "/\u200b" in label.text()  # the path may break after each separator
        doc.setTextWidth(label.contentsRect().width())
        assert doc.idealWidth() <= label.contentsRect().width()
        assert label.height() >= label.heightForWidth(label.width())
        assert label.minimumSizeHint().width() < 400  # a long path does not widen its side of the dialog


def test_cancel_mid_epoch_stops_within_a_batch_and_saves(qtbot, dialog, runner, demo, tmp_path):
    out = tmp_path / "run"
    _fill_small_run(qtbot, dialog, demo, out, epochs=1, steps_per_epoch=500)
    steps = []
    runner.job_progress.connect(lambda job, ev: steps.append(ev.current) if ev.kind == "step" else None)
    qtbot.mouseClick(dialog.start_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: len(steps) >= 3, timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(runner.job_cancelled, timeout=60_000):
        qtbot.mouseClick(dialog.cancel_button, Qt.LeftButton)
        seen_at_cancel = steps[-1]
    assert dialog.job.state == JobState.CANCELLED
    saved = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)
    done = saved["extra"]["global_step"]
    # the step being computed when Cancel was pressed, plus at most one already in the pipe
    assert seen_at_cancel <= done <= seen_at_cancel + 2
    assert steps[-1] == done < 500
    assert saved["epoch"] == 0 and saved["extra"]["sampler"]["start"] == done  # a mid-epoch checkpoint
    assert "Cancelled" in dialog.monitor.status.text()
    assert dialog.checkpoint == str(out / "checkpoint.pt") and dialog.open_button.isEnabled()
    assert not list(out.glob("*.tmp*")), "no half-written file left behind"
    _assert_ready_for_a_new_run(dialog, tmp_path / "run-2")  # not blocked by the cancelled run's folder


def test_recipe_fills_the_form_and_follows_the_backbone(qtbot, dialog, demo, tmp_path):
    from dmlviewer.core.train import apply_recipe

    _fill_small_run(qtbot, dialog, demo, tmp_path / "run")
    form = dialog.form
    w = form.widgets
    form.apply_recipe("deml")
    config = form.config()
    expected = apply_recipe("deml", {k: getattr(config, k) for k in ("dataset", "out", "device", "num_workers",
                                                                     "backbone", "pretrained", "image_size",
                                                                     "epochs", "seed")})
    assert config == expected  # exactly the recipe, data and machine kept
    assert (config.grouping, config.groups, config.binomial, config.deml_adversary) == ("c", 8, "deml", 1.0)
    assert dialog.start_button.isEnabled(), dialog.problems.text()
    # pretrained: the recipe's pretrained learning rate (the paper's 1e-5) replaces the from-scratch one
    w["pretrained"].setCurrentIndex(w["pretrained"].findData("imagenet"))
    assert form.config().lr == pytest.approx(1e-5)
    w["pretrained"].setCurrentIndex(w["pretrained"].findData("none"))
    assert form.config().lr == pytest.approx(1e-4)
    w["lr"].setValue(3e-4)  # edited by the user: no longer follows
    w["pretrained"].setCurrentIndex(w["pretrained"].findData("imagenet"))
    assert form.config().lr == pytest.approx(3e-4)
    # the default recipe protects pretrained features: head warm-up and a validation split
    w["pretrained"].setCurrentIndex(w["pretrained"].findData("none"))
    form.apply_recipe("default")
    assert form.config().val_fraction == 0 and form.config().warmup_epochs == 0
    assert form.config().pooling == "gmp"
    w["pretrained"].setCurrentIndex(w["pretrained"].findData("imagenet"))
    assert form.config().val_fraction == pytest.approx(0.2) and form.config().warmup_epochs == 1
    assert form.config().pooling == "gap"  # combo boxes follow too
    w["pretrained"].setCurrentIndex(w["pretrained"].findData("none"))
    assert form.config().pooling == "gmp"
    # seed 003's attended intermediate map (no widget of its own) follows the backbone
    w["pretrained"].setCurrentIndex(w["pretrained"].findData("none"))
    form.apply_recipe("adversarial")
    assert form.config().multilayer == ["stage3"] and dialog.start_button.isEnabled(), dialog.problems.text()
    w["backbone"].setCurrentIndex(w["backbone"].findData("resnet18"))
    assert form.config().multilayer == ["layer3"]


def test_a_fresh_form_follows_the_default_recipe_for_a_pretrained_backbone(qtbot, dialog):
    """Without a recipe chosen the form holds the defaults; a pretrained backbone then gets the
    default recipe's pretrained values (GAP, lr 1e-4, validation split), not the from-scratch ones."""
    from dmlviewer.core.train import apply_recipe

    w = dialog.form.widgets
    assert dialog.form.config().pooling == "gmp"
    w["pretrained"].setCurrentIndex(w["pretrained"].findData("imagenet"))
    config, expected = dialog.form.config(), apply_recipe("default", {"pretrained": "imagenet"})
    assert (config.pooling, config.lr, config.val_fraction, config.warmup_epochs) == (
        expected.pooling, expected.lr, expected.val_fraction, expected.warmup_epochs) == ("gap", 1e-4, 0.2, 1)


def test_settings_are_remembered_and_the_output_folder_never_follows_the_dataset(qtbot, runner, demo, tmp_path):
    """A second opening of the dialog shows the last settings (a new run folder excepted); the
    run folder is proposed in the output folder and editing the dataset leaves it alone."""
    from dmlviewer.gui.window import settings

    first = TrainingDialog(runner)
    qtbot.addWidget(first)
    out = first.form.widgets["out"].text()
    assert Path(out).parent == settings.output_dir() / "runs"
    _type(qtbot, first.form.widgets["dataset"], str(demo))
    assert first.form.widgets["out"].text() == out  # not silently moved next to the dataset
    w = first.form.widgets
    w["loss"].setCurrentIndex(w["loss"].findData("ms"))
    w["lr"].setValue(0.001)
    w["epochs"].setValue(7)
    w["grouping"].setCurrentIndex(w["grouping"].findData("c"))
    first.show()
    first.close()  # hiding the dialog remembers its settings

    second = TrainingDialog(runner)
    qtbot.addWidget(second)
    config = second.form.config()
    assert (config.loss, config.lr, config.epochs, config.grouping) == ("ms", 0.001, 7, "c")
    assert config.dataset == str(demo) and not config.resume
    assert Path(config.out).parent == settings.output_dir() / "runs"


def test_loss_and_its_terms_are_not_drawn_on_top_of_each_other(qtbot, dialog):
    """The total loss and its terms (the total is mostly the metric term) go to two plots."""
    from dmlviewer.core.progress import Progress

    monitor = dialog.monitor
    for step in range(1, 4):
        monitor.on_event(Progress("step", step, 10, data={"epoch": 1, "loss": 1.0 + 0.01 * step,
                                                            "losses": {"metric": 1.0, "diversity": 1.3}}))
    monitor.refresh()
    assert set(monitor.loss_series) == {"loss"} and set(monitor.term_series) == {"metric", "diversity"}
    loss_curves = [item for item in monitor.loss_plot.getPlotItem().listDataItems()]
    term_curves = [item for item in monitor.terms_plot.getPlotItem().listDataItems()]
    assert len(loss_curves) == 1 and len(term_curves) == 2
    assert monitor.point_counts() == {"loss": 3, "metric": 3, "diversity": 3}


def _evaluations(monitor, scores: list[float]) -> None:
    from dmlviewer.core.progress import Progress

    for epoch, score in enumerate(scores):
        monitor.on_event(Progress("eval", epoch, len(scores) - 1, data={
            "epoch": epoch, "metrics": {"recall@1": score, "nmi": score}, "val": {"recall@1": score}}))
    monitor.refresh()


def test_the_legends_never_cover_the_last_epochs_points(qtbot, dialog):
    """Issue 31 item 8: the metric legend sat over the lower right of the view, where the last
    epoch's points of a low score are drawn."""
    from PySide6.QtCore import QPoint, QPointF, QRect

    dialog.resize(1366, 768)
    dialog.show()
    qtbot.waitExposed(dialog)
    monitor = dialog.monitor
    _evaluations(monitor, [0.3, 0.2, 0.1, 0.05, 0.02])
    qtbot.wait(50)  # the layout settles
    plot = monitor.metric_plot
    x, y = monitor.metric_series["val recall@1"].curve.getData()
    view = plot.getViewBox()
    scene_point = view.mapViewToScene(QPointF(float(x[-1]), float(y[-1])))
    point = plot.mapToGlobal(plot.mapFromScene(scene_point))
    assert plot.rect().contains(plot.mapFromGlobal(point)), "the last point is in view"
    legend = monitor.metric_legend
    assert legend.isVisible() and legend.names() == ["recall@1", "nmi", "val recall@1"]
    legend_rect = QRect(legend.mapToGlobal(QPoint(0, 0)), legend.size())
    assert not legend_rect.contains(point)
    view_rect = plot.mapFromScene(view.sceneBoundingRect()).boundingRect()
    assert not legend_rect.intersects(QRect(plot.mapToGlobal(view_rect.topLeft()), view_rect.size()))


def test_a_new_run_starts_on_fresh_axes(qtbot, dialog, runner, demo, tmp_path, monkeypatch):
    """Issue 31 item 8: a second run's plots kept the first run's axis ranges until its data came."""
    from dmlviewer.core.progress import Progress
    from dmlviewer.gui.jobs.job import Job

    dialog.resize(1366, 768)
    dialog.show()
    qtbot.waitExposed(dialog)
    monitor = dialog.monitor
    for step in range(1, 401):  # the first run: 400 steps, losses near 8, scores up to 0.9
        monitor.on_event(Progress("step", step, 400, data={"epoch": 1, "loss": 8.0 + step / 100,
                                                            "losses": {"metric": 6.0}}))
    _evaluations(monitor, [0.1, 0.5, 0.9])
    loss_view, metric_view = monitor.loss_plot.getViewBox(), monitor.metric_plot.getViewBox()
    qtbot.waitUntil(lambda: loss_view.viewRange()[0][1] >= 400 and metric_view.viewRange()[0][1] >= 2)  # painted
    assert loss_view.viewRange()[1][0] >= 7
    _fill_small_run(qtbot, dialog, demo, tmp_path / "second")
    submitted = []
    monkeypatch.setattr(runner, "submit", lambda name, factory, process=False, **_handlers: submitted.append(name) or
                        Job(name=name, factory=factory, process=process))
    assert dialog.start() is not None and submitted  # the second run starts (its job is not run here)
    for plot in (monitor.loss_plot, monitor.terms_plot, monitor.metric_plot):
        (x0, x1), (y0, y1) = plot.getViewBox().viewRange()
        assert (x0, x1, y0, y1) == pytest.approx((0, 1, 0, 1)), plot
        assert plot.getViewBox().autoRangeEnabled()[0]  # and follows the new run's data
    assert monitor.point_counts() == {}
    monitor.on_event(Progress("step", 1, 10, data={"epoch": 1, "loss": 3.0, "losses": {}}))
    monitor.on_event(Progress("step", 2, 10, data={"epoch": 1, "loss": 2.0, "losses": {}}))
    monitor.refresh()
    qtbot.waitUntil(lambda: loss_view.viewRange()[0][1] >= 2)
    (x0, x1), (y0, y1) = loss_view.viewRange()
    assert x0 <= 1 and 2 <= x1 < 10 and y0 <= 2 and 3 <= y1 < 7
