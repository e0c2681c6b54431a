"""``dmlviewer orientation``: camera orientation from point-to-point maps on a cross-view dataset
(:mod:`dmlviewer.core.explain.orientation`; seed 000 Sec. 5.3, Fig. 7).

``--json`` prints ``partial_map`` and ``overall_map`` (each ``within_3.5deg``,
``median_error_deg``, ``mean_error_deg``, ``histogram``), ``num_pairs`` and, with ``--per-pair``,
``pairs`` (DESIGN.md's last section).
"""

from __future__ import annotations

import argparse
import sys

from dmlviewer.commands.common import usage_error


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import add_device, add_model_options, int_range

    p = sub.add_parser("orientation", help="camera orientation from partial and overall maps (cross-view, JSON)",
                       description="For each street/aerial test pair: the query's most activated point, the peak of "
                                   "its partial map and of the aerial overall map, the heading each implies, and "
                                   "the angle errors against the true heading (headings.csv).")
    add_model_options(p)
    p.add_argument("--dataset", required=True, help="cross-view dataset in CVUSA's layout with headings.csv "
                                                    "(make-demo-data --cross-view)")
    p.add_argument("--split", default="test", choices=["train", "test", "all"], help="pairs to use")
    p.add_argument("--pairs", type=int_range(1, 1_000_000), default=None, metavar="N",
                   help="at most N pairs (default: all of the split)")
    p.add_argument("--per-pair", action="store_true", help="with --json, also each pair's estimates")
    add_device(p)
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import drive, open_command_model, print_json
    from dmlviewer.core.data import DatasetError, open_dataset
    from dmlviewer.core.explain.orientation import MAPS, orientation

    try:
        dataset = open_dataset(args.dataset)
        model, device = open_command_model(args, args.device)
        split = None if args.split == "all" else args.split
        result = drive(orientation(model, dataset, split, device, args.pairs), "orientation")
    except (ValueError, DatasetError) as exc:
        from dmlviewer.core.fields import FieldError

        error = usage_error(exc)
        if isinstance(exc, FieldError) and exc.field == "dataset":  # no heading: say how to get one
            error = UsageError(f"{error}; make one with make-demo-data --cross-view")
        raise error from None
    if not args.per_pair:
        result.pop("pairs", None)
    if args.json:
        print_json(result)
    else:
        for name in MAPS:
            r = result[name]
            sys.stdout.write(f"{name.replace('_', ' ')}: {100 * r['within_3.5deg']:.1f} % within 3.5 degrees, "
                             f"median error {r['median_error_deg']:.1f} degrees\n")
        sys.stdout.write(f"({result['num_pairs']} pairs)\n")
    return 0
