"""``dmlviewer make-demo-data``: write the synthetic parts dataset (``--cross-view``: the synthetic
street/aerial pairs in CVUSA's layout, :mod:`dmlviewer.core.data.cross_view`)."""

from __future__ import annotations

import argparse
from pathlib import Path


#: ``core.data.demo.MAX_CLASSES`` (repeated so that building the parser imports nothing heavy;
#: a test checks they agree)
MAX_CLASSES = 216


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import int_range, seed_type

    p = sub.add_parser("make-demo-data", help="write the synthetic parts dataset (CUB layout)")
    p.add_argument("out", metavar="OUT", help="output folder (must not exist or be empty)")
    p.add_argument("--classes", type=int_range(1, MAX_CLASSES), default=20, metavar="N", help="number of classes")
    p.add_argument("--per-class", type=int_range(1, 10_000), default=40, metavar="M", help="images per class")
    p.add_argument("--size", type=int_range(32, 1024), default=128, metavar="S", help="image size in pixels")
    p.add_argument("--seed", type=seed_type, default=0, metavar="K", help="random seed")
    p.add_argument("--cross-view", action="store_true",
                   help="write synthetic street panoramas and aerial images in CVUSA's layout instead (issue 25)")
    p.add_argument("--pairs", type=int_range(2, 100_000), default=200, metavar="N",
                   help="street/aerial pairs with --cross-view (a quarter are the test split)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.data.demo import make_demo_data

    parent = Path(args.out).parent
    if not parent.is_dir():
        raise UsageError(f"folder not found: {parent} (the dataset folder is created inside it)")
    if args.classes * args.per_class > 1_000_000:
        raise UsageError(f"--classes x --per-class is {args.classes * args.per_class:,} images; the most is 1,000,000")
    try:  # make_demo_data logs where it wrote
        if args.cross_view:
            from dmlviewer.core.data.cross_view import make_cross_view_data

            make_cross_view_data(args.out, pairs=args.pairs, seed=args.seed)
        else:
            make_demo_data(args.out, classes=args.classes, per_class=args.per_class, size=args.size, seed=args.seed)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # a full or read-only disk: name the dataset folder, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(args.out)) from None
    return 0
