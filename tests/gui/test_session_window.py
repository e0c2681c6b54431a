"""The main window over the session model (issue 23 items 2, 3, 9, 11; issue 22 item 1; issue 26
item 6): every model source reopened as what it is, stale jobs dropped after a switch, a bare
state dict offered to Import Model, Open Model from Code, closing from code without a question."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from dmlviewer.gui.window import settings

MODEL_FILE = '''
import torch.nn as nn


def build_model(width=8):
    # a 7 x 7 map at 224 px (stride 32): small point-to-point tensors
    return nn.Sequential(nn.Conv2d(3, width, 7, stride=16, padding=3), nn.ReLU(),
                         nn.Conv2d(width, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())


class _Hidden:
    pass
'''


@pytest.fixture
def code_model(tmp_path):
    """A model file written here (a small CNN builder) and weights saved from the module it builds."""
    import importlib.util

    import torch

    file = tmp_path / "my_models.py"
    file.write_text(MODEL_FILE)
    spec = importlib.util.spec_from_file_location("my_models_for_weights", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(1)
    weights = tmp_path / "weights.pth"
    torch.save(module.build_model(width=6).state_dict(), weights)
    return file, weights


def _source(kind, small_ckpt, code_model):
    from dmlviewer.core.models.source import ModelSource

    if kind == "checkpoint":
        return ModelSource("checkpoint", path=str(Path(small_ckpt).resolve()))
    if kind == "pretrained":
        from dmlviewer.core.models.opening import pretrained_backbones

        if dict(pretrained_backbones()).get("efficientnet_lite0", "missing"):
            pytest.skip("efficientnet_lite0's ImageNet weights (the efficientnet extra) are not installed")
        return ModelSource("pretrained", path="imagenet:efficientnet_lite0")
    file, weights = code_model
    return ModelSource("code", entry=f"{file.resolve()}:build_model", args={"width": 6},
                       weights=str(weights.resolve()), options={"feature_layer": "3"})


def _new_window(qtbot):
    from dmlviewer.gui.window.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    return window


@pytest.mark.parametrize("kind", ["checkpoint", "pretrained", "code"])
def test_the_last_session_reopens_each_model_source_as_what_it_is(qtbot, dialogs, demo_root, small_ckpt, code_model,
                                                                   kind, wait_ready):
    source = _source(kind, small_ckpt, code_model)
    first = _new_window(qtbot)
    assert first.open_dataset(demo_root) and first.open_model_source(source)
    assert first.model_source == source and first.checkpoint_info["sha256"]
    first.set_pair(3, 9)
    features_file = first.jobs.features_path().name
    assert ":" not in features_file and source.stem() in features_file  # Windows and SMB shares
    sha = first.checkpoint_info["sha256"]
    first.close()
    assert dialogs == []
    remembered = json.loads(settings.session_values()["last"])
    assert remembered["models"]["primary"] == source.to_dict()
    assert settings.recent_models()[0] == source  # Recent Models: the source, not a path

    second = _new_window(qtbot)
    second.open_in_background(last_session=settings.session_values())
    qtbot.waitUntil(lambda: not second.loading, timeout=120000)
    assert dialogs == []
    assert second.model_source == source and second.model_source.kind == kind
    assert second.checkpoint_info["sha256"] == sha  # the same weights
    assert second.dataset_path == str(demo_root) and (second.query_index, second.reference_index) == (3, 9)
    wait_ready(second.pair_view, timeout=120000)
    second.model_menus.recent_models_menu.aboutToShow.emit()
    from dmlviewer.core.models.naming import distinct_names

    first_entry = [a.text() for a in second.model_menus.recent_models_menu.actions()][0]  # its name (issue 31 item 1)
    assert first_entry == distinct_names([(source, second.checkpoint_info)])[0]
    second.shutdown()


def test_settings_of_older_versions_reopen_imagenet_as_a_backbone_and_a_failed_restore_says_so(
        qtbot, dialogs, demo_root, tmp_path, monkeypatch):
    """An ``imagenet:`` spec written by an older version as a plain value is a pretrained
    backbone, never the file ``<folder>/imagenet:NAME``; a model that cannot be reopened is
    named in a dialog and the status bar (never a silent "no model")."""
    from dmlviewer.core.models.source import ModelSource
    from dmlviewer.core.last_session import LastSession

    record = LastSession.from_settings({"dataset": str(demo_root), "checkpoint": "imagenet:efficientnet_lite0"})
    assert record.models["primary"] == ModelSource("pretrained", path="imagenet:efficientnet_lite0")

    store = settings.app_settings()
    store.setValue("session/dataset", str(demo_root))
    store.setValue("session/checkpoint", str(tmp_path / "gone.pt"))
    window = _new_window(qtbot)
    window.open_in_background(last_session=settings.session_values())
    qtbot.waitUntil(lambda: not window.loading, timeout=60000)
    assert window.dataset_path == str(demo_root) and window.model is None
    assert [(t, m) for t, m, _ in dialogs] == [("Cannot reopen the last session's model",
                                                f"checkpoint not found: {tmp_path / 'gone.pt'}")]
    assert "gone.pt" in window.statusBar().currentMessage()

    dialogs.clear()
    store.setValue("session/last", '{"models": {"primary": {"kind": "code", "entry": "x.py:f", "args": "oops"}}}')
    window.open_in_background(last_session=settings.session_values(), demo=lambda: (demo_root, None))
    qtbot.waitUntil(lambda: not window.loading, timeout=60000)
    assert [t for t, _, _ in dialogs] == ["Cannot restore the last session"] and "'args'" in dialogs[0][1]
    window.shutdown()


def test_a_stale_extraction_is_dropped_after_a_dataset_switch(window, demo_root, small_ckpt, tmp_path, qtbot,
                                                              monkeypatch):
    """The feature extraction of the previous dataset ends after another dataset was opened: its
    result is dropped by the session's stamp check and the Retrieval panel shows the new
    dataset's features (computed next), never the old ones."""
    import dmlviewer.core.evaluate.extract as extract_module
    from dmlviewer.core.data import make_demo_data

    other = tmp_path / "other"
    make_demo_data(other, classes=3, per_class=4, size=64, seed=5)
    real = extract_module.extract_features
    gate, calls = threading.Event(), []

    def late(model, dataset, out, **kwargs):
        calls.append(Path(out))
        if len(calls) > 1:
            yield from real(model, dataset, out, **kwargs)
            return
        # The whole file is written (deaf to the cancel request the switch sends), and the job
        # ends only after the switch: too late to be cancelled, its result arrives.
        events = list(real(model, dataset, out, **{**kwargs, "cancel": None}))
        gate.wait(30)
        yield events[-1]

    monkeypatch.setattr(extract_module, "extract_features", late)
    settings.set_output_dir(tmp_path / "outputs")  # no feature file of an earlier test
    shown: list = []
    window.session.events.features.connect(lambda: shown.append(window.features_path))
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    qtbot.waitUntil(lambda: len(calls) == 1 and window.runner.current is not None, timeout=30000)
    stale = window.runner.current
    assert stale.name == (f"Extract features of {Path(demo_root).name} with "
                          f"{small_ckpt.parent.name}/{small_ckpt.name} · small_cnn")  # the model by its name

    assert window.open_dataset(other)
    gate.set()
    qtbot.waitUntil(lambda: stale.ended, timeout=60000)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    assert calls[0].exists()  # the stale job did write its file …
    assert str(calls[0]) not in shown  # … and it never reached the window
    assert window.features_path == str(window.jobs.features_path()) == str(calls[1])
    assert sorted(window.features.paths) == sorted(window.dataset.paths)
    panel = window.retrieval
    assert panel.mismatch() is None
    qtbot.waitUntil(lambda: len(panel.results) > 0, timeout=10000)
    assert all(r["path"] in set(window.dataset.paths) for r in panel.results)


