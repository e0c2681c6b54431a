"""Main window: errors become dialogs (never crashes), settings persist, the command line works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QAction, QImage

from _isolated import app_env

from dmlviewer.gui.common import errors

from dmlviewer.gui.window import settings

pytestmark = pytest.mark.gui


def test_corrupt_checkpoint_and_missing_dataset_give_dialogs_and_a_usable_window(window, tmp_path, demo_root,
                                                                                small_ckpt, wait_ready):
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"this is not a torch file" * 10)
    assert window.open_checkpoint(bad) is False
    assert window.open_dataset(tmp_path / "no-such-folder") is False
    assert [title for title, _, _ in window.dialogs] == ["Cannot open checkpoint", "Cannot open dataset"]
    for _, message, details in window.dialogs:  # expected refusals: the file, the reason, what to do
        assert message and details and "Traceback" not in details
        assert "Reason: " in details and "What to do: " in details
    assert f"File: {bad}" in window.dialogs[0][2] and "no-such-folder" in window.dialogs[1][2]
    assert window.model is None and window.dataset is None
    # Still usable: the right files open afterwards.
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    assert len(window.dialogs) == 2


def test_a_text_file_named_pt_is_one_log_line_and_a_dialog_that_says_what_to_do(qtbot, qapp, tmp_path, caplog,
                                                                               demo_root, small_ckpt, wait_ready):
    """Issue 42 item 2: a user's mistake (a text file named .pt, as model A and as model B) is
    one log line each, no traceback on stderr, and the real dialog's details say the file, the
    reason and what to do; a bug keeps its traceback."""
    import logging

    from PySide6.QtWidgets import QMessageBox

    from dmlviewer.core.models.source import ModelSource
    from dmlviewer.gui.window.main_window import MainWindow

    notes = tmp_path / "notes.pt"
    notes.write_text("my notes, not a model\n" * 20)
    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    caplog.set_level(logging.INFO)

    def dialog_details() -> str:
        qtbot.waitUntil(lambda: any(isinstance(w, QMessageBox) and w.isVisible() for w in qapp.topLevelWidgets()
                                    + win.findChildren(QMessageBox)), timeout=30000)
        box = next(w for w in qapp.topLevelWidgets() + win.findChildren(QMessageBox)
                   if isinstance(w, QMessageBox) and w.isVisible())
        details = box.detailedText()
        box.done(0)
        qtbot.waitUntil(lambda: not box.isVisible())
        return details

    try:
        assert win.open_checkpoint(notes) is False
        details_a = dialog_details()
        assert win.open_dataset(demo_root) and win.open_checkpoint(small_ckpt)
        wait_ready(win.pair_view)
        win.open_compare(ModelSource.from_text(str(notes)))
        details_b = dialog_details()
        for details in (details_a, details_b):
            assert "Traceback" not in details
            assert f"File: {notes}" in details and "Reason: refusing to load" in details
            assert "What to do: Open a checkpoint written by dmlviewer" in details
        refusals = [r for r in caplog.records if "refusing to load" in r.getMessage()]
        assert len(refusals) == 2 and all(r.exc_info is None and "\n" not in r.getMessage() for r in refusals)
        assert "Traceback" not in caplog.text
        # a bug is no refusal: its traceback is kept, in the log and the details
        caplog.clear()
        try:
            raise RuntimeError("a bug")
        except RuntimeError as exc:
            errors.report_exception(win, "Oops", exc)
        assert "Traceback" in dialog_details() and "Traceback" in caplog.text
    finally:
        win.shutdown()


def test_unreadable_pair_image_is_a_problem_and_a_dialog(window, tmp_path, demo_root):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(demo_root, root)
    assert window.open_dataset(root)
    victim = window.dataset.abspath(3)
    victim.write_bytes(b"\xff\xd8\xff not really a jpeg")
    window.set_pair(3, 4)
    assert window.dialogs and window.dialogs[-1][0] == "Cannot read image"
    assert window.problems.problems()[-1][0] == str(victim)
    assert window.query_index != 3


def test_excepthook_shows_the_error_instead_of_exiting(window):
    try:
        raise RuntimeError("boom in a slot")
    except RuntimeError:
        errors.excepthook(*sys.exc_info())
    title, message, details = window.dialogs[-1]
    assert message == "RuntimeError: boom in a slot" and "Traceback" in details


def test_show_error_opens_a_message_box_with_details(qtbot, qapp):
    from PySide6.QtWidgets import QMessageBox

    errors.show_error(None, "Title", "the message", "line 1\nline 2")
    boxes = [w for w in qapp.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]
    assert boxes and boxes[-1].text() == "the message" and boxes[-1].detailedText() == "line 1\nline 2"
    errors.show_error(None, "Title", "the message")  # the same error is not stacked twice
    assert len([w for w in qapp.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]) == len(boxes)
    for box in boxes:
        box.done(0)


def test_options_layout_and_recent_files_persist(qtbot, dialogs, demo_root, small_ckpt):
    from dmlviewer.gui.window.main_window import MainWindow

    first = MainWindow()
    qtbot.addWidget(first)
    first.show()
    assert first.open_dataset(demo_root) and first.open_checkpoint(small_ckpt)
    first.pair_view.set_method("gradcam")
    first.pair_view.opacity.setValue(35)
    first.retrieval_dock.hide()
    first.close()
    assert settings.recent("datasets") == [str(Path(demo_root).resolve())]
    from dmlviewer.core.models.source import ModelSource

    assert settings.recent_models() == [ModelSource("checkpoint", path=str(Path(small_ckpt).resolve()))]

    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    assert second.pair_view.method == "gradcam" and second.pair_view.opacity.value() == 35
    assert not second.retrieval_dock.isVisible()
    from dmlviewer.gui.window.app import last_session

    assert last_session()["dataset"] == str(demo_root)
    assert last_session()["models"]["primary"] == ModelSource("checkpoint", path=str(small_ckpt))
    second.shutdown()


def test_tools_menu_devices_and_status_bar(window, demo_root, small_ckpt, wait_ready, qtbot):
    from dmlviewer.core.models import available_devices

    action = QAction("Train…", window)
    window.add_tool_action(action)
    assert action in window.tools_menu.actions()
    qtbot.waitUntil(lambda: window.devices.known, timeout=30000)  # discovered in the background
    assert [window.device_combo.itemData(i) for i in range(window.device_combo.count())] == available_devices()
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    assert window.model_label.text() == "small_cnn · gap · 32-d"
    # short enough to read whole beside two models at 1366 px (issue 31 item 9); the format in the tooltip
    assert window.dataset_label.text() == "data: 20 images, 4 classes"
    assert "format cub" in window.dataset_label.toolTip()
    assert window.similarity_label.text() == f"similarity {window.pair_view.explanation.similarity:+.4f}"
    assert window.device_label.text() == "device: cpu"


def test_a_saved_device_this_machine_lacks_gives_way_to_the_cpu_once_devices_are_known(
        qtbot, dialogs, demo_root, small_ckpt, wait_ready):
    """Settings from another machine name ``cuda:7``: the window starts, lists this machine's
    devices, moves to the CPU and says so in the status bar (no dialog); a pair prepares there."""
    from dmlviewer.gui.window.main_window import MainWindow

    settings.app_settings().setValue("options/device", "cuda:7")
    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.devices.known, timeout=30000)
    qtbot.waitUntil(lambda: win.session.device == "cpu", timeout=5000)
    assert win.device_combo.currentData() == "cpu" and win.device_label.text() == "device: cpu"
    assert "cuda:7 is not on this machine" in win.statusBar().currentMessage()
    assert settings.app_settings().value("options/device") == "cpu" and dialogs == []
    assert win.open_checkpoint(small_ckpt) and win.open_dataset(demo_root)
    wait_ready(win.pair_view)
    assert str(win.pair_view.explanation.point_to_point.dtype) == "float32"
    win.shutdown()


def test_demo_paths_generate_the_data_once_into_the_cache(qapp, monkeypatch):
    from dmlviewer.gui.window import app

    monkeypatch.setattr(app, "DEMO_DATA", {"classes": 2, "per_class": 2, "size": 32, "seed": 0})
    root, checkpoint = app.demo_paths()
    assert root.parent == settings.cache_dir() and (root / "images.txt").exists()
    stamp = (root / "images.txt").stat().st_mtime_ns
    assert app.demo_paths()[0] == root and (root / "images.txt").stat().st_mtime_ns == stamp
    from dmlviewer.resources import resource_path

    assert checkpoint == (resource_path("demo_checkpoint.pt") if resource_path("demo_checkpoint.pt").exists() else None)


@pytest.mark.slow
def test_gui_command_writes_a_screenshot_of_the_loaded_window(tmp_path, demo_root, agroup_ckpt):
    shot = tmp_path / "shot.png"
    env = app_env(tmp_path)  # QT_QPA_PLATFORM: conftest's desktop screen
    users = Path.home() / "Documents" / "dmlviewer" / "features"  # where this test once left feature files
    before = set(users.glob("*.h5"))
    done = subprocess.run([sys.executable, "-m", "dmlviewer", "gui", "--dataset", str(demo_root),
                           "--checkpoint", str(agroup_ckpt), "--screenshot", str(shot), "--pin",
                           "--tab", "groups"], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    image = QImage(str(shot))
    assert image.width() > 800 and image.height() > 500
    logs = list((tmp_path / "data").rglob("logs/dmlviewer.log"))  # AppDataLocation/logs
    assert logs and "dmlviewer started" in logs[0].read_text()
    assert set(users.glob("*.h5")) == before  # the feature file went under tmp_path, not the user's folder

    missing = subprocess.run([sys.executable, "-m", "dmlviewer", "gui", "--checkpoint", str(tmp_path / "nope.pt")],
                             env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "nope.pt" in missing.stderr
    assert np.prod([image.width(), image.height()]) > 0


def test_view_menu_brings_problems_and_jobs_to_the_front(window):
    """Problems and Jobs share the bottom strip (tabbed): choosing one under View shows it in
    front, not hidden behind the other's tab; an empty problems list says so."""
    from dmlviewer.gui.common.problems import EMPTY_TEXT

    window.docks.default_sizes()
    jobs = window.tools.jobs_dock
    actions = {a.text().replace("&", ""): a for a in window.view_menu.actions()}
    assert {"Dataset", "Retrieval", "Problems", "Jobs"} <= set(actions)
    jobs.show()
    jobs.raise_()
    window.problems_dock.hide()
    actions["Problems"].trigger()
    assert window.problems_dock.isVisible() and not window.problems_dock.visibleRegion().isEmpty()
    assert window.problems.rowCount() == 0 and "No problems" in EMPTY_TEXT
    actions["Jobs"].trigger()  # hide
    actions["Jobs"].trigger()  # show again: in front
    assert jobs.isVisible() and not jobs.visibleRegion().isEmpty()
    assert window.problems_dock.visibleRegion().isEmpty()  # now behind the Jobs tab


