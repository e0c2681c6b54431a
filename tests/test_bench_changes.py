"""``bench changes`` at a small size: it reports the issue's figures from one run (the times
are not asserted: speed is what the bench prints, not a test)."""

from __future__ import annotations

import argparse

from dmlviewer.bench import changes as bench_changes


def test_bench_changes_reports_both_times_and_the_ratio(monkeypatch):
    monkeypatch.setattr(bench_changes, "N_QUICK", 1500)
    report = bench_changes.run(argparse.Namespace(quick=True, device="cpu"))
    assert report["n"] == 1500 and report["dim"] == bench_changes.DIM and report["k"] == 16
    assert report["ratio"] == report["seconds"] / report["baseline_s"]
    assert len(report["baseline_runs_s"]) == 2 and report["baseline_s"] == sum(report["baseline_runs_s"]) / 2
    assert 0 < report["num_queries"] <= 1500 and report["broken"] > 0 and report["fixed"] > 0
    assert set(report["overlap"]) == {"1", "4", "16"}


def test_bench_matrices_are_float32_unit_rows_as_stored_features():
    """Both sides search the same float32 matrices (a float64 baseline was once twice as slow)."""
    import numpy as np

    a, b, labels = bench_changes.matrices(50, dim=8)
    assert a.dtype == b.dtype == np.float32 and labels.dtype == np.int64
    assert np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-5) and np.allclose(np.linalg.norm(b, axis=1), 1,
                                                                                   atol=1e-5)
