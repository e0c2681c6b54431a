"""GUI test fixtures: small synthetic data and random-weight checkpoints, isolated settings.

Everything is built on the fly (nothing downloaded): a 4-class synthetic parts dataset from
``core.data.make_demo_data`` and small_cnn checkpoints with random weights saved by
``core.models.save_checkpoint`` (one without groups, one with an A-grouping head). QSettings
go to a per-test folder and QStandardPaths (logs, cache) to a per-session folder, so tests
never touch the user's files.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
_HOME = Path(tempfile.mkdtemp(prefix="dmlviewer-gui-tests-"))
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
for _var, _sub in (("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config")):
    os.environ[_var] = str(_HOME / _sub)
# The output folder defaults to <documents>/dmlviewer: Qt reads the documents folder from here.
(_HOME / "config").mkdir(parents=True, exist_ok=True)
(_HOME / "config" / "user-dirs.dirs").write_text(f'XDG_DOCUMENTS_DIR="{_HOME / "documents"}"\n')

GRID_CLASSES = 4
PER_CLASS = 5
IMAGE_SIZE = 64


def _save_model(path: Path, **overrides) -> Path:
    import torch

    from dmlviewer.core.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    config = default_config(backbone="small_cnn", dim=32, image_size=IMAGE_SIZE, **overrides)
    save_checkpoint(path, build_model(config))
    return path


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory) -> Path:
    from dmlviewer.core.data import make_demo_data

    root = tmp_path_factory.mktemp("demo") / "data"
    make_demo_data(root, classes=GRID_CLASSES, per_class=PER_CLASS, size=IMAGE_SIZE, seed=0)
    return root


@pytest.fixture(scope="session")
def small_ckpt(tmp_path_factory) -> Path:
    return _save_model(tmp_path_factory.mktemp("ckpt") / "small.pt")


@pytest.fixture(scope="session")
def agroup_ckpt(tmp_path_factory) -> Path:
    return _save_model(tmp_path_factory.mktemp("ckpt") / "agroup.pt", grouping="a", groups=4)


@pytest.fixture(autouse=True)
def gui_thread_garbage_collection(qapp):
    """As in the app (``gui.window.collector``): Qt objects left in cycles are freed on the GUI thread,
    never by a worker thread; after the test its garbage is collected here, and the tests
    outside this folder run with the interpreter's automatic collection."""
    import gc

    from dmlviewer.gui.window import collector

    collector.install(qapp)
    yield
    gc.collect()
    gc.enable()


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path, qapp):
    """QSettings of this test live in its own folder."""
    from PySide6.QtCore import QSettings

    from dmlviewer.gui.window import settings

    qapp.setOrganizationName(settings.ORGANIZATION)
    qapp.setApplicationName(settings.APPLICATION)
    QSettings.setPath(QSettings.IniFormat, QSettings.UserScope, str(tmp_path / "settings"))
    yield tmp_path / "settings"


@pytest.fixture(autouse=True)
def no_modal_questions(monkeypatch):
    """A question box (closing with a job running) would wait for a click that never comes:
    it answers Yes (cancel the jobs and close), as a user ending the session would."""
    from PySide6.QtWidgets import QMessageBox

    asked: list[str] = []

    def answer(parent, title, text, *args, **kwargs):
        asked.append(text)
        return QMessageBox.Yes

    monkeypatch.setattr(QMessageBox, "question", staticmethod(answer))
    return asked


@pytest.fixture
def dialogs(monkeypatch) -> list[tuple[str, str, str | None]]:
    """Records every error dialog (title, message, details) instead of showing it."""
    from dmlviewer.gui.common import errors

    calls: list[tuple[str, str, str | None]] = []
    monkeypatch.setattr(errors, "show_error", lambda parent, title, message, details=None, **_options:
                        calls.append((title, message, details)))
    return calls


@pytest.fixture
def window(qtbot, dialogs):
    """A shown main window (1400 x 900) with recorded dialogs; background work stopped after."""
    from dmlviewer.gui.window.main_window import MainWindow

    win = MainWindow()
    qtbot.addWidget(win)
    win.resize(1400, 900)
    win.show()
    qtbot.waitExposed(win)
    win.dialogs = dialogs
    yield win
    win.shutdown()


@pytest.fixture
def wait_ready(qtbot):
    """``wait_ready(view)``: wait until a pair view has prepared its pair."""

    def wait(view, timeout: int = 30000) -> None:
        qtbot.waitUntil(lambda: view.state in ("ready", "failed"), timeout=timeout)
        assert view.state == "ready"

    return wait


@pytest.fixture
def runner(qtbot):
    """A job runner shut down (jobs cancelled, children ended) after the test."""
    from dmlviewer.gui.jobs.runner import JobRunner

    r = JobRunner()
    yield r
    r.shutdown(30)
