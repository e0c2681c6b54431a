"""``dmlviewer compare --changes`` (issue 41) on two models trained differently on the demo
data: the counts agree with ``evaluate``'s Recall@1, the broken and fixed queries with the
difference of the correct counts, a model against itself overlaps fully, the feature files are
used instead of extracting, and feature files that do not belong are refused in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dmlviewer.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two models trained differently (seeds, steps, learning rates) and their feature files."""
    from dmlviewer.core.data import make_demo_data

    folder = tmp_path_factory.mktemp("changes")
    data = make_demo_data(folder / "data", classes=6, per_class=8, size=64, seed=1)
    other = make_demo_data(folder / "other", classes=4, per_class=4, size=64, seed=2)
    out = {"data": str(data), "other": str(other), "folder": folder}
    for name, seed, steps, lr in (("a", 0, 3, "1e-3"), ("b", 1, 6, "3e-3")):
        run = folder / name
        assert main(["train", "--dataset", str(data), "--out", str(run), "--epochs", "1", "--steps-per-epoch",
                     str(steps), "--image-size", "64", "--dim", "32", "--classes-per-batch", "3",
                     "--images-per-class", "4", "--lr", lr, "--num-workers", "0", "--device", "cpu",
                     "--seed", str(seed)]) == 0
        out[name] = str(run / "checkpoint.pt")
        out[f"{name}_h5"] = str(folder / f"{name}.h5")
    out["other_h5"] = str(folder / "other.h5")
    return out


def _json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_counts_agree_with_evaluate_and_feature_files_are_used(runs, capsys, monkeypatch):
    metrics = {}
    for name in ("a", "b"):
        metrics[name] = _json(capsys, ["evaluate", "--checkpoint", runs[name], "--dataset", runs["data"],
                                       "--out", runs[f"{name}_h5"], "--json", "--num-workers", "0"])
    from dmlviewer.core.evaluate import extract

    def no_extraction(*args, **kwargs):
        raise AssertionError("extracted although both feature files match")

    with monkeypatch.context() as patch:
        patch.setattr(extract, "embed_dataset", no_extraction)
        doc = _json(capsys, ["compare", "--checkpoint", runs["a"], "--checkpoint", runs["b"], "--dataset",
                             runs["data"], "--changes", "--features", runs["a_h5"], "--features", runs["b_h5"],
                             "--json"])
    c = doc["changes"]
    assert [m["from_file"] for m in doc["models"]] == [True, True]
    n = metrics["a"]["num_queries"]
    assert c["num_queries"] == n == metrics["b"]["num_queries"]
    correct_a = round(metrics["a"]["recall@1"] * n)
    correct_b = round(metrics["b"]["recall@1"] * n)
    assert correct_a != correct_b  # the two models differ
    assert c["both_right"] + c["a_only"] == correct_a
    assert c["both_right"] + c["b_only"] == correct_b
    assert c["both_right"] + c["a_only"] + c["b_only"] + c["both_wrong"] == n
    assert len(c["broken"]) - len(c["fixed"]) == correct_a - correct_b
    assert (len(c["broken"]), len(c["fixed"])) == (c["a_only"], c["b_only"])
    assert set(c["overlap"]) == {"1", "4", "16"} and all(0 <= v < 1 for v in c["overlap"].values())
    for entry in c["broken"] + c["fixed"]:
        assert {"index", "path", "top1", "margin", "margin_change"} <= set(entry) and len(entry["top1"]) == 2
        assert all({"index", "path", "label", "similarity"} <= set(t) for t in entry["top1"])
    for entry in c["broken"]:  # right under A: A's top-1 of the query's class, B's not
        assert entry["top1"][0]["label"] == entry["label"] != entry["top1"][1]["label"]
    # extracting instead of reading the files gives the same table
    again = _json(capsys, ["compare", "--checkpoint", runs["a"], "--checkpoint", runs["b"], "--dataset",
                           runs["data"], "--changes", "--json"])
    assert [m["from_file"] for m in again["models"]] == [False, False]
    assert {k: again["changes"][k] for k in ("both_right", "a_only", "b_only", "both_wrong")} == {
        k: c[k] for k in ("both_right", "a_only", "b_only", "both_wrong")}
    # a model against itself
    self_doc = _json(capsys, ["compare", "--checkpoint", runs["a"], "--checkpoint", runs["a"], "--dataset",
                              runs["data"], "--changes", "--features", runs["a_h5"], "--features", runs["a_h5"],
                              "--json"])
    assert self_doc["changes"]["overlap"] == {"1": 1.0, "4": 1.0, "16": 1.0}
    assert self_doc["changes"]["broken"] == self_doc["changes"]["fixed"] == []
    # the Python door on the two feature files
    import dmlviewer

    python = dmlviewer.changes(runs["a_h5"], runs["b_h5"])
    assert {k: python[k] for k in ("both_right", "a_only", "b_only", "both_wrong", "overlap")} == {
        k: c[k] for k in ("both_right", "a_only", "b_only", "both_wrong", "overlap")}


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "dmlviewer", *argv], capture_output=True, text=True, env=env,
                          timeout=300)


def test_feature_files_that_do_not_belong_are_refused_in_one_line(runs, capsys):
    for name in ("a", "b"):
        if not Path(runs[f"{name}_h5"]).exists():
            assert main(["evaluate", "--checkpoint", runs[name], "--dataset", runs["data"], "--out",
                         runs[f"{name}_h5"], "--num-workers", "0"]) == 0
    if not Path(runs["other_h5"]).exists():  # model B's features of another dataset
        assert main(["evaluate", "--checkpoint", runs["b"], "--dataset", runs["other"], "--out", runs["other_h5"],
                     "--num-workers", "0"]) == 0
    capsys.readouterr()
    models = ["compare", "--checkpoint", runs["a"], "--checkpoint", runs["b"], "--dataset", runs["data"], "--changes"]
    cases = [
        (["--features", runs["b_h5"], "--features", runs["a_h5"]],
         f"feature file {runs['b_h5']} of model A belongs to another model"),
        (["--features", runs["a_h5"], "--features", runs["other_h5"]],
         f"feature file {runs['other_h5']} of model B lacks"),
        (["--features", runs["a_h5"]], "--features: give one feature file per model"),
        (["--split", "both"], "--changes compares one split"),
    ]
    for extra, message in cases:
        done = _cli(*models, *extra, "--json")
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and done.stdout == ""
        assert len(lines) == 1 and lines[0].startswith("dmlviewer compare: error: ") and message in lines[0], lines
    # the Python door: two feature files of different images
    import dmlviewer

    with pytest.raises(ValueError, match=re.escape(f"feature file {runs['a_h5']} holds 24 images and feature file "
                                                   f"{runs['other_h5']} 8")):
        dmlviewer.changes(runs["a_h5"], runs["other_h5"])
