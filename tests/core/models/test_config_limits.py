"""A checkpoint's config is not trusted: every field is checked for type and range, naming the
field, before anything is allocated."""

from __future__ import annotations

import tracemalloc

import pytest

from dmlviewer.core.models import build_model, default_config
from dmlviewer.core.models.model import MAX_HEAD_PARAMETERS, check_config, head_parameters


@pytest.mark.parametrize("changes, field", [
    ({"dim": 10**9}, "dim"), ({"grouping": "c", "groups": 200_000}, "groups"), ({"hidden": 10**9}, "hidden"),
    ({"image_size": 10**6}, "image_size"), ({"pooling": "flatten", "image_size": 30_000}, "image_size"),
    ({"dim": True}, "dim"), ({"dim": 2.0}, "dim"), ({"backbone": ["small_cnn"]}, "backbone"),
    ({"multilayer": 5}, "multilayer"), ({"multilayer": [1, 2]}, "multilayer"), ({"bn": "yes"}, "bn"),
    ({"gem_p": float("nan")}, "gem_p"), ({"gem_p": True}, "gem_p"), ({"pretrained": 3}, "pretrained"),
    ({"mean": [0.5, "x", 0.5]}, "mean"), ({"evil": 1}, "evil"),
])
def test_bad_fields_are_named(changes, field):
    with pytest.raises(ValueError, match=field):
        check_config(default_config(backbone="small_cnn") | changes)


def test_non_string_keys_and_non_dicts_are_refused():
    with pytest.raises(ValueError, match="keys must be names"):
        check_config({1: 2})
    with pytest.raises(ValueError, match="dictionary"):
        check_config([1, 2])


def test_head_size_is_bounded_before_anything_is_built():
    config = default_config(backbone="resnet50", pooling="flatten", image_size=4096)
    assert head_parameters(default_config(backbone="resnet50", pooling="flatten")) < MAX_HEAD_PARAMETERS
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="parameters"):
            build_model(config, load_pretrained=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20  # refused from the config: nothing was allocated


def test_the_estimate_bounds_the_real_head():
    for changes in ({}, {"grouping": "c", "groups": 4}, {"grouping": "g", "groups": 4}, {"grouping": "m"},
                    {"hidden": 64}, {"pooling": "flatten", "image_size": 64}, {"grouping": "a", "groups": 4, "dim": 64},
                    {"grouping": "a", "hidden": 16, "bn": True}, {"multilayer": ["stage3"]}, {"dim": 0}):
        config = check_config(default_config(backbone="small_cnn", dim=changes.pop("dim", 32),
                                             image_size=changes.pop("image_size", 64), **changes))
        model = build_model(config, load_pretrained=False)
        real = sum(p.numel() for p in model.head.parameters())
        assert real <= head_parameters(config), (config, real, head_parameters(config))
