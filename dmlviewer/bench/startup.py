"""``bench startup``: how soon the app shows something after ``dmlviewer gui`` starts.

Starts the real command in a fresh process (offscreen, isolated settings) on a small synthetic
dataset and a random small_cnn checkpoint, and reads the milestones the app records (seconds
since its process started, ``$DMLVIEWER_STARTUP_REPORT``): ``splash`` (Qt up, splash painted),
``window`` (main window shown), ``loaded`` (the checkpoint and the dataset read in the
background, torch imported) and ``pair`` (the first pair explained). The baseline, measured in
the same run, is a bare PySide6 process that creates its QApplication and shows one empty
window: ``ratio`` is our ``window`` over that. Each is the median of ``repeats`` runs. The
target is a window (or the splash) within 2 s; the heavy part (``loaded``) happens with the
window already up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dmlviewer.bench.machine import describe

TARGET_S = 2.0
_BARE = r'''
import json, os, sys, time
from pathlib import Path
from PySide6.QtWidgets import QApplication, QWidget
from dmlviewer.gui.window.app import process_age_s
app = QApplication([])
w = QWidget(); w.resize(400, 300); w.show(); app.processEvents()
Path(sys.argv[1]).write_text(json.dumps({"window": process_age_s()}))
'''


def _env(home: Path, report: Path) -> dict:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(home / "config"),
               XDG_DATA_HOME=str(home / "data"), XDG_CACHE_HOME=str(home / "cache"))
    env["DMLVIEWER_STARTUP_REPORT"] = str(report)
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "user-dirs.dirs").write_text(f'XDG_DOCUMENTS_DIR="{home / "documents"}"\n')
    return env


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if key in r]
    return round(statistics.median(values), 3) if values else None


def run(args: argparse.Namespace) -> dict:
    from dmlviewer.core.data import make_demo_data
    from dmlviewer.core.models import build_model, default_config, save_checkpoint

    repeats = 2 if getattr(args, "quick", False) else 3
    with tempfile.TemporaryDirectory(prefix="dmlviewer-bench-startup-") as tmp:
        tmp = Path(tmp)
        data = make_demo_data(tmp / "data", classes=4, per_class=5, size=64, seed=0)
        checkpoint = tmp / "model.pt"
        save_checkpoint(checkpoint, build_model(default_config(backbone="small_cnn", dim=32, image_size=64)))
        ours, bare = [], []
        for k in range(repeats):
            report = tmp / f"ours-{k}.json"
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "dmlviewer", "gui", "--dataset", str(data), "--checkpoint",
                                   str(checkpoint), "--screenshot", str(tmp / "shot.png")],
                                  env=_env(tmp / f"home-{k}", report), capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"dmlviewer gui failed: {done.stderr.strip()[-500:]}")
            result = json.loads(report.read_text())
            result["exit"] = time.perf_counter() - start
            ours.append(result)
            report = tmp / f"bare-{k}.json"
            subprocess.run([sys.executable, "-c", _BARE, str(report)], env=_env(tmp / f"bare-{k}", report),
                           check=True, capture_output=True, timeout=300)
            bare.append(json.loads(report.read_text()))
    window, baseline = _median(ours, "window"), _median(bare, "window")
    return {
        "splash_s": _median(ours, "splash"),
        "window_s": window,
        "loaded_s": _median(ours, "loaded"),
        "pair_s": _median(ours, "pair"),
        "bare_qt_window_s": baseline,
        "ratio": round(window / baseline, 3) if window and baseline else None,
        "target_s": TARGET_S,
        "repeats": repeats,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "machine": describe(),
    }