def test_the_window_opens_first_and_the_files_load_in_the_background(qtbot, dialogs, demo_root, small_ckpt,
                                                                      tmp_path, wait_ready):
    """open_in_background returns at once (the window is usable while the thread reads); the
    files then open as with open_*; a bad file becomes the usual dialog."""
    from dmlviewer.gui.window.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    bad = tmp_path / "bad.pt"
    bad.write_text("not a checkpoint")
    window.open_in_background(dataset=str(demo_root), checkpoint=str(small_ckpt))
    assert window.loading and window.model is None and window.dataset is None
    qtbot.waitUntil(lambda: not window.loading, timeout=60000)
    assert window.checkpoint_path == str(small_ckpt) and window.dataset_path == str(demo_root)
    wait_ready(window.pair_view)
    window.open_in_background(checkpoint=str(bad))
    qtbot.waitUntil(lambda: not window.loading, timeout=60000)
    assert [title for title, _, _ in dialogs] == ["Cannot open checkpoint"]
    assert window.checkpoint_path == str(small_ckpt)  # the good one stays
    window.shutdown()


def test_features_open_lazily_in_the_background_and_loading_is_never_left_on_screen(qtbot, dialogs, demo_root,
                                                                                    small_ckpt, tmp_path):
    """``gui --features`` and the last session open a feature file in the background the way
    File > Open Features does: lazily (a million rows must not be read into memory); without a
    pair to show, the pair view says what to do instead of "Loading…"."""
    from dmlviewer.core.evaluate import FeatureFile, evaluate
    from dmlviewer.core.progress import run_to_end
    from dmlviewer.gui.window.main_window import MainWindow

    path = tmp_path / "f.h5"
    run_to_end(evaluate(small_ckpt, demo_root, "all", path, device="cpu"))
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.open_in_background(features=str(path))
    qtbot.waitUntil(lambda: not window.loading, timeout=60000)
    assert isinstance(window.features, FeatureFile) and window.features_path == str(path)
    assert "Loading" not in window.pair_view.info.text() and "Open a dataset" in window.pair_view.info.text()
    window.shutdown()


