"""Names of models a person can tell apart (issue 31 item 1): run folder and file, the loss and
backbone a checkpoint records, paths shortened from the middle, several names made distinct."""

from __future__ import annotations

import json

from dmlviewer.core.models.naming import (describe_preprocessing, distinct_names, model_name, shorten_middle,
                                          traits)
from dmlviewer.core.models.source import ModelSource


def _info(loss: str | None = None, backbone: str = "small_cnn") -> dict:
    info = {"config": {"backbone": backbone}}
    if loss:
        info["extra"] = {"train_config": {"loss": loss, "backbone": backbone}}
    return info


def test_a_trained_model_is_named_by_its_run_folder_loss_and_backbone():
    source = ModelSource.from_text("/home/me/runs/ms-96px/checkpoint.pt")
    assert model_name(source, _info("ms")) == "ms-96px/checkpoint.pt · MS · small_cnn"
    assert traits(_info("proxy_nca", "resnet50")) == ["ProxyNCA", "resnet50"]
    assert traits({"config": {"branches": {"query": {"backbone": "resnet18"}, "reference": {}}}}) == ["resnet18"]
    assert traits(None) == [] and traits(["MS"]) == ["MS"]
    # the user's label is the name
    labelled = ModelSource("checkpoint", path="/home/me/runs/ms-96px/checkpoint.pt", label="baseline")
    assert model_name(labelled, _info("ms")) == "baseline"


def test_two_runs_in_different_folders_never_read_the_same():
    a = ModelSource.from_text("/data/exp1/run/checkpoint.pt")
    b = ModelSource.from_text("/data/exp2/run/checkpoint.pt")
    c = ModelSource.from_text("/data/other/checkpoint.pt")
    names = distinct_names([(a, _info("ms")), (b, _info("ms")), (c, None)])
    assert names == ["exp1/run/checkpoint.pt · MS · small_cnn", "exp2/run/checkpoint.pt · MS · small_cnn",
                     "other/checkpoint.pt"]
    # the same file twice (or one label twice) is numbered
    assert distinct_names([(a, None), (a, None)]) == ["run/checkpoint.pt", "run/checkpoint.pt (2)"]
    # side by side, a trait both have tells them not apart
    assert distinct_names([(a, _info("ms")), (c, _info("triplet"))], shared_traits=False) == [
        "run/checkpoint.pt · MS", "other/checkpoint.pt · Triplet"]


def test_long_paths_are_shortened_from_the_middle_keeping_both_ends():
    text = "a-very-long-experiment-folder-name-that-goes-on/checkpoint.pt"
    short = shorten_middle(text, 30)
    assert len(short) == 30 and short.startswith("a-very-long") and short.endswith("checkpoint.pt") and "…" in short
    assert shorten_middle("short.pt", 30) == "short.pt"
    code = ModelSource("code", entry="/home/me/models/nets.py:build", weights="/home/me/w/weights.pth")
    assert model_name(code) == "models/nets.py:build + w/weights.pth"


def test_the_assumed_preprocessing_in_words():
    assert describe_preprocessing({"image_size": 224, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}) \
        == "224 px, ImageNet mean and std"
    assert describe_preprocessing({"image_size": 96, "mean": [0.5] * 3, "std": [0.25] * 3}) \
        == "96 px, mean 0.5, 0.5, 0.5, std 0.25, 0.25, 0.25"


def test_a_label_is_kept_by_the_last_session_and_recent_models_stay_one_entry_each(tmp_path):
    from dmlviewer.core.last_session import LastSession, add_recent_source, recent_sources

    path = str(tmp_path / "ms-96px" / "checkpoint.pt")
    labelled = ModelSource("checkpoint", path=path, label="MS baseline")
    back = LastSession.from_dict(json.dumps(LastSession(models={"primary": labelled}).to_dict())).models["primary"]
    assert back.label == "MS baseline" and model_name(back, _info("ms")) == "MS baseline"
    items = add_recent_source([], ModelSource.from_text(path))
    items = add_recent_source(items, labelled)  # the same file, now labelled: one entry, the newest
    assert [s.label for s in recent_sources(items)] == ["MS baseline"]
