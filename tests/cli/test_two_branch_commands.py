"""Every model command with a two-branch (cross-view) checkpoint (issue 25): each image goes
through its own branch (explain, faithfulness, occlusion, orientation, compare, localize's
nearest pairing), pairs of a cross-view dataset run street to aerial, and what cannot apply is
refused in one line with a non-zero exit, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_two_branch import tiny_two_branch

from dmlviewer.cli import main

SHAPES = {"query": [32, 128], "reference": [48, 48]}


def _two_branch(seed: int = 0):
    return tiny_two_branch(SHAPES["query"], SHAPES["reference"][0], seed, pooling="gap")


@pytest.fixture(scope="module")
def fx(tiny_demo_root, tmp_path_factory) -> dict:
    from dmlviewer.core.data.cross_view import make_cross_view_data
    from dmlviewer.core.models import build_model, default_config, save_checkpoint

    folder = tmp_path_factory.mktemp("two_branch_cli")
    cv = make_cross_view_data(folder / "cv", pairs=8, seed=4, aerial_size=48, panorama_shape=(32, 128))
    torch.manual_seed(1)
    one = save_checkpoint(folder / "one.pt", build_model(default_config(backbone="small_cnn", dim=16, image_size=48)))
    two = save_checkpoint(folder / "two.pt", _two_branch())
    street = cv / "streetview" / "panos" / "0000001.jpg"
    aerial = cv / "bingmap" / "19" / "0000001.jpg"
    assert street.exists() and aerial.exists()
    return {"cv": str(cv), "demo": str(tiny_demo_root), "one": str(one), "two": str(two), "street": str(street),
            "aerial": str(aerial), "folder": folder}


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, captured.out, captured.err


def _refused(capsys, argv: list[str], has: str) -> None:
    code, _, err = _run(capsys, argv)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code != 0 and len(errors) == 1 and has in errors[0], err


CPU = ["--device", "cpu"]


# ------------------------------------------------------------------ explain


def test_explain_a_street_aerial_pair_through_both_branches(fx, capsys, tmp_path):
    out = tmp_path / "e.npz"
    code, _, err = _run(capsys, ["explain", "--checkpoint", fx["two"], "--query", fx["street"],
                                 "--reference", fx["aerial"], "--out", out, *CPU])
    assert code == 0, err
    z = np.load(out)
    assert z["point_to_point"].shape == (2, 8, 3, 3)  # the panorama's grid against the aerial image's
    assert z["overall_query"].shape == (32, 128) and z["overall_reference"].shape == (48, 48)
    total = z["point_to_point"].sum() + z["bias_query"] + z["bias_reference"] + z["bias_both"]
    assert total == pytest.approx(float(z["similarity"]), abs=1e-5)
    from dmlviewer.core.data.images import load_image
    from dmlviewer.core.models import load_checkpoint

    model = load_checkpoint(fx["two"])[0]
    e = [torch.nn.functional.normalize(model(model.preprocess_of(side)(load_image(path))[None], side)
                                       .embedding, dim=1)[0]
         for side, path in (("query", fx["street"]), ("reference", fx["aerial"]))]
    assert float(z["similarity"]) == pytest.approx(float(e[0] @ e[1]), abs=1e-5)


@pytest.mark.parametrize("extra, has", [(["--size", "64"], "--size does not apply to a two-branch model"),
                                        (["--method", "grad_transfer", "--features", "{cv}/x.h5"],
                                         "grad_transfer is not available")])
def test_explain_refuses_what_a_two_branch_model_cannot_take(fx, capsys, tmp_path, extra, has):
    extra = [x.format(**fx) for x in extra]
    _refused(capsys, ["explain", "--checkpoint", fx["two"], "--query", fx["street"], "--reference", fx["aerial"],
                      "--out", tmp_path / "e.npz", *CPU, *extra], has)


# ------------------------------------------------------------------ localize, correspond


def test_localize_and_correspond_refuse_cross_view_data(fx, capsys):
    _refused(capsys, ["localize", "--checkpoint", fx["two"], "--dataset", fx["cv"], "--method", "decomposition",
                      *CPU], "no ground-truth boxes")
    _refused(capsys, ["correspond", "--checkpoint", fx["two"], "--dataset", fx["cv"], *CPU], "no part masks")


def test_localize_and_correspond_with_a_two_branch_model_on_a_one_branch_dataset(fx, capsys):
    code, out, err = _run(capsys, ["localize", "--checkpoint", fx["two"], "--dataset", fx["demo"], "--method", "all",
                                   "--pairing", "nearest", "--limit", "3", "--json", *CPU])
    assert code == 0, err
    assert "grad_transfer" not in {r["method"] for r in json.loads(out)}  # left out of "all" for two branches
    _refused(capsys, ["localize", "--checkpoint", fx["two"], "--dataset", fx["demo"], "--method", "grad_transfer",
                      "--limit", "2", *CPU], "grad_transfer is not available")
    code, out, err = _run(capsys, ["correspond", "--checkpoint", fx["two"], "--dataset", fx["demo"], "--pairs", "2",
                                   "--json", *CPU])
    assert code == 0 and json.loads(out)["num_pairs"] == 2, err


def test_nearest_pairing_embeds_candidates_with_the_reference_branch(fx):
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.explain.localization import choose_references, embed_images
    from dmlviewer.core.models import load_checkpoint

    model = load_checkpoint(fx["two"])[0]
    dataset = open_dataset(fx["demo"])
    indices = dataset.indices("test")[:6]
    q = embed_images(model, dataset, indices)
    r = embed_images(model, dataset, indices, side="reference")
    assert not np.allclose(q, r, atol=1e-3)  # the branches have their own weights
    sims = q @ r.T
    np.fill_diagonal(sims, -np.inf)
    np.testing.assert_array_equal(choose_references(model, dataset, indices, "nearest"), indices[sims.argmax(1)])


# ------------------------------------------------------------------ pairs of a cross-view dataset


def test_pairs_of_a_cross_view_dataset_run_street_to_aerial(fx):
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.data.cross_view import cross_view_pairs
    from dmlviewer.core.explain.correspondence import (
        different_class_pairs,
        same_class_pairs,
    )

    dataset = open_dataset(fx["cv"])
    pairs = cross_view_pairs(dataset)
    streets, aerials = set(pairs.street.tolist()), set(pairs.aerial.tolist())
    same = same_class_pairs(dataset, None, 20, seed=3)
    different = different_class_pairs(dataset, None, 20, seed=3)
    assert len(same) == len(pairs) and len(different) == len(pairs)  # every street once
    for q, r in same + different:
        assert q in streets and r in aerials
    for q, r in same:
        assert dataset.labels[q] == dataset.labels[r]
    for q, r in different:
        assert dataset.labels[q] != dataset.labels[r]


# ------------------------------------------------------------------ occlusion and faithfulness


def test_occlusion_of_the_aerial_image_is_embedded_by_the_reference_branch(fx):
    from dmlviewer.core.data.images import load_image
    from dmlviewer.core.explain.occlusion import occlusion
    from dmlviewer.core.explain.perturb import baseline_input, cell_labels, compose
    from dmlviewer.core.progress import run_to_end

    model = load_checkpoint_eval(fx["two"])
    street, aerial = load_image(fx["street"]), load_image(fx["aerial"])
    maps = run_to_end(occlusion(model, street, aerial, "blur", use_cache=False))
    assert maps.grid_query == (2, 8) and maps.grid_reference == (3, 3)
    assert maps.delta_query.shape == (16, 16) and maps.delta_reference.shape == (9, 16)

    def embed(side, x):
        with torch.no_grad():
            return torch.nn.functional.normalize(model(x[None], side).embedding, dim=1)[0]

    x = model.preprocess_of("reference")(aerial)
    labels = torch.from_numpy(cell_labels(x.shape[1:], (3, 3)))
    base = baseline_input(x, "blur", (3, 3), seed=1)  # the reference side's seed (seed + 1)
    keep = torch.ones(9, dtype=torch.bool)
    keep[4] = False
    expected = (embed("reference", x) - embed("reference", compose(x, base, labels, keep[None])[0])).numpy()
    np.testing.assert_allclose(maps.delta_reference[4], expected, atol=2e-5)
    np.testing.assert_allclose(maps.embedding_reference, embed("reference", x).numpy(), atol=2e-5)
    # the query branch would embed the same copy differently (the check can fail)
    wrong = (embed("query", x) - embed("query", compose(x, base, labels, keep[None])[0])).numpy()
    assert np.abs(wrong - expected).max() > 1e-3


def load_checkpoint_eval(path: str):
    from dmlviewer.core.models import load_checkpoint

    return load_checkpoint(path)[0].eval()


def test_faithfulness_perturbs_the_street_through_the_query_branch(fx):
    from dmlviewer.core.data.images import load_image
    from dmlviewer.core.explain.faithfulness import available_methods, pair_faithfulness
    from dmlviewer.core.explain.pair import explain_pair
    from dmlviewer.core.progress import run_to_end

    model = load_checkpoint_eval(fx["two"])
    assert "grad_transfer" not in available_methods(model)
    street, aerial = load_image(fx["street"]), load_image(fx["aerial"])
    result = run_to_end(pair_faithfulness(model, street, aerial, ["decomposition", "occlusion"], steps=4,
                                          oracle=False))
    similarity = explain_pair(model, street, aerial).similarity
    assert result["grid"] == [2, 8]  # the panorama's grid
    for name in ("decomposition", "occlusion", "random"):
        # nothing removed: the unperturbed street by the query branch against the aerial's embedding
        assert result["methods"][name]["deletion"][0] == pytest.approx(similarity, abs=1e-4)
        assert result["methods"][name]["insertion"][-1] == pytest.approx(similarity, abs=1e-4)


def test_faithfulness_cli_on_cross_view_pairs(fx, capsys):
    code, out, err = _run(capsys, ["faithfulness", "--checkpoint", fx["two"], "--dataset", fx["cv"], "--method",
                                   "all", "--pairs", "2", "--steps", "2", "--oracle-pairs", "1", "--json", *CPU])
    assert code == 0, err
    methods = {r["method"] for r in json.loads(out)}
    assert {"decomposition", "occlusion", "point_to_point", "random", "oracle"} <= methods
    assert "grad_transfer" not in methods
    _refused(capsys, ["faithfulness", "--checkpoint", fx["two"], "--dataset", fx["cv"], "--method", "grad_transfer",
                      "--pairs", "2", *CPU], "grad_transfer")


# ------------------------------------------------------------------ compare, orientation


def test_compare_two_branch_with_one_branch_and_randomize(fx, capsys):
    code, out, err = _run(capsys, ["compare", "--checkpoint", fx["two"], "--checkpoint", fx["one"], "--dataset",
                                   fx["cv"], "--pairs", "2", "--device", "cpu", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    for row in doc["pairs"]:
        assert "streetview" in row["query_path"] and "bingmap" in row["reference_path"]
    code, out, err = _run(capsys, ["compare", "--checkpoint", fx["two"], "--randomize", "--dataset", fx["cv"],
                                   "--pairs", "1", "--max-depths", "2", "--method", "decomposition,occlusion",
                                   "--device", "cpu", "--json"])
    assert code == 0, err
    labels = [d["label"] for d in json.loads(out)["agreement"]["depths"]]
    assert labels[0].startswith("head") and all("both branches" in label for label in labels)
    _refused(capsys, ["compare", "--checkpoint", fx["two"], "--checkpoint", fx["one"], "--dataset", fx["cv"],
                      "--size", "64", "--device", "cpu"], "--size does not apply")


def test_randomization_cascade_randomizes_both_branches_side_by_side(fx):
    from dmlviewer.core.explain.randomization import (
        cascade_steps,
        cascade_units,
        randomized_copy,
    )

    model = load_checkpoint_eval(fx["two"])
    units = cascade_units(model)
    for unit in units:
        sides = {n.split(".", 1)[0] for n in unit}
        assert sides == {"query", "reference"}
        assert sorted(n.split(".", 1)[1] for n in unit if n.startswith("query.")) == \
            sorted(n.split(".", 1)[1] for n in unit if n.startswith("reference."))
    merged = cascade_steps(model, max_steps=2)
    assert len(merged) == 2 and merged[0].modules == ("query.head.projection.out", "reference.head.projection.out")
    first = randomized_copy(model, cascade_steps(model)[0])
    for side in ("query", "reference"):
        head = dict(model.branch(side).head.named_parameters())
        changed = dict(first.branch(side).head.named_parameters())
        assert any(not torch.equal(head[k], changed[k]) for k in head)


def test_orientation_with_two_branch_and_one_branch_models(fx, capsys):
    for checkpoint in (fx["two"], fx["one"]):
        code, out, err = _run(capsys, ["orientation", "--checkpoint", checkpoint, "--dataset", fx["cv"], "--json",
                                       *CPU])
        assert code == 0, err
        doc = json.loads(out)
        assert doc["num_pairs"] == 2 and {"partial_map", "overall_map"} <= set(doc)
    _refused(capsys, ["orientation", "--checkpoint", fx["two"], "--dataset", fx["demo"], *CPU], "cross-view")


def test_bench_takes_no_checkpoint():
    """No ``bench`` sub-command reads a checkpoint (they build their own models): nothing to
    make two-branch aware there. Fails when one gains a checkpoint option."""
    import argparse

    from dmlviewer.commands import bench

    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers())
    assert "--checkpoint" not in Path(bench.__file__).read_text()
