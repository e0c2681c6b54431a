"""Every command's plain output (without ``--json``) end to end through ``cli.main`` on the demo
data (issue 31 item 12: ``retrieve``'s plain output raised an ``AttributeError`` that no test
saw, since every test read ``--json``), and the command-line tracebacks of that item, each now
one line with exit status 2."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmlviewer.cli import COMMANDS, main

CPU = ["--device", "cpu"]


@pytest.fixture(scope="module")
def fx(tiny_demo_root, tmp_path_factory) -> dict:
    from dmlviewer.core.data.cross_view import make_cross_view_data
    from dmlviewer.core.models import build_model, default_config, save_checkpoint

    folder = tmp_path_factory.mktemp("plain_output")
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", pooling="gmp", hidden=32, dim=16, image_size=64))
    checkpoint = save_checkpoint(folder / "model.pt", model)
    torch.manual_seed(1)
    other = save_checkpoint(folder / "other.pt", build_model(default_config(backbone="small_cnn", dim=16,
                                                                             image_size=64)))
    features = folder / "features.h5"
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--dataset", str(tiny_demo_root), "--out",
                 str(features), "--num-workers", "0", *CPU]) == 0
    cv = make_cross_view_data(folder / "cv", pairs=8, seed=4, aerial_size=48, panorama_shape=(32, 128))
    weights = folder / "small_cnn.pth"
    torch.save(build_model(default_config(backbone="small_cnn", dim=16, image_size=64)).backbone.state_dict(),
               weights)
    return {"root": str(tiny_demo_root), "checkpoint": str(checkpoint), "other": str(other),
            "features": str(features), "cv": str(cv), "folder": folder, "weights": str(weights)}


def _run(capsys, argv: list) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, captured.out, captured.err


def _one_line(capsys, argv: list, has: str) -> str:
    code, _, err = _run(capsys, argv)
    errors = [line for line in err.strip().splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1 and has in errors[0], err
    return errors[0]


# ------------------------------------------------------------------ retrieve (item 12 a, b)


def test_retrieve_plain_output_names_each_neighbour(fx, capsys):
    from dmlviewer.core.evaluate import read_features

    stored = read_features(fx["features"])
    code, out, err = _run(capsys, ["retrieve", "--features", fx["features"], "--query", "0", "-k", "2"])
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3, out
    assert lines[0].startswith(f"query 0: {stored.paths[0]} (") and f"label {stored.labels[0]}" in lines[0]
    assert lines[1].startswith("  1. ") and lines[2].startswith("  2. ")
    for line in lines[1:]:
        index = int(line.rsplit("index ", 1)[1].rstrip(")"))
        assert index != 0 and stored.paths[index] in line
        assert f"({stored.class_name(int(stored.labels[index]))}, label {stored.labels[index]}" in line


def test_retrieve_plain_output_with_region(fx, capsys):
    code, out, err = _run(capsys, ["retrieve", "--features", fx["features"], "--query", "3", "-k", "2",
                                   "--region", "0,0,32,32", "--checkpoint", fx["checkpoint"], *CPU])
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("query 3: ") and lines[1].startswith("  1. "), out


def test_retrieve_on_zero_embeddings_is_one_line(fx, capsys, tmp_path):
    from dmlviewer.core.evaluate import write_features

    zero = tmp_path / "zero.h5"
    write_features(zero, {"embeddings_raw": np.zeros((4, 8), np.float32), "labels": np.arange(4),
                          "paths": [f"{k}.png" for k in range(4)], "split": "test"})
    line = _one_line(capsys, ["retrieve", "--features", zero, "--query", "1", "-k", "2"], "zero")
    assert str(zero) in line


# ------------------------------------------------------------------ explain grad_transfer (item 12 c)


def test_grad_transfer_without_weights_or_dataset_root_is_one_line(fx, capsys, tmp_path):
    from dmlviewer.core.evaluate import write_features

    bare = tmp_path / "bare.h5"
    write_features(bare, {"embeddings_raw": np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32),
                          "labels": np.arange(4), "paths": [f"{k}.png" for k in range(4)], "split": "train"})
    from dmlviewer.core.data import open_dataset

    dataset = open_dataset(fx["root"])
    query, reference = str(dataset.abspath(0)), str(dataset.abspath(1))
    line = _one_line(capsys, ["explain", "--checkpoint", fx["checkpoint"], "--query", query, "--reference",
                              reference, "--method", "grad_transfer", "--features", bare, "--out",
                              tmp_path / "e.npz", *CPU], "no grad_weights and no dataset_root")
    assert str(bare) in line
    assert not (tmp_path / "e.npz").exists()


# ------------------------------------------------------------------ every command's plain output


def _plain_runs(fx, tmp: str) -> dict[str, list]:
    """One cheap plain run of each command (``gui``/``demo`` open a window: not a text output); a
    new command fails :func:`test_plain_output_end_to_end` until it has its row here."""
    from dmlviewer.core.data import open_dataset

    dataset = open_dataset(fx["root"])
    query, reference = str(dataset.abspath(0)), str(dataset.abspath(1))
    model = ["--checkpoint", fx["checkpoint"]]
    return {
        "make-demo-data": ["make-demo-data", f"{tmp}/demo", "--classes", "2", "--per-class", "2", "--size", "32"],
        "train": ["train", "--dataset", fx["root"], "--out", f"{tmp}/run", "--epochs", "1", "--steps-per-epoch", "1",
                  "--image-size", "32", "--dim", "8", "--classes-per-batch", "2", "--images-per-class", "2",
                  "--num-workers", "0", *CPU],
        "evaluate": ["evaluate", *model, "--dataset", fx["root"], "--out", f"{tmp}/f.h5", "--num-workers", "0", *CPU],
        "explain": ["explain", *model, "--query", query, "--reference", reference, "--out", f"{tmp}/e.npz", *CPU],
        "localize": ["localize", *model, "--dataset", fx["root"], "--method", "decomposition", "--thresholds",
                     "0.5", "--limit", "2", *CPU],
        "correspond": ["correspond", *model, "--dataset", fx["root"], "--pairs", "1", *CPU],
        "orientation": ["orientation", "--checkpoint", fx["other"], "--dataset", fx["cv"], "--pairs", "1", *CPU],
        "faithfulness": ["faithfulness", *model, "--dataset", fx["root"], "--method", "decomposition", "--pairs",
                         "1", "--steps", "2", "--oracle-pairs", "0", *CPU],
        "compare": ["compare", *model, "--checkpoint", fx["other"], "--dataset", fx["root"], "--pairs", "1",
                    "--limit", "1", *CPU],
        "retrieve": ["retrieve", "--features", fx["features"], "--query", "0", "-k", "1"],
        "import-model": ["import-model", fx["weights"], "--arch", "small_cnn", "--out", f"{tmp}/imported.pt"],
        "bench": ["bench", "metrics", "--size", "200"],
        "report": ["report", *model, "--dataset", fx["root"], "--failures", "1", "--out", f"{tmp}/r.html", *CPU],
    }


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"gui", "demo"}))
def test_plain_output_end_to_end(fx, capsys, tmp_path, command):
    argv = _plain_runs(fx, str(tmp_path))[command]
    code, out, err = _run(capsys, argv)
    assert code == 0, err
    if command not in ("make-demo-data", "train", "explain"):  # these write files and say so on stderr
        assert out.strip(), f"{command} printed nothing"