def test_a_bare_state_dict_is_offered_to_import_model(window, tmp_path, qtbot):
    import torch
    from torchvision.models import resnet18

    path = tmp_path / "resnet18_weights.pth"
    torch.save(resnet18(weights=None).state_dict(), path)
    assert not window.open_checkpoint(path)
    assert window.dialogs == []  # no "use it as backbone weights" error
    box = window.import_offer
    assert box.isVisible() and "Import Model" in box.informativeText()
    import_button = next(b for b in box.buttons() if b.text() == "Import…")
    import_button.click()
    dialog = window.import_dialog
    assert dialog.isVisible() and dialog.file_list() == [str(path)]
    dialog.done(0)


def test_open_model_from_code_checks_on_open_and_opens_in_the_background(window, code_model, demo_root, qtbot,
                                                                           wait_ready):
    from dmlviewer.gui.doors.code_model_dialog import RUNS_CODE, CodeModelDialog, callables_in

    file, weights = code_model
    assert callables_in(file) == ["build_model"]  # read from its syntax tree: nothing ran
    assert window.open_dataset(demo_root)
    window.model_menus.open_code_action.trigger()
    dialog = window.model_menus.code_dialog
    assert isinstance(dialog, CodeModelDialog) and dialog.isVisible()
    assert any(label.text() == RUNS_CODE for label in dialog.findChildren(type(dialog.error)))
    for hostile in ("/", "..", "~", "x" * 300, "é中😀", "-1", "1e309", "nan"):  # typing never raises
        for field in (dialog.module.edit, dialog.args, dialog.weights.edit, dialog.feature_layer):
            field.setText(hostile)
        dialog.name.setEditText(hostile)
        dialog.accept()  # Open: one line in the dialog, which stays open
        assert dialog.isVisible() and dialog.error.text() and "\n" not in dialog.error.text()
    dialog.module.setText(str(file))
    assert dialog.name.currentText() == "build_model"  # offered from the file
    dialog.args.setText('{"width": 6')
    dialog.weights.setText(str(weights))
    dialog.feature_layer.setText("3")
    dialog.accept()
    assert dialog.isVisible() and "JSON" in dialog.error.text()
    dialog.args.setText('{"width": 6}')
    dialog.accept()
    assert not dialog.isVisible()
    qtbot.waitUntil(lambda: not window.loading, timeout=60000)
    assert window.dialogs == []
    source = window.model_source
    assert source.kind == "code" and source.entry == f"{file.resolve()}:build_model" and source.args == {"width": 6}
    assert settings.recent_models()[0] == source
    wait_ready(window.pair_view, timeout=60000)

    # A code model that fails to build: the error as a dialog, the model on screen stays.
    window.open_in_background(model=source.__class__("code", entry=f"{file}:no_such_name"))
    qtbot.waitUntil(lambda: not window.loading, timeout=60000)
    assert [t for t, _, _ in window.dialogs] == ["Cannot open model from code"] and "no_such_name" in window.dialogs[0][1]
    assert window.model_source == source


