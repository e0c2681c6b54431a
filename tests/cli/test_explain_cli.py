"""``dmlviewer explain``, ``localize`` and ``correspond`` end to end on the tiny parts dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dmlviewer.cli import main
from dmlviewer.core.data import open_dataset
from dmlviewer.core.evaluate import read_features, write_features
from dmlviewer.core.explain.localization import embed_images
from dmlviewer.core.models import build_model, default_config, save_checkpoint

NPZ_KEYS = {"similarity", "point_to_point", "bias_query", "bias_reference", "bias_both",
            "overall_query", "overall_reference", "grid_query", "grid_reference", "method", "rule", "rule_detail"}


@pytest.fixture(scope="module")
def setup(tiny_demo_root, tmp_path_factory):
    folder = tmp_path_factory.mktemp("explain_cli")
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", pooling="gmp", hidden=32, dim=16, image_size=64))
    checkpoint = save_checkpoint(folder / "model.pt", model)
    dataset = open_dataset(tiny_demo_root)
    return {"root": tiny_demo_root, "checkpoint": str(checkpoint), "dataset": dataset, "folder": folder, "model": model}


def _image(setup, i):
    return str(setup["dataset"].abspath(i))


@pytest.mark.parametrize("method", ["decomposition", "decomposition_bias", "gradcam", "rgradcam"])
def test_explain_npz_satisfies_completeness(setup, method):
    out = setup["folder"] / f"{method}.npz"
    rc = main(["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, 0),
               "--reference", _image(setup, 5), "--method", method, "--out", str(out), "--device", "cpu"])
    assert rc == 0
    z = np.load(out)
    assert set(z.files) == NPZ_KEYS
    assert str(z["rule"]) == "exact" and str(z["rule_detail"]) == "exact (max positions, ReLU masks frozen at this input)"
    assert str(z["method"]) == method
    total = float(z["point_to_point"].astype(np.float64).sum() + z["bias_query"] + z["bias_reference"] + z["bias_both"])
    assert total == pytest.approx(float(z["similarity"]), abs=1e-5)
    assert z["point_to_point"].shape == (4, 4, 4, 4)
    assert list(z["grid_query"]) == [4, 4] and list(z["grid_reference"]) == [4, 4]
    assert z["overall_query"].shape == (64, 64) and z["overall_reference"].shape == (64, 64)
    if method == "decomposition":  # the overall map is the tensor summed over the other image
        grid = z["point_to_point"].sum(axis=(2, 3))
        assert float(z["overall_query"].mean()) == pytest.approx(float(grid.mean()), rel=0.05, abs=1e-6)


def test_explain_grad_transfer_leaves_the_feature_file_alone_unless_asked(setup):
    dataset = setup["dataset"]
    train = dataset.indices("train")
    emb = embed_images(setup["model"], dataset, train)
    features = setup["folder"] / "train.h5"
    write_features(features, {
        "embeddings_raw": emb, "labels": dataset.labels[train], "paths": [dataset.paths[i] for i in train],
        "split": "train",
    }, {"dataset_root": str(setup["root"]), "dataset_format": dataset.format})
    before = features.read_bytes()
    out = setup["folder"] / "transfer.npz"
    argv = ["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, int(dataset.indices("test")[0])),
            "--reference", _image(setup, 0), "--method", "grad_transfer", "--features", str(features), "--out", str(out)]
    assert main(argv) == 0
    assert features.read_bytes() == before  # computed for this run only: the user's file is untouched
    first = np.load(out)["overall_query"]
    assert main(argv + ["--save-grad-weights"]) == 0  # asked for: stored in the file
    stored = read_features(features).extra["grad_weights"]
    assert stored.shape == (len(train), 128) and np.isfinite(stored).all()
    np.testing.assert_allclose(np.load(out)["overall_query"], first, rtol=1e-5, atol=1e-8)
    assert main(argv) == 0  # a later run reads the stored weights
    np.testing.assert_allclose(np.load(out)["overall_query"], first, rtol=1e-5, atol=1e-8)


def test_explain_bad_arguments_exit_2(setup, capsys):
    out = str(setup["folder"] / "x.npz")
    base = ["explain", "--checkpoint", setup["checkpoint"], "--query", _image(setup, 0), "--out", out]
    assert main(base + ["--reference", str(setup["folder"] / "missing.png")]) == 2
    assert "missing.png" in capsys.readouterr().err
    assert main(["explain", "--checkpoint", str(setup["folder"] / "nope.pt"), "--query", _image(setup, 0),
                 "--reference", _image(setup, 1), "--out", out]) == 2
    assert "nope.pt" in capsys.readouterr().err
    assert main(base + ["--reference", _image(setup, 1), "--method", "grad_transfer"]) == 2
    err = capsys.readouterr().err
    assert "--features" in err and len(err.strip().splitlines()) == 1
    assert main(base + ["--reference", _image(setup, 1), "--method", "nonsense"]) == 2


def test_localize_json(setup, capsys):
    rc = main(["localize", "--checkpoint", setup["checkpoint"], "--dataset", str(setup["root"]),
               "--method", "decomposition,rgradcam", "--method", "gradcam_nonorm",
               "--thresholds", "0.2:0.6:0.2", "--pairing", "same-class", "--json", "--device", "cpu"])
    assert rc == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["method"] for r in results] == ["decomposition", "rgradcam", "gradcam_nonorm"]
    for r in results:
        assert r["pairing"] == "same-class" and r["thresholds"] == [0.2, 0.4, 0.6]
        assert len(r["accuracy"]) == 3 and r["num_images"] == len(setup["dataset"].indices("test"))
        assert r["best_accuracy"] == max(r["accuracy"])


@pytest.mark.parametrize("bad", [["--thresholds", "0.5:0.1:0.1"], ["--method", "magic"], ["--split", "nowhere"]])
def test_localize_bad_arguments_exit_2(setup, bad, capsys):
    argv = ["localize", "--checkpoint", setup["checkpoint"], "--dataset", str(setup["root"]), "--json"]
    if "--method" not in bad:
        argv += ["--method", "decomposition"]
    assert main(argv + bad) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_correspond_json(setup, capsys, tmp_path):
    rc = main(["correspond", "--checkpoint", setup["checkpoint"], "--dataset", str(setup["root"]),
               "--pairs", "4", "--json", "--device", "cpu"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"partial_map_accuracy", "overall_map_accuracy", "num_pairs", "num_parts",
                           "chance_accuracy", "matches_on_object", "matches_same_part", "matches_score_on_object",
                           "group_diversity"}
    assert result["num_pairs"] == 4 and result["num_parts"] == 12
    # a folder dataset has no part masks: one clear line, status 2
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    import shutil

    for k, cls in enumerate("ab"):
        for j in range(2):
            shutil.copy(_image(setup, 4 * k + j), tmp_path / cls / f"{j}.jpg")
    assert main(["correspond", "--checkpoint", setup["checkpoint"], "--dataset", str(tmp_path), "--json"]) == 2
    assert "part masks" in capsys.readouterr().err


def test_command_choices_match_the_core():
    """``explain --method`` offers the registry's methods, each of which the core explains; the
    localize command repeats the pairing names (its parser must not import torch)."""
    from dmlviewer.cli import build_parser
    from dmlviewer.commands import localize as localize_command
    from dmlviewer.core import explain as core
    from dmlviewer.core.explain import methods as registry

    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices and "explain" in a.choices)
    method = next(a for a in sub.choices["explain"]._actions if a.dest == "method")
    assert tuple(method.choices) == registry.methods("explain") == (
        "decomposition", "decomposition_bias", "gradcam", "gradcam_nonorm", "rgradcam", "grad_transfer")
    assert localize_command.PAIRINGS == core.PAIRINGS
