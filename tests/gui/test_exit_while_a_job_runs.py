"""Issue 42 item 9: a script (``dmlviewer.view(..., block=False)``) or a program holding a
``MainWindow`` that ends while features are computed exits cleanly: status 0, no "QThread:
Destroyed while thread is still running" abort (134), and no half-written feature file left in
the output folder. Run as real processes in the environment of ``_isolated``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from _isolated import app_env

pytestmark = pytest.mark.gui

SCRIPT = textwrap.dedent('''
    import sys, time
    from dmlviewer.core.data import make_demo_data
    from dmlviewer.core.models import build_model, default_config, save_checkpoint

    door, root, ckpt = sys.argv[1:4]
    make_demo_data(root, classes=4, per_class=150, size=64, seed=0)
    save_checkpoint(ckpt, build_model(default_config(backbone="small_cnn", dim=32, image_size=64)))
    if door == "view":
        import dmlviewer
        window = dmlviewer.view(ckpt, root, block=False).window
    else:
        from dmlviewer.gui.window.app import create_app
        from dmlviewer.gui.window.main_window import MainWindow
        create_app()
        window = MainWindow()
        window.show()
        assert window.open_checkpoint(ckpt) and window.open_dataset(root)
    from PySide6.QtWidgets import QApplication
    deadline = time.time() + 120
    while time.time() < deadline:  # events until the extraction runs (600 images: seconds)
        QApplication.processEvents()
        job = window.runner.current
        if job is not None and job.name.startswith("Extract") and job.progress is not None:
            break
        time.sleep(0.01)
    job = window.runner.current
    print("at exit:", job.name if job is not None else None, job.state if job is not None else None, flush=True)
''')


@pytest.mark.parametrize("door", ["view", "window"])
def test_a_program_that_ends_while_features_are_computed_exits_cleanly(tmp_path, door):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = app_env(tmp_path, QT_QPA_PLATFORM="offscreen")
    done = subprocess.run([sys.executable, str(script), door, str(tmp_path / "data"), str(tmp_path / "ck.pt")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert "at exit: Extract features of data" in done.stdout and "running" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0, done.stderr[-3000:]
    assert "QThread: Destroyed" not in done.stderr
    written = [p.name for p in (tmp_path / "documents").rglob("*") if ".h5" in p.name or ".tmp" in p.name]
    assert written == []  # the cancelled extraction's temporary file is removed, no feature file
