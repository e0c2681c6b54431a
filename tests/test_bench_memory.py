"""``bench memory``: the measurement itself (peak RSS of a child, not of its parent), the
listing it opens, and small runs of both children (app window, feature extraction)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dmlviewer.bench.memory import app_memory, extract_memory, peak_rss_mb, write_listing

#: Resident memory of two runs of the same program differs by a few MiB (allocator, fonts).
RSS_TOLERANCE_MB = 16.0

linux_only = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/self/status")


def _child_peak_mb(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", f"{code}\nfrom dmlviewer.bench.memory import peak_rss_mb\n"
                          "print(peak_rss_mb())"], capture_output=True, text=True, check=True, timeout=60)
    return float(out.stdout.strip().splitlines()[-1])


@linux_only
def test_peak_rss_counts_the_childs_own_memory_not_its_parents():
    ballast = np.ones(256 * 1024 * 1024, dtype=np.uint8)  # 256 MiB resident in this process
    assert peak_rss_mb() >= 256
    bare = _child_peak_mb("import numpy as np")
    grown = _child_peak_mb("import numpy as np\nx = np.ones(128 * 1024 * 1024, dtype=np.uint8)")
    del ballast
    assert bare < 128  # ru_maxrss of that child would read at least this process's 256 MiB
    assert 120 <= grown - bare <= 140


def test_write_listing_truncates_to_a_readable_sop_listing(tmp_path):
    from dmlviewer.core.data import open_dataset

    assert write_listing(tmp_path, 301) == 301
    dataset = open_dataset(tmp_path)
    assert dataset.format == "sop" and len(dataset) == 301
    assert sorted(set(dataset.split.tolist())) == ["test", "train"]
    assert (dataset.split == "train").sum() == 150


def test_app_memory_with_a_listing_and_empty():
    empty = app_memory(dataset=False)
    listing = app_memory(2000)
    for report in (empty, listing):
        assert math.isfinite(report["rss_mb"]) and report["rss_mb"] > 0
        assert report["jobs"] == 0  # nothing (no automatic extraction) ran in the window
    assert empty["images"] == 0 and empty["rows_shown"] == 0
    assert listing["images"] == 2000
    # the browser showed rows and every missing image got its placeholder
    assert listing["rows_shown"] > 0 and listing["placeholders"] == listing["rows_shown"]
    assert listing["rss_mb"] >= empty["rss_mb"] - RSS_TOLERANCE_MB


def test_extract_memory_small_run():
    report = extract_memory(300, batch_size=64)
    assert report["images"] == 300
    assert report["seconds"] > 0 and report["file_mb"] > 0
    # 300 rows x (512-d embedding + raw) float32 at least
    assert report["file_mb"] >= 300 * 512 * 4 * 2 / 2**20
    assert report["rss_before_mb"] > 0 and report["rss_mb"] >= report["rss_before_mb"]
