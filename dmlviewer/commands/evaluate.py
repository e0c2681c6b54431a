"""``dmlviewer evaluate``: extract features to HDF5 and print the metrics.

With ``--json`` stdout holds exactly the metrics of DESIGN.md ("Metrics JSON keys"); progress
goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dmlviewer.commands.common import CHECKPOINT_HELP


def _ks(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"K values must be positive integers, got {text!r}")
    return ks


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="extract features to HDF5 and print retrieval/clustering metrics")
    p.add_argument("--checkpoint", required=True, metavar="C", help=CHECKPOINT_HELP)
    p.add_argument("--dataset", required=True, metavar="P")
    p.add_argument("--format", help="dataset format (default: detected)")
    p.add_argument("--protocol", default="default", help="split protocol: default | zero-shot | official")
    p.add_argument("--split", default="test", help="train | test | all")
    p.add_argument("--out", required=True, metavar="F.h5", help="feature file to write")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")
    p.add_argument("--batch-size", type=int, default=64, metavar="B")
    p.add_argument("--device", default="cpu", help="auto | cpu | cuda | cuda:N | mps")
    p.add_argument("--num-workers", type=int, default=None, metavar="N", help="data loader processes")
    p.add_argument("--ks", type=_ks, default=[1, 2, 4, 8], metavar="K,K,...", help="Recall@K values")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.evaluate import evaluate

    from dmlviewer.commands.common import model_source_exists

    if not model_source_exists(args.checkpoint):
        raise UsageError(f"checkpoint not found: {args.checkpoint}")
    if not Path(args.dataset).exists():
        raise UsageError(f"dataset folder not found: {args.dataset}")
    if not Path(args.out).parent.is_dir():
        raise UsageError(f"output folder not found: {Path(args.out).parent}")
    if args.split not in ("train", "test", "all"):
        raise UsageError(f"--split must be train, test or all (got {args.split!r})")
    if args.batch_size < 1:
        raise UsageError("--batch-size must be positive")
    metrics = None
    try:
        for event in evaluate(args.checkpoint, args.dataset, args.split, args.out, args.batch_size,
                              args.device, args.format, args.ks, args.num_workers, args.protocol):
            if event.kind == "step":
                sys.stderr.write(f"\r{event.message} {event.current}/{event.total}")
                if event.current == event.total:
                    sys.stderr.write("\n")
            elif event.kind == "log":
                sys.stderr.write(event.message + "\n")
            elif event.kind == "done":
                metrics = event.data["result"]
    except ValueError as exc:  # a bad device or an empty split; bad files are reported by the cli
        raise UsageError(str(exc)) from None
    if args.json:
        sys.stdout.write(json.dumps(metrics) + "\n")
    else:
        for key, value in metrics.items():
            sys.stdout.write(f"{key:12s} {value:.4f}\n" if isinstance(value, float) else f"{key:12s} {value}\n")
    sys.stderr.write(f"features written to {args.out}\n")
    return 0
