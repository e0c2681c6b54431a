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
