"""The one mapping of training options to a two-branch run (issue 39 item 2), without Qt."""

from __future__ import annotations

from dmlviewer.core.train import TrainConfig
from dmlviewer.core.train.cross_view import CrossViewConfig
from dmlviewer.core.train.cross_view_options import FIELDS, cross_view_config, recipe_values, train_values


def test_a_train_config_maps_to_the_two_branch_run_it_describes():
    config = TrainConfig(dataset="cv", out="run", pooling="gap", dim=24, epochs=3, lr=0.002, classes_per_batch=6,
                         image_size=48, seed=7, device="cpu", pretrained="none")
    run = cross_view_config(config.to_dict())
    assert run == CrossViewConfig("cv", "run", pooling="gap", dim=24, epochs=3, lr=0.002, batch_pairs=6,
                                  reference_size=48, query_shape=(24, 96), seed=7, device="cpu", pretrained=None,
                                  backbone=config.backbone)
    # the inverse shows the run in TrainConfig's fields again
    shown = train_values(run)
    assert set(shown) == set(FIELDS)
    assert all(shown[name] == getattr(config, name) for name in FIELDS), shown


def test_options_left_out_keep_a_resumed_runs_values_but_not_its_resume_choice():
    saved = CrossViewConfig("cv", "run", dim=16, epochs=2, reference_size=64, query_shape=(32, 128), alpha=5.0,
                            rotate=False, resume=True, deterministic=True, extra_model={"k": 1})
    run = cross_view_config({"dataset": "cv2", "out": "run", "epochs": 4, "resume": True}, saved)
    assert (run.dataset, run.epochs, run.dim, run.reference_size, run.query_shape) == ("cv2", 4, 16, 64, (32, 128))
    assert (run.alpha, run.rotate, run.extra_model, run.resume, run.deterministic) == (5.0, False, {"k": 1}, True, False)
    assert run.extra_model is not saved.extra_model
    assert cross_view_config({"dataset": "cv", "out": "o"}, saved).resume is False


def test_the_recipe_values_are_the_two_branch_defaults():
    d = CrossViewConfig("", "")
    assert recipe_values() == {"pooling": d.pooling, "dim": d.dim, "lr": d.lr, "epochs": d.epochs,
                               "classes_per_batch": d.batch_pairs, "image_size": d.reference_size}
