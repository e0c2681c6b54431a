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

    from dmlviewer.core.explain import pair as pair_module

    explain = pair_module.explain_pair
    calls["explained"] = []

    def explained(*args, **kwargs):  # the gallery's explanations, in the order the report makes them
        expl = explain(*args, **kwargs)
        calls["explained"].append(expl)
        return expl

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compare_module, "compare_models", spy)
        patch.setattr(pair_module, "explain_pair", explained)
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
    # per entry one picture of its scene (A's pair, B's pair)
    assert len([i for i in section if i["cls"] == "map"]) == len(broken) + len(fixed)
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


def _bar_ends(svg_text: str) -> dict[str, list[str]]:
    """The printed tick labels of each colour bar of a scene's SVG, by the bar's id."""
    import xml.etree.ElementTree as ET

    ns = "{http://www.w3.org/2000/svg}"
    bars = {}
    for group in ET.fromstring(svg_text).iter(f"{ns}g"):
        if group.get("id", "").startswith("colorbar "):
            texts = ["".join(t.itertext()).strip() for t in group.iter(f"{ns}text")]
            bars[group.get("id")] = [t for t in texts if re.fullmatch(r"-?[\d.e+-]+", t)]
    return bars


def test_the_gallery_colour_bars_are_the_explanations_grid_cells(built):
    """The first failure's figure (--figures SVG, drawn from the scene): each colour bar's ends
    are 0 and the largest cell of the map it colours, in the explanation's grid (issue 39 item
    4): the overall maps of both pairs and the partial map of the query's strongest point. The
    old panels printed the same kind of number but were no scene: their SVG named no bars."""
    import numpy as np

    from dmlviewer.core.figures.pair import strongest_points

    result, _, calls, tmp_path = built
    assert "failure-A-01" in result["figures"]
    bars = _bar_ends((tmp_path / "svg" / "failure-A-01.svg").read_text(encoding="utf-8"))
    wrong, same = calls["explained"][:2]  # failure A #1: its wrong top-1, then its best same class
    expected = {}
    for first, expl in ((1, wrong), (3, same)):
        _, x, y, _ = strongest_points(expl, 1)[0]
        overall = {side: np.maximum(expl.overall_grid("decomposition", side), 0).max()
                   for side in ("query", "reference")}
        partial = np.maximum(expl.partial_map("query", x, y), 0).max()
        expected[f"colorbar {first} query"] = overall["query"]
        expected[f"colorbar {first} reference"] = overall["reference"]
        expected[f"colorbar {first + 1} query"] = overall["query"]
        expected[f"colorbar {first + 1} reference"] = partial
    assert set(bars) == set(expected)
    for name, top in expected.items():
        assert top > 0
        assert bars[name] == ["0", f"{top:.3g}"], name