def test_reopening_restores_the_last_pair_and_swap_swaps_roles(qtbot, dialogs, demo_root, small_ckpt, wait_ready):
    from dmlviewer.gui.window.main_window import MainWindow

    first = MainWindow()
    qtbot.addWidget(first)
    first.show()
    assert first.open_checkpoint(small_ckpt) and first.open_dataset(demo_root)
    first.set_pair(7, 12)
    wait_ready(first.pair_view)
    sim = first.pair_view.explanation.similarity
    bias_q, bias_r = first.pair_view.explanation.bias_query, first.pair_view.explanation.bias_reference
    first.pair_view.swap_button.click()  # roles swap: the reference is now the query
    assert (first.query_index, first.reference_index) == (12, 7)
    assert first.pair_view.panes[0].title.text().startswith("<b style='color:#2f80ed'>Query</b>")
    assert first.dataset.paths[12].rsplit("/", 1)[-1] in first.pair_view.panes[0].title.text()
    wait_ready(first.pair_view)
    swapped = first.pair_view.explanation
    assert swapped.similarity == pytest.approx(sim, abs=1e-6)
    # the bias terms follow the roles: each is labelled in the read-out
    assert swapped.bias_query == pytest.approx(bias_r, abs=1e-6) and swapped.bias_reference == pytest.approx(bias_q, abs=1e-6)
    info = first.pair_view.info.text()
    assert f"query cells · reference bias {swapped.bias_query:+.4f}" in info
    assert f"reference cells · query bias {swapped.bias_reference:+.4f}" in info
    first.close()

    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    assert second.open_dataset(demo_root)
    assert (second.query_index, second.reference_index) == (12, 7)  # the last pair, not the default
    second.shutdown()


