"""``dmlviewer train --branches 2``: a two-branch (cross-view) model on a ``cvusa`` dataset
(:mod:`dmlviewer.core.train.cross_view`).

Of ``train``'s options it reads ``--dataset``, ``--out``, ``--backbone``, ``--pretrained``,
``--pooling``, ``--dim``, ``--epochs``, ``--lr``, ``--classes-per-batch`` (pairs per batch: each
pair is its own class), ``--image-size`` (the aerial branch's square input S; the panorama
branch takes ``S/2 x 2S``, 1:4), ``--device``, ``--seed``, ``--deterministic`` and ``--resume``
(as one-branch ``train``: continue the run in ``--out`` from its checkpoint; options left out
keep the run's own values). Options that only tune how the run is carried out and not what it
learns (``--num-workers``, ``--eval-batch-size``, ``--eval-every``, ``--log-every``, ``--amp``,
``--protocol``) are ignored with a warning; every other option (a loss, miner, head, schedule,
recipe, ...) would change what is trained and is refused, so that nothing silently means
something else. The first Ctrl-C (or SIGTERM) stops after the current batch and saves a
checkpoint that ``--resume`` continues; a second aborts (the last saved checkpoint stays)."""

from __future__ import annotations

import argparse
import logging
import sys

log = logging.getLogger(__name__)

#: options that change how the run is carried out, not what it learns: ignored with a warning
HARMLESS = {"num_workers", "eval_batch_size", "eval_every", "log_every", "amp", "protocol"}


def _refused(args: argparse.Namespace) -> list[str]:
    """Options given that would change what is trained (a loss, head, schedule, recipe, ...)."""
    from dmlviewer.core.train.config import TrainConfig
    from dmlviewer.core.train.cross_view_options import FIELDS

    training = set(TrainConfig.__dataclass_fields__) | {"recipe", "format"}
    used = set(FIELDS) | {"branches"}  # the train options a two-branch run reads
    return sorted(k for k in vars(args) if k in training and k not in used | HARMLESS)


def _flags(names) -> str:
    return ", ".join("--" + k.replace("_", "-") for k in names)


def option_names() -> dict[str, str]:
    """How this command words the core's errors: ``train``'s options and the two-branch fields
    (``batch_pairs``: ``--classes-per-batch``)."""
    from dmlviewer.commands.options import option_names as names
    from dmlviewer.core.train.config import TrainConfig
    from dmlviewer.core.train.cross_view import CrossViewConfig

    return names([*TrainConfig.__dataclass_fields__, *CrossViewConfig.__dataclass_fields__])


def config_from_args(args: argparse.Namespace):
    """The :class:`~dmlviewer.core.train.cross_view.CrossViewConfig` of the options given (the
    core's one mapping, :func:`~dmlviewer.core.train.cross_view_options.cross_view_config`, as
    the training dialog's); with ``--resume`` the options left out keep the run's own values
    (its ``config.json``)."""
    from dmlviewer.core.train.cross_view import CrossViewConfig, saved_config
    from dmlviewer.core.train.cross_view_options import cross_view_config

    base = None
    if getattr(args, "resume", False):
        saved = saved_config(args.out)
        if saved is not None:
            try:
                base = CrossViewConfig.from_dict(saved)
            except (TypeError, ValueError):
                pass  # unreadable: the checkpoint's own options are compared when the run starts
    return cross_view_config(vars(args), base)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import cancel_on_signals
    from dmlviewer.core.fields import worded
    from dmlviewer.core.progress import CancelToken
    from dmlviewer.core.train.cross_view import train_cross_view, validate_cross_view
    from dmlviewer.core.train.errors import TrainingError

    refused = _refused(args)
    if refused:
        raise UsageError(f"train --branches 2 does not take {_flags(refused)}: two-branch training is CVM-Net's "
                         "soft-margin triplet loss with Adam on street/aerial pairs (options: --backbone, "
                         "--pretrained, --pooling, --dim, --epochs, --lr, --classes-per-batch, --image-size, --seed)")
    ignored = sorted(k for k in vars(args) if k in HARMLESS)
    if ignored:
        log.warning("train --branches 2 ignores %s (they do not change what is trained)", _flags(ignored))
    config = config_from_args(args)
    names = option_names()
    errors = validate_cross_view(config)
    if errors:
        raise UsageError("; ".join(worded(e, names) for e in errors))
    cancel = CancelToken()

    def on_epoch(record: dict) -> None:
        loss = "-" if record["loss"] is None else f"{record['loss']:.4f}"
        sys.stderr.write(f"epoch {record['epoch']}/{config.epochs}: loss {loss}, recall@1 {record['recall@1']:.3f}, "
                         f"recall@5 {record['recall@5']:.3f}, recall@1% {record['recall@1%']:.3f} "
                         f"({record['num_queries']} queries)\n")
        sys.stderr.flush()

    try:
        with cancel_on_signals(cancel):
            result = train_cross_view(config, on_epoch, cancel)
    except TrainingError as exc:  # a run that cannot start or go on: exit 1
        sys.stderr.write(f"dmlviewer train: error: {worded(exc, names)}\n")
        return 1
    except ValueError as exc:  # a dataset that is not a usable cross-view set
        raise UsageError(worded(exc, names).splitlines()[0]) from None
    if result["cancelled"]:
        sys.stderr.write(f"cancelled: state saved to {result['checkpoint']} after epoch {result['epoch']}; "
                         "continue with --resume\n")
        return 0
    sys.stderr.write(f"done: {result['checkpoint']} (recall@1 {result['recall@1']:.3f})\n")
    return 0
