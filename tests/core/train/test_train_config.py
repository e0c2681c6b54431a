"""TrainConfig round trip and validate(): each invalid combination is explained."""

from __future__ import annotations

import pytest

from dmlviewer.core.train import TrainConfig, validate


@pytest.fixture
def valid(tiny_data, tmp_path):
    return TrainConfig(dataset=str(tiny_data), out=str(tmp_path / "run"), device="cpu")


def test_defaults_are_valid_and_round_trip(valid):
    assert validate(valid) == []
    data = valid.to_dict()
    assert TrainConfig.from_dict(data) == valid
    with pytest.raises(ValueError, match="unknown training option.*epochz"):
        TrainConfig.from_dict({**data, "epochz": 3})


@pytest.mark.parametrize("changes, expected", [
    ({"deml_adversary": 0.5, "grouping": "a"}, "--deml-adversary needs --grouping c"),
    ({"diversity": 0.1}, "--diversity needs a grouping head"),
    ({"images_per_class": 1}, "--images-per-class must be at least 2"),
    ({"classes_per_batch": 1}, "--classes-per-batch must be at least 2"),
    ({"grouping": "a", "groups": 3, "dim": 32}, "--dim 32 must be divisible by --groups 3"),
    ({"grouping": "m", "groups": 1}, "needs --groups of at least 2"),
    ({"loss": "arcface"}, "--loss must be one of"),
    ({"adversarial": "adaptive", "adversarial_weight": 0.0}, "positive --adversarial-weight"),
    ({"amp": "on"}, "--amp on needs a CUDA device"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
    ({"epochs": 0}, "--epochs must be at least 1"),
    ({"resume": True}, "no checkpoint to resume from"),
    ({"dataset": "/no/such/folder"}, "dataset folder not found: /no/such/folder"),
    ({"pretrained": "/no/such/weights.pt"}, "--pretrained file not found"),
])
def test_invalid_combinations_are_explained(valid, changes, expected):
    config = TrainConfig.from_dict({**valid.to_dict(), **changes})
    errors = validate(config)
    assert len(errors) == 1 and expected in errors[0], errors


def test_valid_grouping_combinations(valid):
    for changes in ({"grouping": "c", "deml_adversary": 1.0, "activation_decay": 0.014},
                    {"grouping": "a", "diversity": 0.01}, {"adversarial": "smooth"}):
        assert validate(TrainConfig.from_dict({**valid.to_dict(), **changes})) == []


def test_existing_run_needs_resume(valid, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"x")
    assert "pass --resume" in " ".join(validate(valid))
    valid.resume = True
    assert validate(valid) == []
