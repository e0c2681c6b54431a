"""Smoke runs of the scale benchmarks' children on small inputs: the figures they report are
there and consistent (the timings themselves are printed by ``dmlviewer bench``, not asserted)."""

from __future__ import annotations


import pytest

from dmlviewer.bench import search as bench_search
from dmlviewer.bench.index import browser_timings, write_sop_listing
from dmlviewer.bench.child import run_child
from dmlviewer.core.data import open_dataset

pytestmark = pytest.mark.slow


def test_search_child_reports_the_issue_keys():
    report = run_child("dmlviewer.bench.search", "_child", {"n": 3000}, timeout_s=300)
    assert {"n", "dim", "query_ms", "recall@10", "build_s", "peak_rss_mb", "exact_query_ms"} <= set(report)
    assert report["n"] == 3000 and report["dim"] == bench_search.DIM
    if report["query_ms"] is not None:  # faiss installed: below MIN_IVF_ROWS the index is flat (exact)
        assert report["kind"] == "Flat" and report["recall@10"] == 1.0
        assert report["build_s"] > 0 and report["peak_rss_mb"] > 0


def test_scaled_sop_listing_keeps_the_proportions(tmp_path):
    assert write_sop_listing(tmp_path, images=10_000) == 10_000
    dataset = open_dataset(tmp_path)
    assert len(dataset) == 10_000 and dataset.format == "sop"
    assert 1700 <= dataset.num_classes <= 2000  # about 5.3 images per product, as SOP


def test_browser_child_filters_searches_and_scrolls(tmp_path):
    root = tmp_path / "sop"
    root.mkdir()
    write_sop_listing(root, images=5000)
    report = browser_timings(root, timeout_s=300)
    assert report["images"] == 5000 and report["columns"] >= 1
    assert set(report["filter_ms"]) == {"split_test", "class", "all"}
    dataset = open_dataset(root)
    want = sum("_3.jpg" in p.rsplit("/", 1)[-1].lower() for p in dataset.paths)
    assert report["search_rows"]["_3.jpg"] == want > 0
    assert report["scroll_p50_ms"] <= report["scroll_p95_ms"] <= report["scroll_max_ms"]
    assert report["rss_mb"] > 0
