"""The report of two models: a gallery per model, compare's diagnosis and its most disagreeing
pairs (the pairs and numbers of the ``compare_models`` call, not recomputed), the sanity-check
curves, and every figure as SVG; cancelling leaves no file."""

from __future__ import annotations

import re

import pytest
import torch

from dmlviewer.core.data import open_dataset
from dmlviewer.core.models import build_model, default_config
from dmlviewer.core.progress import CancelToken, Cancelled, run_to_end
from dmlviewer.core.report import ReportModel, build_report
from dmlviewer.core.report import report as report_module


def _model(seed: int):
    torch.manual_seed(seed)
    return build_model(default_config(backbone="small_cnn", dim=32, image_size=64), load_pretrained=False).eval()


@pytest.fixture(scope="module")
def two(tiny_demo_root):
    return open_dataset(tiny_demo_root), [ReportModel("A", "random A", _model(0)), ReportModel("B", "random B", _model(1))]


CHANGES = 2


@pytest.fixture(scope="module")
def built(two, tmp_path_factory):
    """The two-model report (failures 2, changes 2), with what compare_models returned to it."""
    dataset, models = two
    tmp_path = tmp_path_factory.mktemp("two_report")
    calls = {}
    from dmlviewer.core.explain import compare as compare_module

    original = compare_module.compare_models

    def spy(*args, **kwargs):  # the report imports compare_models when it runs
        for event in original(*args, **kwargs):
            if event.kind == "done":
                calls["compare"] = event.data["result"]
            yield event

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compare_module, "compare_models", spy)
        out = tmp_path / "two.html"
        result = run_to_end(build_report(models, dataset, out, "test", failures=2, figures_dir=tmp_path / "svg",
                                         changes=CHANGES))
    return result, out, calls, tmp_path


def test_two_models_add_the_diagnosis_the_disagreeing_pairs_and_the_sanity_curves(built):
    result, out, calls, tmp_path = built
    text = out.read_text(encoding="utf-8")
    for heading in ("Retrieval failures · model A", "Retrieval failures · model B", "Two models: diagnosis",
                    "Pairs where the two models", "Sanity check"):
        assert heading in text
    shown = calls["compare"]["pairs"][:report_module.DISAGREEING_SHOWN]
    for row in shown:  # the call's ranking and numbers, drawn
        assert f'id="disagreement-{row["rank"]:02d}"' in text
        assert f"Spearman of the overall maps {row['overall_map_spearman']:.3f}" in text
    mean = calls["compare"]["agreement"]["overall_map_spearman"]["mean"]
    assert f"{mean:.3f}" in text
    # the sanity check: one curve per method for each model, inline SVG with text as text
    assert text.count("Sanity check, model ") == 2 and text.count("<polyline") >= 2 * 3
    svgs = {p.stem for p in (tmp_path / "svg").glob("*.svg")}
    assert "sanity-check" in svgs and {f"disagreement-{row['rank']:02d}" for row in shown} <= svgs
    assert {name for name in svgs if name.startswith("failure-")} == {
        name for name in result["figures"] if name.startswith("failure-")}
    assert svgs == set(result["figures"])
    assert not re.search(r"<script|https?:", re.sub(r'"data:image/[^"]*"', "", text))


def test_what_changed_counts_the_change_table_and_its_galleries_read_in_chromium(two, built):
    """The section's table is the change table of the report's embeddings (the counts agree
    with each model's Recall@1 in the metrics table), its galleries hold min(N, broken) and
    min(N, fixed) entries, each drawn for both models, and in headless Chromium every image
    decodes and nothing is fetched."""
    from report_browser import assert_self_contained, read_in_chromium

    dataset, models = two
    result, out, _, tmp_path = built
    text = out.read_text(encoding="utf-8")
    assert "<h2>What changed</h2>" in text and "Classes that gained and lost most Recall@1" in text
    changes = result["changes"]
    n = changes["num_queries"]
    for k, name in enumerate(("A", "B")):
        metrics = result["models"][name]["metrics"]
        assert metrics["num_queries"] == n
        only = changes["a_only"] if k == 0 else changes["b_only"]
        assert changes["both_right"] + only == round(metrics["recall@1"] * n)
    broken = [f for f in result["figures"] if f.startswith("broken-")]
    fixed = [f for f in result["figures"] if f.startswith("fixed-")]
    assert (len(broken), len(fixed)) == (min(CHANGES, changes["a_only"]), min(CHANGES, changes["b_only"]))
    assert broken or fixed  # the two random models disagree on some queries: something to look at
    assert f'<td class="num">{changes["both_right"]}</td>' in text
    assert_self_contained(text)
    seen = read_in_chromium(out, tmp_path)
    assert seen["fetched"] == []
    assert [f for f in seen["figures"] if f.startswith(("broken-", "fixed-"))] == broken + fixed
    section = [i for i in seen["images"] if i["figure"].startswith(("broken-", "fixed-"))]
    # per entry two rows (A's pair, B's pair): 2 overall maps, the matches, the points, 3 partial maps
    assert len([i for i in section if i["cls"] == "map"]) == (len(broken) + len(fixed)) * 2 * 7
    assert all(i["complete"] and i["width"] > 0 and i["height"] > 0 for i in seen["images"])


def test_a_cancelled_report_leaves_no_file(two, tmp_path):
    dataset, models = two
    cancel = CancelToken()
    out = tmp_path / "cancelled.html"
    job = build_report(models[:1], dataset, out, "test", failures=3, figures_dir=tmp_path / "svg", cancel=cancel)
    with pytest.raises(Cancelled):
        for _event in job:
            cancel.cancel()  # checked again before each gallery figure: none is drawn
    assert list(tmp_path.iterdir()) == []
