"""``dmlviewer train --recipe``: recipe values fill the options not given, given options win,
and the command prints progress during evaluations too."""

from __future__ import annotations

import json

import pytest

from dmlviewer.cli import main
from dmlviewer.core.train import RECIPES, TrainConfig, apply_recipe

pytestmark = pytest.mark.slow


def test_recipes_set_the_papers_values_and_given_options_win():
    deml = apply_recipe("deml", {"dataset": "d", "out": "o"})
    assert (deml.grouping, deml.groups, deml.loss, deml.binomial) == ("c", 8, "binomial", "deml")
    assert (deml.deml_adversary, deml.activation_decay, deml.non_trivial, deml.weight_decay) == (1.0, 0.014, 0.25, 2e-4)
    assert deml.lr * deml.head_lr_mult == pytest.approx(1e-3)  # from scratch: the learners at 1e-3
    assert apply_recipe("deml", {"pretrained": "imagenet"}).lr == 1e-5  # seed 004's fine-tuning rate
    dgml = apply_recipe("dgml-a", {"lr": 3e-4})
    assert (dgml.grouping, dgml.groups, dgml.loss, dgml.miner, dgml.diversity) == ("a", 4, "margin",
                                                                                   "distance_weighted", 0.01)
    assert dgml.lr == 3e-4 and dgml.diversity_variant == "official" and dgml.weight_decay == 0.001
    adv = apply_recipe("adversarial", {"backbone": "resnet50"})
    assert (adv.loss, adv.triplet_margin, adv.adversarial, adv.adversarial_weight, adv.multilayer) == (
        "triplet", 0.01, "adaptive", 0.5, ["layer3"])
    plain = apply_recipe("plain", {})
    assert (plain.loss, plain.miner, plain.lr, plain.head_lr_mult, plain.weight_decay, plain.scheduler,
            plain.val_fraction) == ("ms", "none", 1e-3, 1.0, 0.0, "constant", 0.0)
    assert apply_recipe(None, {}) == TrainConfig()  # the default recipe from scratch is the defaults
    pretrained = apply_recipe("default", {"pretrained": "imagenet"})
    assert (pretrained.lr, pretrained.warmup_epochs, pretrained.val_fraction, pretrained.frozen_bn) == (
        1e-4, 1, 0.2, True)
    assert set(RECIPES) == {"default", "plain", "demo", "dgml-a", "deml", "adversarial"}
    with pytest.raises(ValueError, match="unknown recipe"):
        apply_recipe("nope", {})


def test_cli_recipe_with_overrides_and_progress_during_evaluation(tmp_path, capsys, monkeypatch):
    from dmlviewer.commands import train as command
    from dmlviewer.core.data import make_demo_data

    monkeypatch.setattr(command, "PRINT_EVERY_S", 0.0)  # a line for every event: long silences impossible
    data = make_demo_data(tmp_path / "data", classes=6, per_class=8, size=64, seed=1)
    run = tmp_path / "run"
    code = main(["train", "--recipe", "dgml-a", "--dataset", str(data), "--out", str(run), "--epochs", "1",
                 "--image-size", "64", "--dim", "32", "--classes-per-batch", "3", "--num-workers", "0",
                 "--device", "cpu", "--val-fraction", "0.4"])
    assert code == 0
    saved = json.loads((run / "config.json").read_text())
    assert (saved["grouping"], saved["loss"], saved["miner"], saved["diversity"]) == ("a", "margin",
                                                                                     "distance_weighted", 0.01)
    assert (saved["dim"], saved["classes_per_batch"], saved["images_per_class"]) == (32, 3, 2)  # given, recipe
    err = capsys.readouterr().err
    assert "recipe dgml-a" in err
    assert "evaluating epoch 0: validation" in err and "evaluating epoch 1: test" in err
    assert "best so far" in err and (run / "best.pt").is_file()
    assert main(["train", "--recipe", "nope", "--dataset", str(data), "--out", str(tmp_path / "x")]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_resume_keeps_the_runs_own_options_when_the_defaults_differ(tmp_path, capsys):
    """``--resume`` with only ``--epochs``: the options left out come from RUN/config.json, so a
    run started with other values than today's defaults (here a recipe's) continues, and an
    option given anew that differs is still refused by name."""
    from dmlviewer.core.data import make_demo_data

    data = make_demo_data(tmp_path / "data", classes=6, per_class=8, size=64, seed=1)
    run = tmp_path / "run"
    common = ["--dataset", str(data), "--out", str(run), "--num-workers", "0", "--device", "cpu"]
    assert main(["train", "--recipe", "plain", "--epochs", "1", "--image-size", "64", "--dim", "16",
                 "--classes-per-batch", "3", *common]) == 0
    first = json.loads((run / "config.json").read_text())
    assert (first["pooling"], first["lr"]) != (TrainConfig().pooling, TrainConfig().lr)  # not today's defaults
    capsys.readouterr()
    assert main(["train", "--resume", "--epochs", "2", *common]) == 0
    resumed = json.loads((run / "config.json").read_text())
    assert {k: v for k, v in resumed.items() if k not in ("epochs", "resume")} == \
        {k: v for k, v in first.items() if k not in ("epochs", "resume")}
    assert resumed["epochs"] == 2
    assert main(["train", "--resume", "--epochs", "3", "--lr", "0.01", *common]) == 1
    assert "cannot resume with different options: --lr" in capsys.readouterr().err
