"""``dmlviewer faithfulness`` end to end on the tiny parts dataset (small_cnn, C-grouping with 2
groups, random weights)."""

from __future__ import annotations

import json

import pytest
import torch

from dmlviewer.cli import main
from dmlviewer.core.models import build_model, default_config, save_checkpoint

KEYS = {"method", "baseline", "steps", "fractions", "deletion_auc", "insertion_auc", "deletion_auc_sem",
        "insertion_auc_sem", "num_pairs", "deletion_curve", "insertion_curve", "oracle_pairs", "different_class"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", grouping="c", groups=2, dim=16, image_size=64))
    return str(save_checkpoint(tmp_path_factory.mktemp("faith") / "model.pt", model))


def test_json_lists_every_method_with_random_and_oracle(tiny_demo_root, checkpoint, capsys):
    rc = main(["faithfulness", "--checkpoint", checkpoint, "--dataset", str(tiny_demo_root), "--method", "all",
               "--pairs", "3", "--steps", "4", "--oracle-pairs", "1", "--baseline", "noise", "--device", "cpu",
               "--json"])
    assert rc == 0
    results = json.loads(capsys.readouterr().out)
    methods = [r["method"] for r in results]
    assert methods == ["decomposition", "decomposition_bias", "gradcam", "gradcam_nonorm", "rgradcam",
                       "grad_transfer", "occlusion", "point_to_point", "group_0", "group_1", "random", "oracle"]
    for r in results:
        assert set(r) == KEYS, r["method"]
        assert r["baseline"] == "noise" and r["steps"] == 4 and len(r["fractions"]) == 5
        assert len(r["deletion_curve"]) == len(r["insertion_curve"]) == 5
        expected = (1, 0) if r["method"] == "oracle" else (2, 1)
        assert (r["num_pairs"], r["different_class"]["num_pairs"]) == expected
        assert isinstance(r["deletion_auc"], float) and isinstance(r["insertion_auc"], float)
    # every curve of the same pairs starts at their mean similarity and meets at the baseline
    same = [r for r in results if r["method"] != "oracle"]
    assert len({round(r["deletion_curve"][0], 6) for r in same}) == 1
    assert len({round(r["deletion_curve"][-1], 6) for r in same} | {round(r["insertion_curve"][0], 6) for r in same}) == 1


def test_text_table_and_bad_arguments(tiny_demo_root, checkpoint, capsys):
    base = ["faithfulness", "--checkpoint", checkpoint, "--dataset", str(tiny_demo_root), "--device", "cpu"]
    assert main(base + ["--method", "decomposition", "--pairs", "2", "--steps", "2", "--oracle-pairs", "0"]) == 0
    out = capsys.readouterr().out
    assert "decomposition" in out and "random" in out and "oracle" not in out.split("baseline")[0]
    for extra, message in ((["--pairs", "0"], "argument --pairs: must be an integer from 1 to 100000, got 0"),
                           (["--method", "group_5"], "unknown method 'group_5'"),
                           (["--oracle-pairs", "-1"], "argument --oracle-pairs: must be an integer from 0 to 100000")):
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