def test_save_window_image_adds_png_to_a_bare_name(window, tmp_path):
    saved = window.save_window_image(tmp_path / "shot")
    assert saved == tmp_path / "shot.png" and saved.is_file() and QImage(str(saved)).width() > 0
    assert window.save_window_image(tmp_path / "shot.jpg") == tmp_path / "shot.jpg"
    assert window.dialogs == []


def test_nothing_is_written_into_the_package_and_dialogs_start_outside_it(window, qtbot, demo_root):
    """Evaluating the shipped demo checkpoint proposes (and writes) its features in the output
    folder; no file dialog starts in the package or the cache."""
    from dmlviewer.gui.window import settings
    from dmlviewer.gui.evaluation.evaluation_view import EvaluationView
    from dmlviewer.resources import resource_path

    demo = resource_path("demo_checkpoint.pt")
    if not demo.exists():
        pytest.skip("no demo checkpoint in this build")
    package = settings.package_dir()
    before = {p: p.stat().st_mtime_ns for root in (package, resource_path("")) for p in root.rglob("*")}
    view = EvaluationView(window.runner)
    qtbot.addWidget(view)
    view.set_sources(checkpoint=str(demo), dataset=str(demo_root))
    out = Path(view.out.text())
    assert out.parent == settings.output_dir() / "features" and not settings.is_private(out)
    with qtbot.waitSignal(window.runner.job_finished, timeout=120000):
        view.start()
    assert out.is_file()
    after = {p: p.stat().st_mtime_ns for root in (package, resource_path("")) for p in root.rglob("*")
             if "__pycache__" not in p.parts}
    assert {p: t for p, t in before.items() if "__pycache__" not in p.parts} == after
    # file dialogs: never the package's resources or the cache
    assert settings.start_dir(demo) == str(settings.output_dir())
    assert settings.start_dir(settings.cache_dir() / "demo-data") == str(settings.output_dir())
    assert settings.start_dir(demo_root) == str(demo_root)