def _hold_a_job(window):
    from dmlviewer.core.progress import Progress

    started = threading.Event()

    def run_until_cancelled(cancel):
        started.set()
        for step in range(100000):
            yield Progress("step", step, 100000)
            time.sleep(0.01)

    job = window.runner.submit("Extract features of a test dataset with a test model", run_until_cancelled)
    assert started.wait(30)
    return job


def test_closing_from_code_cancels_the_running_job_without_asking(qtbot, dialogs, no_modal_questions):
    window = _new_window(qtbot)
    job = _hold_a_job(window)
    assert window.close()  # as view(...).close() does: nobody may be there to answer
    assert no_modal_questions == [] and not window.isVisible()
    assert job.state == "cancelled" and not window.runner.busy

    person = _new_window(qtbot)
    job = _hold_a_job(person)
    quit_action = next(a for a in person.menuBar().actions()[0].menu().actions() if a.text() == "&Quit")
    quit_action.trigger()  # a person's close (File > Quit) is asked; the fixture answers Yes
    assert len(no_modal_questions) == 1 and "still running" in no_modal_questions[0]
    assert job.state == "cancelled" and not person.isVisible()


def test_a_live_module_is_in_recent_models_until_quit_and_never_in_the_last_session(window, small_ckpt, code_model):
    import importlib.util

    from dmlviewer.core.models import open_model

    file, _ = code_model
    spec = importlib.util.spec_from_file_location("my_models_live", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    live, info = open_model(module.build_model(), feature_layer="3")
    window.use_model(live, info, label="build_model()")
    assert window.model_source.kind == "python" and window.checkpoint_path is None
    assert "models" not in json.loads(settings.session_values()["last"])  # nothing to reopen it from
    assert window.open_checkpoint(small_ckpt)
    window.model_menus.recent_models_menu.aboutToShow.emit()
    entries = {a.text(): a for a in window.model_menus.recent_models_menu.actions()}
    assert f"{small_ckpt.parent.name}/{small_ckpt.name} · small_cnn" in entries  # run folder, file, backbone
    entries["build_model() (Python module, until you quit)"].trigger()
    assert window.model is live and window.model_source.kind == "python"
    assert [s.kind for s in settings.recent_models()] == ["checkpoint"]


def test_the_code_fields_accept_an_entry_typed_in_one_field(code_model):
    from dmlviewer.gui.doors.code_model_dialog import code_source

    file, weights = code_model
    source = code_source(f"{file}:build_model", "other_name", "", str(weights))
    assert source.entry == f"{file.resolve()}:build_model" and source.weights == str(weights.resolve())
    assert code_source("torchvision.models:resnet18", "", '{"num_classes": 8}').entry == "torchvision.models:resnet18"
    assert code_source("torchvision.models", "resnet18").args == {}
    for module, name, args, says in ((str(file), "", "", "name the function"),
                                     (str(file), "build_model", "[1]", "JSON object"),
                                     ("not a module!", "f", "", "neither a .py file"),
                                     (str(file.with_name("gone.py")), "f", "", "does not exist")):
        with pytest.raises(ValueError, match=says):
            code_source(module, name, args)


def test_the_last_session_reopens_model_b_beside_model_a(qtbot, dialogs, demo_root, small_ckpt, tmp_path, wait_ready):
    """Issue 24: the compare slot is remembered and reopened as model B (two rows again); a model
    B that is gone is named in a dialog while model A and the dataset still open."""
    import shutil

    import torch

    from dmlviewer.core.models import build_model, default_config, save_checkpoint
    from dmlviewer.core.models.source import ModelSource

    torch.manual_seed(1)
    other = tmp_path / "other.pt"
    save_checkpoint(other, build_model(default_config(backbone="small_cnn", dim=32, image_size=64)))
    first = _new_window(qtbot)
    assert first.open_dataset(demo_root) and first.open_checkpoint(small_ckpt)
    first.open_compare(other)
    qtbot.waitUntil(lambda: first.session.slot("compare") is not None, timeout=30000)
    sha_b = first.session.slot("compare").info["sha256"]
    first.close()
    remembered = json.loads(settings.session_values()["last"])
    assert remembered["models"]["compare"] == ModelSource.from_text(str(other)).to_dict()

    second = _new_window(qtbot)
    second.open_in_background(last_session=settings.session_values())
    qtbot.waitUntil(lambda: not second.loading, timeout=120000)
    assert dialogs == []
    assert second.model_source.path == str(small_ckpt)
    slot = second.session.slot("compare")
    assert slot is not None and slot.source.path == str(other) and slot.info["sha256"] == sha_b
    wait_ready(second.pair_view, timeout=120000)
    rows = second.pair_view.rows
    qtbot.waitUntil(lambda: len(rows) == 2 and rows[1].state in ("ready", "failed"), timeout=60000)
    assert rows[1].state == "ready"  # the second row is back
    second.close()

    shutil.move(other, tmp_path / "moved.pt")
    third = _new_window(qtbot)
    third.open_in_background(last_session=settings.session_values())
    qtbot.waitUntil(lambda: not third.loading, timeout=120000)
    assert third.model_source.path == str(small_ckpt) and third.dataset_path == str(demo_root)
    assert third.session.slot("compare") is None
    assert [(t, m) for t, m, _ in dialogs] == [("Cannot reopen the last session's model B",
                                                f"checkpoint not found: {other}")]
    third.shutdown()


def test_features_never_cross_between_two_demo_folders_with_the_same_file_names(qtbot, dialogs, small_ckpt,
                                                                                 tmp_path, wait_ready):
    """Issue 30: two ``make-demo-data`` folders whose file names are the same (other seeds, other
    images). After File > Open Dataset on the second, the Retrieval panel never shows the first
    folder's features; after a restart neither folder shows the other's feature file."""
    from dmlviewer.core.data import make_demo_data
    from dmlviewer.core.evaluate import retrieve
    from dmlviewer.core.last_session import LastSession

    first_root = make_demo_data(tmp_path / "one" / "data", classes=3, per_class=5, size=64, seed=1)
    second_root = make_demo_data(tmp_path / "two" / "data", classes=3, per_class=4, size=64, seed=2)
    settings.set_output_dir(tmp_path / "outputs")
    window = _new_window(qtbot)
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(first_root)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    first_file = window.features_path
    seen: list = []  # (dataset folder, feature file) each time the Retrieval panel is given features
    window.session.events.features.connect(lambda *_: seen.append((window.dataset_path, window.features_path)))

    assert window.open_dataset(second_root)
    assert window.features_path != first_file  # not kept across the switch …
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    second_file = window.features_path
    assert second_file != first_file  # … and the second folder's own were computed
    assert all(path != first_file for _, path in seen)
    panel = window.retrieval
    assert panel.features is window.features and first_file not in panel.source.text()
    qtbot.waitUntil(lambda: len(panel.results) > 0 and not panel.searching, timeout=10000)
    row = list(window.features.paths).index(window.dataset.paths[window.query_index])
    assert panel.results == retrieve(window.features, row, panel.k_spin.value())

    # A restart: the last session is the second folder with its own features.
    window.close()
    restarted = _new_window(qtbot)
    restarted.open_in_background(last_session=settings.session_values())
    qtbot.waitUntil(lambda: not restarted.loading, timeout=120000)
    assert restarted.dataset_path == str(second_root) and restarted.features_path == second_file
    restarted.close()

    # A last session that names one folder with the other's feature file (as the old code left
    # it): that file is never shown with that folder, whichever way round.
    for root, wrong in ((first_root, second_file), (second_root, first_file)):
        remembered = json.loads(settings.session_values()["last"])
        remembered.update(dataset=str(root), features=wrong)
        settings.save_session(LastSession.from_dict(remembered).to_dict())
        again = _new_window(qtbot)
        heard: list = []
        again.session.events.features.connect(lambda *_, w=again: heard.append(w.features_path))
        again.open_in_background(last_session=settings.session_values())
        qtbot.waitUntil(lambda: not again.loading, timeout=120000)
        assert again.dataset_path == str(root)
        assert again.features_path != wrong and wrong not in heard
        qtbot.waitUntil(lambda: again.features is not None, timeout=60000)
        assert again.features_path != wrong and wrong not in heard
        again.shutdown()
        again.close()
    assert dialogs == []


def test_the_last_session_keeps_the_display_options_and_a_bad_value_keeps_its_default(qtbot, dialogs):
    """Issue 30: the display state is part of the last session (read from the session, not from
    combo boxes); settings text is untrusted: a value that cannot be used keeps its default."""
    first = _new_window(qtbot)
    view = first.pair_view
    view.sign_combo.setCurrentIndex(view.sign_combo.findData("signed"))  # through the toolbar
    first.session.display.colormap = "viridis"  # through the session, as a notebook would
    first.retrieval.k_spin.setValue(7)
    assert first.session.display.sign == "signed" and first.session.display.neighbours == 7
    first.close()
    assert json.loads(settings.session_values()["last"])["display"]["colormap"] == "viridis"

    second = _new_window(qtbot)
    display = second.session.display
    assert (display.sign, display.colormap, display.neighbours) == ("signed", "viridis", 7)
    assert second.pair_view.sign_combo.currentData() == "signed"
    assert second.pair_view.cmap_combo.currentData() == "viridis" and second.retrieval.k_spin.value() == 7
    second.close()

    remembered = json.loads(settings.session_values()["last"])
    remembered["display"].update(sign="rm -rf", opacity=7.5, colormap="inferno")
    settings.app_settings().setValue("session/last", json.dumps(remembered))
    third = _new_window(qtbot)
    display = third.session.display
    assert (display.sign, display.opacity, display.colormap) == ("positive", 0.6, "inferno")
    assert dialogs == []
    third.close()


def test_extraction_runs_the_shared_model_under_the_model_lock(window, demo_root, small_ckpt, tmp_path, qtbot,
                                                                monkeypatch):
    """Issue 30 item 7: the extraction job holds ``model_lock`` while it runs the model, as a
    device change (which moves the model under the lock) and the pair view do."""
    import dmlviewer.core.evaluate.extract as extract_module

    real = extract_module.extract_features
    inside, release, free = threading.Event(), threading.Event(), []

    def held(model, dataset, out, **kwargs):
        inside.set()  # the first step of the job: the model is about to run
        release.wait(60)
        yield from real(model, dataset, out, **kwargs)

    def try_lock() -> None:  # another thread, as the pair view's worker
        got = window.model_lock.acquire(blocking=False)
        free.append(got)
        if got:
            window.model_lock.release()

    monkeypatch.setattr(extract_module, "extract_features", held)
    settings.set_output_dir(tmp_path / "outputs")
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    try:
        assert inside.wait(60)
        probe = threading.Thread(target=try_lock)
        probe.start()
        probe.join(30)
        assert free == [False]  # the running extraction step holds the lock
    finally:
        release.set()
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    probe = threading.Thread(target=try_lock)
    probe.start()
    probe.join(30)
    assert free == [False, True]  # and lets it go when done
