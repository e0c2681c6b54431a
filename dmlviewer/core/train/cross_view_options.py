"""A two-branch (cross-view) run from one-branch training options: the one mapping of
:class:`~dmlviewer.core.train.config.TrainConfig`'s fields (``train``'s options, the training
dialog's fields) to :class:`~dmlviewer.core.train.cross_view.CrossViewConfig`, used by
``train --branches 2`` and by the training dialog with Branches set to 2, so both doors start
the same run from the same values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmlviewer.core.train.cross_view import CrossViewConfig

#: TrainConfig's field -> the CrossViewConfig field it sets, for the fields a two-branch run reads
#: (``image_size`` also sets ``query_shape``: the panorama branch takes ``S/2 x 2S``, 1:4)
FIELDS = {"dataset": "dataset", "out": "out", "backbone": "backbone", "pretrained": "pretrained",
          "pooling": "pooling", "dim": "dim", "epochs": "epochs", "lr": "lr", "classes_per_batch": "batch_pairs",
          "image_size": "reference_size", "device": "device", "seed": "seed", "resume": "resume",
          "deterministic": "deterministic"}

#: the fields whose values are the two-branch recipe's (the others are data, output and machine)
RECIPE_FIELDS = ("pooling", "dim", "lr", "epochs", "classes_per_batch", "image_size")

#: fields that say how this run is started, never carried over from a saved run
_THIS_RUN = ("resume", "deterministic")


def cross_view_config(values: Mapping[str, Any], base: CrossViewConfig | None = None) -> CrossViewConfig:
    """The two-branch run of ``values`` (TrainConfig field names; those of :data:`FIELDS` are
    read, others ignored). A field left out keeps ``base``'s value (a resumed run's saved
    options; by default the two-branch recipe's), except ``resume`` and ``deterministic``,
    which are off unless given. ``pretrained`` ``"none"`` means none; ``image_size`` S sets the
    square aerial input and the ``S/2 x 2S`` panorama input."""
    base = base if base is not None else CrossViewConfig("", "")
    options = {target: values[name] for name, target in FIELDS.items() if name in values}
    for name in _THIS_RUN:
        options[name] = bool(options.get(name, False))
    if options.get("pretrained") == "none":
        options["pretrained"] = None
    if "reference_size" in options:
        size = int(options["reference_size"])
        options["query_shape"] = (size // 2, 2 * size)
    kept = {name: getattr(base, name) for name in CrossViewConfig.__dataclass_fields__ if name not in options}
    kept["extra_model"] = dict(kept.get("extra_model") or {})
    return CrossViewConfig(**{**kept, **options})


def train_values(config: CrossViewConfig, names: tuple[str, ...] | None = None) -> dict:
    """The TrainConfig fields (all of :data:`FIELDS`, or ``names``) that show ``config``: the
    inverse of :func:`cross_view_config` (no pretrained weights: ``"none"``)."""
    values = {name: getattr(config, target) for name, target in FIELDS.items()}
    values["pretrained"] = values["pretrained"] or "none"
    return {name: values[name] for name in (names or tuple(FIELDS))}


def recipe_values(config: CrossViewConfig | None = None) -> dict:
    """The two-branch recipe's values of :data:`RECIPE_FIELDS` (TrainConfig names), of
    ``config`` or of the defaults."""
    return train_values(config if config is not None else CrossViewConfig("", ""), RECIPE_FIELDS)
