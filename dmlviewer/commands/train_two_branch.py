"""``dmlviewer train --branches 2``: a two-branch (cross-view) model on a ``cvusa`` dataset
(:mod:`dmlviewer.core.train.cross_view`). Of ``train``'s options it reads ``--dataset``,
``--out``, ``--backbone``, ``--pretrained``, ``--pooling``, ``--dim``, ``--epochs``, ``--lr``,
``--classes-per-batch`` (pairs per batch: each pair is its own class), ``--image-size`` (the
aerial branch's square input; the panorama branch takes ``image_size/2 x 2*image_size``, 1:4),
``--device`` and ``--seed``; the others do not apply and are ignored with a warning."""

from __future__ import annotations

import argparse
import logging
import sys

log = logging.getLogger(__name__)

#: train options this command reads (the names of argparse's attributes)
USED = {"dataset", "out", "backbone", "pretrained", "pooling", "dim", "epochs", "lr", "classes_per_batch",
        "image_size", "device", "seed", "branches", "func", "command", "verbose", "quiet"}


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.data import DatasetError
    from dmlviewer.core.train.cross_view import CrossViewConfig, train_cross_view

    ignored = sorted(k for k in vars(args) if k not in USED and not k.startswith("_"))
    if ignored:
        log.warning("train --branches 2 ignores %s", ", ".join("--" + k.replace("_", "-") for k in ignored))
    d = CrossViewConfig("", "")
    size = getattr(args, "image_size", d.reference_size)
    pretrained = getattr(args, "pretrained", d.pretrained)
    config = CrossViewConfig(
        dataset=args.dataset, out=args.out, backbone=getattr(args, "backbone", d.backbone),
        pretrained=None if pretrained in (None, "none") else pretrained, pooling=getattr(args, "pooling", d.pooling),
        dim=getattr(args, "dim", d.dim), epochs=getattr(args, "epochs", d.epochs), lr=getattr(args, "lr", d.lr),
        batch_pairs=getattr(args, "classes_per_batch", d.batch_pairs), query_shape=(max(8, size // 2), 2 * size),
        reference_size=size, device=getattr(args, "device", d.device), seed=getattr(args, "seed", d.seed))

    def on_epoch(record: dict) -> None:
        loss = "-" if record["loss"] is None else f"{record['loss']:.4f}"
        sys.stderr.write(f"epoch {record['epoch']}/{config.epochs}: loss {loss}, recall@1 {record['recall@1']:.3f}, "
                         f"recall@5 {record['recall@5']:.3f}, recall@1% {record['recall@1%']:.3f} "
                         f"({record['num_queries']} queries)\n")

    try:
        result = train_cross_view(config, on_epoch)
    except DatasetError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    except RuntimeError as exc:
        sys.stderr.write(f"dmlviewer train: error: {str(exc).splitlines()[0]}\n")
        return 1
    sys.stderr.write(f"done: {result['checkpoint']} (recall@1 {result['recall@1']:.3f})\n")
    return 0
