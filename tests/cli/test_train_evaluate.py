"""``dmlviewer train``, ``evaluate`` and ``retrieve`` end to end through ``cli.main``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dmlviewer.cli import main

pytestmark = pytest.mark.slow

DESIGN_KEYS = {"recall@1", "recall@2", "recall@4", "recall@8", "nmi", "f1", "map@r", "r_precision",
               "knn_acc", "num_queries"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from dmlviewer.core.data import make_demo_data

    return make_demo_data(tmp_path_factory.mktemp("cli") / "data", classes=6, per_class=8, size=64, seed=1)


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """A two-epoch smoke run: 6 steps per epoch."""
    run = tmp_path_factory.mktemp("cli") / "run"
    code = main(["train", "--dataset", str(data), "--out", str(run), "--epochs", "2", "--steps-per-epoch", "6",
                 "--image-size", "64", "--dim", "32", "--classes-per-batch", "3", "--images-per-class", "4",
                 "--lr", "1e-3", "--num-workers", "0", "--device", "cpu", "--log-every", "1", "--seed", "0"])
    assert code == 0
    return run


def test_train_writes_run_files_and_loss_decreases(trained, capsys):
    assert {p.name for p in trained.iterdir()} >= {"checkpoint.pt", "config.json", "metrics.jsonl"}
    assert json.loads((trained / "config.json").read_text())["epochs"] == 2
    lines = [json.loads(x) for x in (trained / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if x["kind"] == "step"]
    evals = [x for x in lines if x["kind"] == "eval"]
    assert [x["step"] for x in steps] == list(range(1, 13))
    assert [x["epoch"] for x in evals] == [0, 1, 2] and set(evals[-1]["metrics"]) == DESIGN_KEYS  # 0: untrained
    first, last = np.mean([x["loss"] for x in steps[:6]]), np.mean([x["loss"] for x in steps[6:]])
    assert last < first


def test_evaluate_json_has_design_keys_and_matches_stored_features(trained, data, tmp_path, capsys):
    from dmlviewer.core.evaluate import compute_metrics, read_features

    out = tmp_path / "features.h5"
    capsys.readouterr()
    code = main(["evaluate", "--checkpoint", str(trained / "checkpoint.pt"), "--dataset", str(data),
                 "--out", str(out), "--json", "--num-workers", "0"])
    assert code == 0
    metrics = json.loads(capsys.readouterr().out)
    assert set(metrics) == DESIGN_KEYS and metrics["num_queries"] == 24
    features = read_features(out)
    assert features.attrs["recall@1"] == metrics["recall@1"]
    recomputed = compute_metrics(features.embeddings, features.labels)
    assert recomputed == pytest.approx(metrics)
    # the final evaluation of the training run saw the same model and data
    training = json.loads((trained / "metrics.jsonl").read_text().splitlines()[-1])["metrics"]
    assert training == pytest.approx(metrics)


def test_evaluate_decoding_jpegs_in_the_main_process_gives_the_same_features(trained, data, tmp_path, capsys):
    """``--decode device`` on the CPU: the batch's JPEGs decoded by torchvision in the main
    process, libjpeg-turbo as OpenCV's, so the features and metrics are the workers' (64 px
    images at input size 64: no resize)."""
    from dmlviewer.core.evaluate import read_features

    files = {}
    for decode in ("cpu", "device"):
        files[decode] = tmp_path / f"{decode}.h5"
        assert main(["evaluate", "--checkpoint", str(trained / "checkpoint.pt"), "--dataset", str(data),
                     "--out", str(files[decode]), "--json", "--num-workers", "1", "--decode", decode]) == 0
    cpu, device = (read_features(files[d]) for d in ("cpu", "device"))
    assert device.paths == cpu.paths
    np.testing.assert_allclose(device.embeddings, cpu.embeddings, atol=1e-5)
    assert device.attrs["recall@1"] == pytest.approx(cpu.attrs["recall@1"])
    assert device.attrs["image_decoder"] == "opencv"  # decode_jpeg on the CPU is libjpeg-turbo


def test_retrieve_json(trained, data, tmp_path, capsys):
    out = tmp_path / "features.h5"
    assert main(["evaluate", "--checkpoint", str(trained / "checkpoint.pt"), "--dataset", str(data),
                 "--out", str(out), "--num-workers", "0"]) == 0
    capsys.readouterr()
    assert main(["retrieve", "--features", str(out), "--query", "5", "-k", "4", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["query"]["index"] == 5
    results = answer["results"]
    assert len(results) == 4 and all(set(r) == {"index", "path", "label", "similarity"} for r in results)
    assert 5 not in [r["index"] for r in results]
    sims = [r["similarity"] for r in results]
    assert sims == sorted(sims, reverse=True)


def test_retrieve_with_region_json(trained, data, tmp_path, capsys):
    out = tmp_path / "features.h5"
    assert main(["evaluate", "--checkpoint", str(trained / "checkpoint.pt"), "--dataset", str(data),
                 "--out", str(out), "--num-workers", "0"]) == 0
    capsys.readouterr()
    assert main(["retrieve", "--features", str(out), "--query", "3", "-k", "3", "--region", "0,0,32,32",
                 "--checkpoint", str(trained / "checkpoint.pt"), "--device", "auto", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["query"]["region"] == [0, 0, 32, 32] and len(answer["results"]) == 3
    sims = [r["similarity"] for r in answer["results"]]
    assert sims == sorted(sims, reverse=True)
    assert 3 not in [r["index"] for r in answer["results"]]  # the query is left out, as without --region


@pytest.mark.parametrize("argv, message", [
    (["train", "--dataset", "/no/such/data", "--out", "RUN"], "dataset folder not found: /no/such/data"),
    (["train", "--dataset", ".", "--out", "RUN", "--deml-adversary", "1"], "--deml-adversary needs --grouping c"),
    # issue 31 item 12: was a ValueError traceback from building the model
    (["train", "--dataset", ".", "--out", "RUN", "--backbone", "small_cnn", "--pretrained", "imagenet"],
     "--pretrained imagenet: no ImageNet weights exist for small_cnn; use none or a weights file"),
    (["train", "--branches", "2", "--dataset", ".", "--out", "RUN", "--pretrained", "imagenet"],
     "--pretrained imagenet: no ImageNet weights exist for small_cnn"),
    (["evaluate", "--checkpoint", "/no/ckpt.pt", "--dataset", ".", "--out", "f.h5"], "checkpoint not found: /no/ckpt.pt"),
    (["evaluate", "--checkpoint", "c.pt", "--dataset", ".", "--out", "f.h5", "--decode", "gpu"],
     "argument --decode: invalid choice: 'gpu'"),
    (["retrieve", "--features", "/no/f.h5", "--query", "0"], "feature file not found: /no/f.h5"),
    (["retrieve", "--features", "/no/f.h5", "--query", "0", "--region", "5,5,1,1"], "y1 > y0"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse type errors
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "RUN").exists()


def test_retrieve_query_out_of_range(trained, data, tmp_path, capsys):
    out = tmp_path / "features.h5"
    assert main(["evaluate", "--checkpoint", str(trained / "checkpoint.pt"), "--dataset", str(data),
                 "--out", str(out), "--num-workers", "0"]) == 0
    capsys.readouterr()
    assert main(["retrieve", "--features", str(out), "--query", "24"]) == 2
    assert "out of range" in capsys.readouterr().err
