"""Cross-view training (issue 25): CVM-Net's weighted soft-margin triplet loss, one-match-per-query
recall, rotated aerial images and a two-branch run end to end on a tiny synthetic set."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from dmlviewer.core.train.cross_view import (CrossViewConfig, cross_view_recall, rotate_about_centre,
                                             soft_margin_triplet_loss, train_cross_view)
from dmlviewer.core.train.saved_run import saved_progress


def test_soft_margin_triplet_loss_is_cvm_nets_formula():
    torch.manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(4, 6), dim=1)
    r = torch.nn.functional.normalize(torch.randn(4, 6), dim=1)
    expected, count = 0.0, 0
    for i in range(4):
        for j in range(4):
            if i != j:
                d_pos = float(((q[i] - r[i]) ** 2).sum())
                expected += 0.5 * math.log1p(math.exp(10 * (d_pos - float(((q[i] - r[j]) ** 2).sum()))))
                expected += 0.5 * math.log1p(math.exp(10 * (d_pos - float(((q[j] - r[i]) ** 2).sum()))))
                count += 1
    assert float(soft_margin_triplet_loss(q, r, 10.0)) == pytest.approx(expected / count, rel=1e-5)


def test_loss_is_small_for_matched_pairs_and_large_for_swapped_ones():
    eye = torch.eye(4)
    assert float(soft_margin_triplet_loss(eye, eye)) < 1e-6
    # every match at distance 2; per anchor one negative at distance 0 (the one it was rolled onto)
    # and two at distance 2
    swapped = (math.log1p(math.exp(20.0)) + 2 * math.log(2.0)) / 3
    assert float(soft_margin_triplet_loss(eye, eye.roll(1, 0))) == pytest.approx(swapped, rel=1e-5)


def test_cross_view_recall_counts_the_rank_of_the_one_match():
    reference = np.eye(200)
    query = np.eye(200)
    query[:50] = np.roll(np.eye(200), 1, axis=1)[:50] + 0.5 * np.eye(200)[:50]  # match second for 50 queries
    metrics = cross_view_recall(query, reference)
    assert metrics["recall@1"] == pytest.approx(150 / 200)
    assert metrics["recall@5"] == 1.0 and metrics["recall@1%"] == 1.0  # 1 % of 200 is the top 2
    assert metrics["num_queries"] == 200


def test_rotation_about_centre_keeps_the_centre_and_turns_north_to_west():
    image = np.zeros((33, 33, 3), dtype=np.uint8)
    image[2:6, 15:18] = 255  # north of the centre
    turned = rotate_about_centre(image, 90.0)  # counter-clockwise: north goes west
    ys, xs = np.nonzero(turned[..., 0] > 128)
    assert xs.mean() < 10 and abs(ys.mean() - 16) < 1.5


def test_two_branch_training_runs_and_writes_a_two_branch_checkpoint(tmp_path):
    from dmlviewer.core.data.cross_view import make_cross_view_data
    from dmlviewer.core.models import load_checkpoint
    from dmlviewer.core.models.two_branch import TwoBranchModel

    data = make_cross_view_data(tmp_path / "cv", pairs=12, seed=1, aerial_size=48, panorama_shape=(32, 128))
    config = CrossViewConfig(str(data), str(tmp_path / "run"), dim=16, epochs=2, batch_pairs=4,
                             query_shape=(32, 128), reference_size=48)
    record = train_cross_view(config)
    assert record["num_queries"] == 3 and 0.0 <= record["recall@1"] <= 1.0 and math.isfinite(record["loss"])
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == [0, 1, 2]
    model, info = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert isinstance(model, TwoBranchModel) and info["metrics"]["recall@1"] == record["recall@1"]
    assert model.input_shapes == {"query": (32, 128), "reference": (48, 48)}
    assert saved_progress(tmp_path / "run" / "checkpoint.pt") == (2, False)  # what the training dialog reads


@pytest.mark.parametrize("trainer", ["one-branch", "two-branch"])
def test_both_trainers_run_under_the_same_determinism_switches(trainer, tmp_path, tiny_data):
    """Issue 30 item 4: one set of determinism switches for both trainers. The two-branch run
    left cuDNN's flags alone before (deterministic algorithms and one thread only); the switches
    hold while it trains and are restored after."""
    from dmlviewer.core.train import TrainConfig, train
    from dmlviewer.core.train.cross_view import train_cross_view_events

    if trainer == "one-branch":
        config = TrainConfig(dataset=str(tiny_data), out=str(tmp_path / "run"), epochs=1, steps_per_epoch=2,
                             image_size=32, dim=8, classes_per_batch=2, images_per_class=2, num_workers=0,
                             device="cpu", eval_every=0, deterministic=True)
        events = train(config)
    else:
        from dmlviewer.core.data.cross_view import make_cross_view_data

        data = make_cross_view_data(tmp_path / "cv", pairs=8, seed=1, aerial_size=32, panorama_shape=(16, 64))
        events = train_cross_view_events(CrossViewConfig(str(data), str(tmp_path / "run"), dim=8, epochs=1,
                                                         batch_pairs=2, query_shape=(16, 64), reference_size=32,
                                                         deterministic=True))
    cudnn = torch.backends.cudnn
    before = (cudnn.deterministic, cudnn.benchmark, torch.are_deterministic_algorithms_enabled(),
              torch.get_num_threads())
    during = {(cudnn.deterministic, cudnn.benchmark, torch.are_deterministic_algorithms_enabled(),
               torch.get_num_threads()) for event in events if event.kind == "step"}
    assert during == {(True, False, True, 1)}
    assert (cudnn.deterministic, cudnn.benchmark, torch.are_deterministic_algorithms_enabled(),
            torch.get_num_threads()) == before
