"""``dmlviewer evaluate``: extract features to HDF5 and print the metrics.

With ``--json`` stdout holds exactly the metrics of DESIGN.md ("Metrics JSON keys"); progress
goes to stderr. Under ``torchrun`` (``torchrun --nproc_per_node N -m dmlviewer evaluate ...``)
the ranks share the extraction and only rank 0 writes the file and prints; a failed or killed
rank ends every rank with one line and status 1, and no feature file is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dmlviewer.commands.common import add_model_options, usage_error


def _ks(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1 or max(ks) > 100_000 or len(ks) > 64:
        raise argparse.ArgumentTypeError(f"K values must be integers from 1 to 100000 (at most 64), got {text!r}")
    return ks


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import add_decode, add_device, int_range

    p = sub.add_parser("evaluate", help="extract features to HDF5 and print retrieval/clustering metrics")
    add_model_options(p)
    p.add_argument("--dataset", required=True, metavar="P", help="dataset folder")
    p.add_argument("--format", choices=["cub", "cars196", "sop", "inshop", "folder"],
                   help="dataset format (default: detected)")
    p.add_argument("--protocol", default="default", choices=["default", "zero-shot", "official"],
                   help="split protocol")
    p.add_argument("--split", default="test", choices=["train", "test", "all"], help="images to evaluate")
    p.add_argument("--out", required=True, metavar="F.h5", help="feature file to write (replaced atomically)")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")
    p.add_argument("--batch-size", type=int_range(1, 65_536), default=64, metavar="B", help="images per batch")
    add_device(p, default="cpu")
    p.add_argument("--num-workers", type=int_range(0, 256), default=None, metavar="N",
                   help="data loader processes (default: chosen from the CPU count)")
    p.add_argument("--ks", type=_ks, default=[1, 2, 4, 8], metavar="K,K,...", help="Recall@K values")
    add_decode(p)
    p.set_defaults(func=run)


def _show(event) -> None:
    """One evaluation event on stderr: the step counter on one line, log messages as lines."""
    if event.kind == "step":
        sys.stderr.write(f"\r{event.message} {event.current}/{event.total}")
        if event.current == event.total:
            sys.stderr.write("\n")
    elif event.kind == "log":
        sys.stderr.write(event.message + "\n")


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import check_output_file, exit_on_sigterm, print_json
    from dmlviewer.core.evaluate import evaluate
    from dmlviewer.core.progress import drive

    from dmlviewer.commands.common import command_model_source

    source = command_model_source(args)  # a file that is not there: one line (UsageError)
    if not Path(args.dataset).exists():
        raise UsageError(f"dataset folder not found: {args.dataset}")
    check_output_file(args.out, "feature file")
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        exit_on_sigterm()  # torchrun stops the other ranks with SIGTERM when one fails
    try:
        metrics, _done = drive(evaluate(args.checkpoint or source, args.dataset, args.split, args.out,
                                        args.batch_size, args.device, args.format, args.ks, args.num_workers,
                                        args.protocol, decode=args.decode), emit=_show)
    except ValueError as exc:  # a bad device or an empty split; bad files are reported by the cli
        raise usage_error(exc) from None
    except RuntimeError as exc:
        if not distributed:
            raise
        rank = os.environ.get("RANK", "?")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.stderr.write(f"dmlviewer evaluate: error: rank {rank}: the distributed run failed ({first}); "
                         "no feature file was written\n")
        return 1
    if metrics is None:  # not rank 0 of a distributed run
        return 0
    if args.json:
        print_json(metrics)
    else:
        for key, value in metrics.items():
            sys.stdout.write(f"{key:12s} {value:.4f}\n" if isinstance(value, float) else f"{key:12s} {value}\n")
    sys.stderr.write(f"features written to {args.out}\n")
    return 0
