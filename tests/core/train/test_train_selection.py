"""Never worse than where it started: the epoch-0 evaluation, the validation split of the
training data, best.pt, head warm-up, frozen BatchNorm statistics, small training sets, and
bit-identical repeat runs with ``deterministic``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from dmlviewer.core.progress import run_to_end
from dmlviewer.core.train import Trainer, train
from dmlviewer.core.train.selection import validation_split

pytestmark = pytest.mark.slow


def test_validation_split_holds_out_whole_training_classes_or_images():
    labels = np.repeat(np.arange(10), 6)
    split = validation_split(labels, 0.2, seed=0)
    assert split.mode == "classes" and split.val_classes == 2
    assert not set(labels[split.val]) & set(labels[split.train])  # unseen in training, like the test classes
    assert sorted(np.concatenate([split.train, split.val]).tolist()) == list(range(60))
    few = validation_split(np.repeat(np.arange(5), 6), 0.2, seed=0)  # 1 class would be held out: by images
    assert few.mode == "images" and len(few.val) == 10  # 2 of each class's 6
    assert set(np.repeat(np.arange(5), 6)[few.train]) == set(range(5))
    assert validation_split(labels, 0.0, seed=0).mode == "none"


def test_pretrained_validation_holds_out_whole_classes_or_keeps_the_starting_model():
    """A pretrained backbone is never selected on held-out images of classes it trains on
    (that score rises while unseen classes get worse), nor on fewer than four held-out classes
    (measured: not enough): at least four whole classes are held out, more than the fraction
    when needed, as long as four remain; else mode ``start``."""
    eight = np.repeat(np.arange(8), 6)
    split = validation_split(eight, 0.2, seed=0, whole_classes=True)  # from scratch: 2 classes (above)
    assert split.mode == "classes" and split.val_classes == 4 and len(split.val) == 24
    assert len(set(eight[split.train])) == 4 and not set(eight[split.val]) & set(eight[split.train])
    assert validation_split(eight, 0.2, seed=0).val_classes == 2
    many = np.repeat(np.arange(30), 6)  # enough classes: the same split as from scratch
    assert np.array_equal(validation_split(many, 0.2, 0, whole_classes=True).val, validation_split(many, 0.2, 0).val)
    assert validation_split(np.repeat(np.arange(10), 6), 0.8, seed=0, whole_classes=True).val_classes == 6
    for n in (2, 5, 7):  # digits: 5 training classes
        few = validation_split(np.repeat(np.arange(n), 6), 0.2, seed=0, whole_classes=True)
        assert few.mode == "start" and len(few.val) == 0 and len(few.train) == 6 * n
    assert validation_split(eight, 0.0, seed=0, whole_classes=True).mode == "none"  # asked for no selection


def test_pretrained_run_on_too_few_classes_keeps_its_starting_model(tiny_config, tmp_path):
    """3 training classes and a pretrained backbone: no validation split can judge unseen classes,
    so best.pt is the epoch-0 model bit for bit (the run says so), training still uses every
    image, and checkpoint.pt holds the trained state; also when no evaluation is asked for."""
    from dmlviewer.core.models import build_model
    from dmlviewer.core.models.backbones import build_backbone

    weights = tmp_path / "backbone.pth"
    torch.manual_seed(0)
    torch.save(build_backbone("small_cnn").net.state_dict(), weights)
    for eval_every in (1, 0):
        config = tiny_config(tmp_path / f"run{eval_every}", pretrained=str(weights), val_fraction=0.2, epochs=2,
                             eval_every=eval_every)
        trainer = Trainer(config)
        events = list(trainer.run())
        result = events[-1].data["result"]
        assert any(e.kind == "log" and "epoch 0) model is kept" in e.message for e in events)
        assert trainer.split_mode == "start" and len(trainer.fit_set) == len(trainer.train_set) == 24
        assert result["selected_epoch"] == 0 and result["checkpoint"] == str(config.best_path)
        assert result["metrics"] == result["epoch0_metrics"] and "starting model" in result["selected_on"]
        from dmlviewer.core.train.state import seed_everything

        seed_everything(config.seed)
        initial = build_model(config.model_config()).state_dict()
        best = torch.load(config.best_path, weights_only=True)
        last = torch.load(config.checkpoint_path, weights_only=True)
        assert best["epoch"] == 0 and last["epoch"] == 2
        assert all(torch.equal(v, best["state_dict"][k]) for k, v in initial.items())
        assert any(not torch.equal(v, last["state_dict"][k]) for k, v in initial.items() if v.is_floating_point())


def _eval_lines(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]


def test_best_checkpoint_is_the_untrained_model_when_training_only_hurts(tiny_config, tmp_path, monkeypatch):
    """Training that collapses the features (every step zeroes the head) must leave the epoch-0
    model, bit for bit, as the run's model; the last state stays in checkpoint.pt."""
    config = tiny_config(tmp_path / "run", val_fraction=0.5, epochs=2)
    step = Trainer.step

    def collapsing(self, images, labels):
        values = step(self, images, labels)
        with torch.no_grad():
            for p in self.model.head.parameters():
                p.zero_()
        return values

    monkeypatch.setattr(Trainer, "step", collapsing)
    trainer = Trainer(config)
    events = list(trainer.run())
    result = events[-1].data["result"]
    lines = _eval_lines(config.run_dir)
    assert [x["epoch"] for x in lines] == [0, 1, 2] and all("val" in x for x in lines)
    assert result["selected_epoch"] == 0 and result["checkpoint"] == str(config.best_path)
    assert result["metrics"] == result["epoch0_metrics"] == lines[0]["metrics"]
    assert result["last_metrics"] == lines[-1]["metrics"] != lines[0]["metrics"]
    from dmlviewer.core.models import build_model
    from dmlviewer.core.train.state import seed_everything

    seed_everything(config.seed)
    initial = build_model(config.model_config()).state_dict()
    best = torch.load(config.best_path, weights_only=True)
    assert best["epoch"] == 0 and best["metrics"] == lines[0]["metrics"]
    for key, value in initial.items():
        assert torch.equal(value, best["state_dict"][key]), key
    last = torch.load(config.checkpoint_path, weights_only=True)
    assert last["epoch"] == 2 and all(float(v.abs().sum()) == 0 for k, v in last["state_dict"].items()
                                      if k.startswith("head.") and v.is_floating_point() and "running" not in k)


