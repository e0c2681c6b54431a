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


def test_two_models_add_the_diagnosis_the_disagreeing_pairs_and_the_sanity_curves(two, tmp_path, monkeypatch):
    dataset, models = two
    calls = {}
    from dmlviewer.core.explain import compare as compare_module

    original = compare_module.compare_models

    def spy(*args, **kwargs):  # the report imports compare_models when it runs
        for event in original(*args, **kwargs):
            if event.kind == "done":
                calls["compare"] = event.data["result"]
            yield event

    monkeypatch.setattr(compare_module, "compare_models", spy)
    out = tmp_path / "two.html"
    result = run_to_end(build_report(models, dataset, out, "test", failures=2, figures_dir=tmp_path / "svg"))
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
    assert {name for name in svgs if name.startswith("failure-")} == set(result["figures"]) - {
        "sanity-check", *(f"disagreement-{row['rank']:02d}" for row in shown)}
    assert not re.search(r"<script|https?:", re.sub(r'"data:image/[^"]*"', "", text))


def test_a_cancelled_report_leaves_no_file(two, tmp_path):
    dataset, models = two
    cancel = CancelToken()
    out = tmp_path / "cancelled.html"
    job = build_report(models[:1], dataset, out, "test", failures=3, figures_dir=tmp_path / "svg", cancel=cancel)
    with pytest.raises(Cancelled):
        for _event in job:
            cancel.cancel()  # checked again before each gallery figure: none is drawn
    assert list(tmp_path.iterdir()) == []
