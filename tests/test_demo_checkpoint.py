"""The shipped demo checkpoint is a real trained model for the shipped demo data.

It must load safely, rebuild from its config alone, and retrieve the demo's unseen test classes
far better than chance and than an untrained model of the same architecture.
"""

from __future__ import annotations

import pytest
import torch

from dmlviewer.core.data import make_demo_data, open_dataset
from dmlviewer.core.evaluate import compute_metrics, embed_dataset
from dmlviewer.core.models import build_model, load_checkpoint
from dmlviewer.core.progress import run_to_end
from dmlviewer.resources import resource_path


@pytest.fixture(scope="module")
def demo_test_split(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "data"
    make_demo_data(root)  # the defaults the checkpoint was trained on
    return open_dataset(root).select_split("test")


def _recall_at_1(model, dataset) -> float:
    result = run_to_end(embed_dataset(model.eval(), dataset, batch_size=100, device="cpu", num_workers=0))
    return compute_metrics(result["embeddings"], dataset.labels[result["rows"]], ks=(1,), clustering=False)["recall@1"]


def test_demo_checkpoint_retrieves_unseen_classes(demo_test_split):
    path = resource_path("demo_checkpoint.pt")
    assert path.is_file(), "resources/demo_checkpoint.pt is missing (packaging/make_demo_checkpoint.py)"
    model, info = load_checkpoint(path)
    assert info["config"]["grouping"] != "none"  # the group tabs have something to show
    torch.manual_seed(0)
    untrained = build_model(info["config"], load_pretrained=False)
    trained_r1 = _recall_at_1(model, demo_test_split)
    untrained_r1 = _recall_at_1(untrained, demo_test_split)
    # 10 test classes of 40 images: chance is about 0.1; the shipped model measured 0.818.
    assert trained_r1 > 0.5
    assert trained_r1 > untrained_r1 + 0.25


def test_demo_checkpoint_maps_find_the_same_part(demo_test_split):
    """Hovering a part's centre lights the same part of the other image far more often than
    the overall map's peak does (the shipped model measured 0.753 against 0.320 on 200 pairs)."""
    from dmlviewer.core.explain import correspond

    model, _ = load_checkpoint(resource_path("demo_checkpoint.pt"))
    result = run_to_end(correspond(model, open_dataset(demo_test_split.root), split="test", max_pairs=40))
    assert result["num_pairs"] == 40
    assert result["partial_map_accuracy"] > 0.6 > result["overall_map_accuracy"] + 0.2
    assert result["matches_on_object"] > 0.6