def test_selection_follows_validation_and_patience_stops(tiny_config, tmp_path):
    config = tiny_config(tmp_path / "run", val_fraction=0.5, epochs=4, patience=1)
    result = run_to_end(train(config))
    lines = _eval_lines(config.run_dir)
    scores = [x["val"]["map@r"] for x in lines]
    best = int(np.argmax(scores))  # the first maximum
    assert result["selected_epoch"] == lines[best]["epoch"]
    assert result["metrics"] == lines[best]["metrics"]
    # stopped at the first evaluation that did not improve on the best (patience 1), or ran out
    worse = [i for i in range(1, len(scores)) if scores[i] <= max(scores[:i])]
    assert result["early_stopped"] == bool(worse and worse[0] < 4)
    assert len(lines) - 1 == (worse[0] if worse and worse[0] < 4 else 4)


def test_warmup_trains_only_the_head_and_bn_statistics_stay_frozen(tiny_config, tmp_path):
    config = tiny_config(tmp_path / "run", epochs=2, steps_per_epoch=2, warmup_epochs=1, freeze_bn="on",
                         eval_every=0)
    trainer = Trainer(config)
    list(trainer.prepare())
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    events = trainer._epochs()
    for event in events:  # through epoch 1 (the warm-up)
        if event.kind == "epoch":
            break
    after_warmup = trainer.model.state_dict()
    backbone = [k for k in before if k.startswith("backbone.")]
    head = [k for k in before if k.startswith("head.") and before[k].is_floating_point()]
    assert all(torch.equal(before[k], after_warmup[k]) for k in backbone)  # weights and BN statistics
    assert any(not torch.equal(before[k], after_warmup[k]) for k in head)
    list(events)  # epoch 2: the backbone trains, its BatchNorm statistics still do not move
    final = trainer.model.state_dict()
    weights = [k for k in backbone if "running" not in k and "num_batches" not in k]
    stats = [k for k in backbone if "running" in k]
    assert stats and all(torch.equal(before[k], final[k]) for k in stats)
    assert any(not torch.equal(before[k], final[k]) for k in weights)


def test_small_folder_dataset_trains_with_all_its_classes_per_batch(tiny_data, tiny_config, tmp_path):
    """A 10-class folder (5 training classes) with the default 8 classes per batch: batches of
    all 5 classes, the batch size kept, and a warning."""
    root = tmp_path / "folder"
    images = sorted((tiny_data / "images").rglob("*.jpg"))
    for i in range(10):
        (root / f"{i:03d}").mkdir(parents=True)
        for j in range(6):
            shutil.copy(images[(6 * i + j) % len(images)], root / f"{i:03d}" / f"{j}.jpg")
    config = tiny_config(tmp_path / "run", dataset=str(root), epochs=1, classes_per_batch=8, images_per_class=4)
    trainer = Trainer(config)
    events = list(trainer.run())
    warnings = [e for e in events if e.kind == "log" and "classes_per_batch" in e.data]
    assert warnings and "5 classes x 6 images instead of 8 x 4" in warnings[0].message
    assert (trainer.classes_per_batch, trainer.images_per_class) == (5, 6)
    assert events[-1].kind == "done" and events[-1].data["result"]["steps"] == 1  # 30 images: one batch of 30


def test_deterministic_repeat_runs_are_bit_identical_whatever_the_thread_count(tiny_config, tmp_path):
    """Two fresh runs with the same seed, started with different torch thread counts (as a
    different shell, the app or another caller may leave them): bit-identical weights and
    metrics with ``deterministic``. Without it the thread count shows in the last bits."""
    threads = torch.get_num_threads()

    def fresh(name, n, deterministic):
        torch.set_num_threads(n)
        try:
            config = tiny_config(tmp_path / name, epochs=2, deterministic=deterministic, grouping="a", groups=2)
            run_to_end(train(config))
        finally:
            torch.set_num_threads(threads)
        saved = torch.load(config.checkpoint_path, weights_only=True)
        return saved["state_dict"], (config.run_dir / "metrics.jsonl").read_text()

    a, log_a = fresh("a", 1, True)
    b, log_b = fresh("b", 2, True)
    assert log_a == log_b
    assert all(torch.equal(a[k], b[k]) for k in a)
    c, _ = fresh("c", 1, False)
    d, _ = fresh("d", 2, False)
    assert any(not torch.equal(c[k], d[k]) for k in c)  # the cause the deterministic mode removes
