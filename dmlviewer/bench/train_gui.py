"""``bench train-gui``: a training run started from the app's training dialog against the same
run from the command line (``ratio`` = GUI seconds / CLI seconds; target at most 1.10).

CLI: ``python -m dmlviewer train ...`` in a fresh process, timed from launch to exit (so it
pays for importing torch, as a user typing the command does). GUI: in a fresh process, an
offscreen app with the real :class:`~dmlviewer.gui.training.dialog.TrainingDialog` and
:class:`~dmlviewer.gui.jobs.runner.JobRunner`; the dialog's form is filled with the same settings,
Start is clicked, and the time runs until the run's end is shown (the training process is
spawned, imports torch, trains while the dialog draws its live plots). The two are repeated
alternately so that load from other processes hits both alike; the medians are compared.
Default: small_cnn at 64 px on 12 synthetic classes, 3 epochs; ``--quick``: 2 epochs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dmlviewer.bench.machine import describe

#: the GUI side, run as ``python -c`` in a fresh process; prints its wall time as JSON
_GUI_SCRIPT = r"""
import json, sys, time
from PySide6.QtCore import QEventLoop
from PySide6.QtWidgets import QApplication
app = QApplication([])
from dmlviewer.core.train import TrainConfig
from dmlviewer.gui.training.dialog import TrainingDialog
from dmlviewer.gui.jobs.runner import JobRunner
runner = JobRunner()
dialog = TrainingDialog(runner)
dialog.form.set_config(TrainConfig.from_dict(json.loads(sys.argv[1])))
dialog.show()
app.processEvents()
loop = QEventLoop()
first = []
runner.job_progress.connect(lambda job, event: first or first.append(time.perf_counter()))
for signal in (runner.job_finished, runner.job_failed, runner.job_cancelled):
    signal.connect(lambda *args: loop.quit())
start = time.perf_counter()
job = dialog.start()
assert job is not None, dialog.problems.text()
loop.exec()  # as the app's own event loop: nothing polls
seconds = time.perf_counter() - start
sys.stdout.write(json.dumps({"seconds": seconds, "state": job.state,
                             "first_event_s": first[0] - start if first else None}) + "\n")
"""


def _config(data: Path, out: Path, epochs: int) -> dict:
    from dmlviewer.core.train import apply_recipe

    return apply_recipe("default", dict(dataset=str(data), out=str(out), backbone="small_cnn", image_size=64,
                                        dim=64, epochs=epochs, device="cpu", seed=0)).to_dict()


def _cli_args(config: dict) -> list[str]:
    args = ["--recipe", "default"]
    for key in ("dataset", "out", "backbone", "image_size", "dim", "epochs", "device", "seed"):
        args += [f"--{key.replace('_', '-')}", str(config[key])]
    return args


def run(args) -> dict:
    from dmlviewer.core.data import make_demo_data

    quick = bool(getattr(args, "quick", False))
    epochs, repeat = (2, 1) if quick else (3, 2)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    gui_s, cli_s = [], []
    with tempfile.TemporaryDirectory(prefix="dmlviewer-bench-") as tmp:
        data = make_demo_data(Path(tmp) / "data", classes=12, per_class=16, size=64, seed=0)
        for i in range(repeat):
            out = Path(tmp) / f"cli{i}"
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "dmlviewer", "train", *_cli_args(_config(data, out, epochs))],
                           check=True, env=env, capture_output=True)
            cli_s.append(time.perf_counter() - start)
            config = _config(data, Path(tmp) / f"gui{i}", epochs)
            done = subprocess.run([sys.executable, "-c", _GUI_SCRIPT, json.dumps(config)], check=True, env=env,
                                  capture_output=True, text=True)
            answer = json.loads(done.stdout.strip().splitlines()[-1])
            if answer["state"] != "finished":
                raise RuntimeError(f"the GUI run ended {answer['state']}: {done.stderr[-2000:]}")
            gui_s.append(answer["seconds"])
    gui, cli = sorted(gui_s)[len(gui_s) // 2], sorted(cli_s)[len(cli_s) // 2]
    return {"benchmark": "train-gui", "ratio": round(gui / cli, 3), "gui_s": [round(x, 2) for x in gui_s],
            "cli_s": [round(x, 2) for x in cli_s], "epochs": epochs, "load_avg": round(os.getloadavg()[0], 2),
            **describe()}
