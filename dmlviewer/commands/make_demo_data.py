"""``dmlviewer make-demo-data``: write the synthetic parts dataset."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("make-demo-data", help="write the synthetic parts dataset (CUB layout)")
    p.add_argument("out", metavar="OUT", help="output folder")
    p.add_argument("--classes", type=int, default=20, metavar="N")
    p.add_argument("--per-class", type=int, default=40, metavar="M")
    p.add_argument("--size", type=int, default=128, metavar="S")
    p.add_argument("--seed", type=int, default=0, metavar="K")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.data.demo import MAX_CLASSES, make_demo_data

    if not 1 <= args.classes <= MAX_CLASSES:
        raise UsageError(f"--classes must be between 1 and {MAX_CLASSES}, got {args.classes}")
    if args.per_class < 1:
        raise UsageError(f"--per-class must be at least 1, got {args.per_class}")
    if args.size < 32:
        raise UsageError(f"--size must be at least 32, got {args.size}")
    try:  # make_demo_data logs where it wrote
        make_demo_data(args.out, classes=args.classes, per_class=args.per_class, size=args.size, seed=args.seed)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    return 0
