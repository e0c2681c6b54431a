"""TrainConfig round trip and validate(): each invalid combination is explained."""

from __future__ import annotations

import pytest

from dmlviewer.commands.train import option_names
from dmlviewer.core.fields import worded
from dmlviewer.core.train import TrainConfig, validate


def _cli(errors) -> list[str]:
    """``validate``'s errors as the command line words them (the core names options by identifier)."""
    return [worded(e, option_names()) for e in errors]


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
    ({"pretrained": "imagenet"}, "--pretrained imagenet: no ImageNet weights exist for small_cnn"),
    ({"lr": float("nan")}, "--lr must be a finite number"),
    ({"log_every": 0}, "--log-every must be at least 1"),
])
def test_invalid_combinations_are_explained(valid, changes, expected):
    config = TrainConfig.from_dict({**valid.to_dict(), **changes})
    errors = _cli(validate(config))
    assert len(errors) == 1 and expected in errors[0], errors


def test_valid_grouping_combinations(valid):
    for changes in ({"grouping": "c", "deml_adversary": 1.0, "activation_decay": 0.014},
                    {"grouping": "a", "diversity": 0.01}, {"adversarial": "smooth"}):
        assert validate(TrainConfig.from_dict({**valid.to_dict(), **changes})) == []


def test_existing_run_needs_resume(valid, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"x")
    assert "pass --resume" in " ".join(_cli(validate(valid)))
    valid.resume = True
    assert validate(valid) == []


def test_core_messages_name_options_by_identifier(valid):
    """No command-line text in the core (issue 30 item 6): each message names its options by
    identifier, and the caller words them (here as a dialog would, by label)."""
    config = TrainConfig.from_dict({**valid.to_dict(), "grouping": "a", "groups": 3, "dim": 32, "lr": -1.0})
    errors = validate(config)
    assert errors and not any("--" in str(e) for e in errors)
    assert [e.fields for e in errors] == [("dim", "groups"), ("lr",)]
    labels = {"dim": "“Embedding size”", "groups": "“Groups”"}
    assert worded(errors[0], labels) == "“Embedding size” 32 must be divisible by “Groups” 3 (equal group sizes)"
    braces = TrainConfig.from_dict({**valid.to_dict(), "dataset": "/no/{such}"})  # user text stays text
    assert _cli(validate(braces)) == ["dataset folder not found: /no/{such}"]


def test_a_running_jobs_errors_are_worded_in_the_callers_terms():
    """A run in another process hands back only its error's text: ``worded_run`` words it there
    (the training dialog passes its field labels)."""
    from dmlviewer.core.fields import FieldError
    from dmlviewer.core.train.errors import TrainingError, TrainingFieldsError, worded_run

    def run(config, cancel=None):
        yield config
        raise TrainingFieldsError("non-finite loss at step 3: {{'loss': nan}}; Try a lower {lr}.")

    events = worded_run(run, {"lr": "“Learning rate”"}, "config")
    assert next(events) == "config"
    with pytest.raises(TrainingError) as info:
        next(events)
    assert str(info.value) == "non-finite loss at step 3: {'loss': nan}; Try a lower “Learning rate”."
    assert not isinstance(info.value, FieldError)
