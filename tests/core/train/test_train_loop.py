"""The training loop's behaviour: objective terms, adaptive lambda, bad input, optimizer groups."""

from __future__ import annotations

import shutil

import pytest
import torch

from dmlviewer.core.progress import run_to_end
from dmlviewer.core.train import Trainer, TrainingError, adaptive_lambda, train
from dmlviewer.core.train.losses import GroupedMetricLoss
from dmlviewer.core.train.optim import parameter_groups

pytestmark = pytest.mark.slow


def test_deml_objective_terms_and_adaptive_lambda_per_epoch(tiny_config, tmp_path):
    config = tiny_config(tmp_path / "run", epochs=2, grouping="c", groups=2, loss="binomial",
                         deml_adversary=1.0, activation_decay=0.014, adversarial="adaptive",
                         adversarial_weight=0.5, eval_every=0)
    trainer = Trainer(config)
    events = list(trainer.run())
    steps = [e for e in events if e.kind == "step"]
    assert set(steps[0].data["losses"]) == {"metric", "activation_decay", "non_trivial", "deml_adversary", "class"}
    epochs = [e for e in events if e.kind == "epoch"]
    # Eq. 25 after each epoch from that epoch's mean classification loss
    expected = adaptive_lambda(epochs[-1].data["losses"]["class"], 0.5, 1.5)
    assert float(trainer.objective.class_adversary.lam) == pytest.approx(expected, rel=1e-5)
    assert [e.kind for e in events].count("eval") == 1  # eval_every=0: only after the last epoch
    assert events[-1].data["result"]["metrics"]["num_queries"] == 24


def test_grouping_head_with_diversity_and_smooth_adversary(tiny_config, tmp_path):
    config = tiny_config(tmp_path / "run", epochs=1, grouping="a", groups=2, diversity=0.1,
                         adversarial="smooth", loss="ms")
    events = list(train(config))
    losses = [e.data["losses"] for e in events if e.kind == "step"]
    assert set(losses[0]) == {"metric", "diversity", "class"}
    assert all(0 < l["diversity"] for l in losses)


def test_non_finite_loss_stops_with_step_number_and_keeps_checkpoint(tiny_config, tmp_path, monkeypatch):
    calls = {"n": 0}
    forward = GroupedMetricLoss.forward

    def poisoned(self, *args):
        calls["n"] += 1
        loss = forward(self, *args)
        return loss * float("nan") if calls["n"] == 4 else loss

    monkeypatch.setattr(GroupedMetricLoss, "forward", poisoned)
    config = tiny_config(tmp_path / "run")
    with pytest.raises(TrainingError, match=r"non-finite loss at step 4 \(epoch 2\).*last good checkpoint is kept"):
        run_to_end(train(config))
    saved = torch.load(config.checkpoint_path, weights_only=True)
    assert saved["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in saved["state_dict"].values() if v.is_floating_point())


def test_out_of_memory_becomes_a_clear_message(tiny_config, tmp_path, monkeypatch):
    def oom(self, images, labels):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Trainer, "step", oom)
    with pytest.raises(TrainingError, match="out of memory with batches of 12 images of 64 px.*smaller"):
        run_to_end(train(tiny_config(tmp_path / "run")))


def test_class_with_one_image_is_reported_and_sampled_around(tiny_data, tiny_config, tmp_path):
    root = tmp_path / "folder"
    names = ["a", "b", "c", "d", "single", "x", "y", "z", "w"]  # zero-shot: first 5 train
    images = sorted((tiny_data / "images").rglob("*.jpg"))
    for i, name in enumerate(names):
        (root / name).mkdir(parents=True)
        for j in range(1 if name == "single" else 4):
            shutil.copy(images[(8 * i + j) % len(images)], root / name / f"{j}.jpg")
    config = tiny_config(tmp_path / "run", dataset=str(root), epochs=1, classes_per_batch=4, images_per_class=2)
    events = list(train(config))
    logs = [e for e in events if e.kind == "log"]
    assert logs and logs[0].data["thin_classes"] == ["single"] and "single" in logs[0].message
    assert events[-1].kind == "done"


def test_parameter_groups_use_head_multiplier_and_paper_rates(tiny_config, tmp_path):
    config = tiny_config(tmp_path / "run", lr=1e-4, head_lr_mult=10.0, loss="margin", grouping="m", groups=2)
    trainer = Trainer(config)
    list(trainer.prepare())
    groups = {g["name"]: g for g in parameter_groups(trainer.objective, config)}
    assert groups["backbone"]["lr"] == 1e-4 and groups["head"]["lr"] == pytest.approx(1e-3)
    assert groups["loss"]["lr"] == 5e-4 and groups["loss"]["weight_decay"] == 0.0  # learnable margin beta
    head = {id(p) for p in trainer.model.head.parameters()}
    backbone = {id(p) for p in trainer.model.backbone.parameters()}
    assert {id(p) for p in groups["head"]["params"]} == head
    assert {id(p) for p in groups["backbone"]["params"]} == backbone


@pytest.mark.parametrize("grouping, expected", [("none", [(16, 128)]), ("m", [(8, 128), (8, 128)]),
                                                ("c", [(8, 128), (8, 128)]), ("a", [])])
def test_learner_weights_of_each_head(grouping, expected):
    """omega_ij of seed 004 Eq. 6: one weight matrix per learner (group)."""
    from dmlviewer.core.models import build_model, default_config
    from dmlviewer.core.train.objective import learner_weights

    model = build_model(default_config(backbone="small_cnn", grouping=grouping, groups=2, dim=16, image_size=64))
    weights = learner_weights(model)
    assert [tuple(w.shape) for w in weights] == expected
    if grouping == "m":  # row blocks of the shared last layer, as views (gradients reach it)
        assert weights[1].data_ptr() == model.head.projection.out.weight[8:].data_ptr()


def test_evaluations_of_a_run_reuse_their_loader_workers(tiny_config, tmp_path, monkeypatch):
    """Each epoch's evaluation runs over the same loader, whose worker processes were forked for
    the first one (``extract.persistent_loaders``) and end with the run."""
    from dmlviewer.core.evaluate import extract

    made = []
    real = extract.make_loader

    def recording(*args, **kwargs):
        loader = real(*args, **kwargs)
        made.append(loader)
        return loader

    monkeypatch.setattr(extract, "make_loader", recording)
    seen: list[tuple[int, ...]] = []
    config = tiny_config(tmp_path / "run", epochs=2, eval_every=1, num_workers=2)
    for event in Trainer(config).run():
        if event.kind == "eval":
            seen.append(tuple(w.pid for w in made[-1]._iterator._workers))
    assert len(seen) == 3 and len({id(m) for m in made}) == 1 and len(set(seen)) == 1  # epochs 0, 1, 2
    assert made[0]._iterator is None  # its workers shut down when the run ended
