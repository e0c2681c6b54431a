"""Shared fixtures: small synthetic data and models built on the fly (nothing downloaded)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
if os.environ["QT_QPA_PLATFORM"] == "offscreen":
    # Qt's offscreen screen is 800 x 800 unless configured; the app fits its windows to the
    # screen, so the tests get a desktop-sized one (1600 x 1000).
    _screen = Path(tempfile.mkdtemp(prefix="dmlviewer-screen-")) / "screen.json"
    atexit.register(shutil.rmtree, _screen.parent, ignore_errors=True)
    _screen.write_text(json.dumps({"screens": [
        {"name": "desktop", "x": 0, "y": 0, "width": 1600, "height": 1000, "logicalDpi": 96,
         "logicalBaseDpi": 96, "dpr": 1}]}))
    os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={_screen}"


# --- data: the synthetic parts dataset, small (owner: core/data) ---
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_demo_root(tmp_path_factory):
    """A small synthetic parts dataset (6 classes x 4 images of 64 px, seed 0): CUB layout
    plus part masks, written once per test session. Open it with ``open_dataset``."""
    from dmlviewer.core.data import make_demo_data

    return make_demo_data(tmp_path_factory.mktemp("demo") / "data", classes=6, per_class=4, size=64, seed=0)
