"""``dmlviewer compare`` end to end on the tiny parts dataset: the JSON keys of DESIGN.md's
contract (two models, and ``--randomize``) and one-line errors with exit status 2."""

from __future__ import annotations

import json

import pytest
import torch

from dmlviewer.cli import main
from dmlviewer.core.models import build_model, default_config, save_checkpoint
from user_model_source import USER_MODELS

AGREEMENT_KEYS = {"overall_map_spearman", "peak_distance", "iou", "point_to_point_spearman"}
PAIR_KEYS = {"rank", "query", "reference", "query_path", "reference_path", "split", "similarity",
             "nearest_same_class", "disagreement", *AGREEMENT_KEYS}


@pytest.fixture(scope="module")
def setup(tiny_demo_root, tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare_cli")
    checkpoints = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = build_model(default_config(backbone="small_cnn", dim=32, image_size=64))
        checkpoints.append(str(save_checkpoint(folder / f"model{seed}.pt", model)))
    return {"root": str(tiny_demo_root), "a": checkpoints[0], "b": checkpoints[1], "folder": folder}


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_two_models_json_keys(setup, capsys):
    doc = _json(capsys, ["compare", "--checkpoint", setup["a"], "--checkpoint", setup["b"], "--dataset", setup["root"],
                         "--pairs", "3", "--limit", "2", "--device", "cpu", "--json"])
    assert {"models", "agreement", "pairs"} <= set(doc)
    assert [m["name"] for m in doc["models"]] == ["A", "B"]
    assert [m["source"] for m in doc["models"]] == [setup["a"], setup["b"]]
    for m in doc["models"]:
        assert {"recall@1", "map@r", "localization", "part_correspondence"} <= set(m)  # the demo data have parts
        assert set(m["localization"]) == {"decomposition", "decomposition_bias"}
        for curve in m["localization"].values():
            assert {"thresholds", "accuracy", "best_accuracy"} <= set(curve)
            assert len(curve["accuracy"]) == len(curve["thresholds"])
    assert AGREEMENT_KEYS <= set(doc["agreement"])
    for key in AGREEMENT_KEYS:
        assert set(doc["agreement"][key]) >= {"mean", "per_pair"}
        assert len(doc["agreement"][key]["per_pair"]) == len(doc["pairs"]) == doc["num_pairs"] == 3
    for row in doc["pairs"]:
        assert set(row) == PAIR_KEYS and len(row["similarity"]) == 2
    assert [row["disagreement"] for row in doc["pairs"]] == sorted((row["disagreement"] for row in doc["pairs"]),
                                                                   reverse=True)


def test_randomize_json_keys(setup, capsys):
    doc = _json(capsys, ["compare", "--checkpoint", setup["a"], "--randomize", "--dataset", setup["root"],
                         "--pairs", "2", "--limit", "2", "--max-depths", "2", "--method", "decomposition,occlusion",
                         "--device", "cpu", "--json"])
    assert len(doc["models"]) == 1 and {"recall@1", "map@r", "localization"} <= set(doc["models"][0])
    agreement = doc["agreement"]
    assert agreement["methods"] == ["decomposition", "occlusion"]
    assert [d["depth"] for d in agreement["depths"]] == [1, 2]
    assert agreement["depths"][0]["label"] == "head.projection.out"
    assert agreement["depths"][0]["name"] == "head"  # readable, as the app's axis and the README say it
    for depth in agreement["depths"]:
        for method in ("decomposition", "occlusion"):
            values = depth["methods"][method]
            assert set(values) == {"overall_map_spearman", "iou", "peak_distance"}
            assert len(values["overall_map_spearman"]["per_pair"]) == 2
    assert len(doc["pairs"]) == 2 and len(doc["pairs"][0]["randomized_similarity"]) == 2


def test_randomize_text_names_each_depth_readably(setup, capsys):
    rc = main(["compare", "--checkpoint", setup["a"], "--randomize", "--dataset", setup["root"], "--pairs", "2",
               "--limit", "2", "--max-depths", "2", "--method", "decomposition", "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0 and "randomization check on 2 pairs" in out
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert rows[0].rstrip().endswith("head (head.projection.out)")  # the name, then the modules


@pytest.mark.parametrize("extra, message", [
    (["--checkpoint", "{missing}"], "checkpoint not found: {missing}"),
    (["--checkpoint", "{b}", "--randomize"], "--randomize compares one model"),
    ([], "give two models to compare"),
    (["--checkpoint", "{b}", "--method", "decomposition,gradcam"], "measures one method's agreement"),
    (["--randomize", "--method", "grad_transfer"], "unknown method 'grad_transfer' for --randomize"),
    (["--checkpoint", "{b}", "--weights", "{b}"], "--weights is only used with --model"),
])
def test_bad_input_exits_2_with_one_line(setup, capsys, extra, message):
    missing = str(setup["folder"] / "nope.pt")
    fill = (lambda text: text.format(missing=missing, b=setup["b"]))  # noqa: E731
    rc = main(["compare", "--checkpoint", setup["a"], *map(fill, extra), "--dataset", setup["root"], "--json"])
    err = capsys.readouterr()
    assert rc == 2
    assert err.out == ""
    lines = err.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dmlviewer compare: error: ") and fill(message) in lines[0]


def test_missing_dataset_exits_2(setup, capsys):
    missing = str(setup["folder"] / "no_dataset")
    rc = main(["compare", "--checkpoint", setup["a"], "--checkpoint", setup["b"], "--dataset", missing])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"dataset folder not found: {missing}" in err[0]


def test_code_door_model_on_either_command(setup, capsys):
    """``--model FILE.py:NAME`` gives the second model, or the one model of ``--randomize``
    (a module without head/backbone: its layers top down, the last registered first)."""
    (setup["folder"] / "user_net.py").write_text(USER_MODELS)
    entry = f"{setup['folder']}/user_net.py:Net"
    common = ["--dataset", setup["root"], "--pairs", "2", "--limit", "2", "--size", "64", "--device", "cpu", "--json"]
    doc = _json(capsys, ["compare", "--checkpoint", setup["a"], "--model", entry, "--model-args", '{"dim": 6}', *common])
    assert [m["source"] for m in doc["models"]] == [setup["a"], entry]
    assert doc["num_pairs"] == 2 and all(len(row["similarity"]) == 2 for row in doc["pairs"])
    doc = _json(capsys, ["compare", "--model", entry, "--randomize", "--method", "decomposition", *common])
    labels = [d["label"] for d in doc["agreement"]["depths"]]
    assert labels == ["net.fc", "net.trunk.3", "net.trunk.0"]  # conv 2, then conv 1 (with its BatchNorm)
