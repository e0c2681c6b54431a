"""``dmlviewer correspond``: part-correspondence accuracy of partial maps against the overall-map
baseline on a dataset with part masks (see :mod:`dmlviewer.core.explain.correspondence`).

``--json`` prints ``partial_map_accuracy overall_map_accuracy num_pairs num_parts`` (DESIGN.md).
"""

from __future__ import annotations

import argparse
import sys

from dmlviewer.commands.common import usage_error


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import add_device, add_model_options, int_range, seed_type

    p = sub.add_parser("correspond", help="part-correspondence accuracy on a dataset with part masks (JSON)",
                       description="Does the partial map of a query part peak on the same part of the reference?")
    add_model_options(p)
    p.add_argument("--dataset", required=True, help="dataset folder with parts/masks (make-demo-data)")
    p.add_argument("--split", default="test", choices=["train", "test", "all"], help="images to pair")
    p.add_argument("--pairs", type=int_range(1, 1_000_000), default=200, metavar="N",
                   help="number of same-class pairs")
    p.add_argument("--seed", type=seed_type, default=0, help="seed of the pairing")
    p.add_argument("--format", choices=["cub", "cars196", "sop", "inshop", "folder"],
                   help="dataset format (default: detected)")
    p.add_argument("--protocol", default="default", choices=["default", "zero-shot", "official"],
                   help="split protocol")
    add_device(p)
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import drive, open_command_model, print_json
    from dmlviewer.core.explain import correspond

    from dmlviewer.core.data import open_dataset

    dataset = open_dataset(args.dataset, args.format, args.protocol)
    if dataset.parts_root is None:
        raise UsageError(f"{args.dataset} has no part masks (parts/masks/): make one with make-demo-data")
    model, device = open_command_model(args, args.device)
    split = None if args.split == "all" else args.split
    try:
        result = drive(correspond(model, dataset, split, args.pairs, args.seed, device), "correspond")
    except ValueError as exc:
        raise usage_error(exc) from None
    if args.json:
        print_json(result)
    else:
        sys.stdout.write(
            f"partial map {result['partial_map_accuracy']:.3f}, overall map {result['overall_map_accuracy']:.3f}, "
            f"chance {result['chance_accuracy']:.3f} ({result['num_parts']} parts in {result['num_pairs']} pairs)\n"
            f"top matches on the object {result['matches_on_object']:.3f} ({result['matches_score_on_object']:.3f} "
            f"of their score), on the same part {result['matches_same_part']:.3f}\n"
        )
        if result.get("group_diversity") is not None:
            sys.stdout.write(f"group diversity {result['group_diversity']:.3f} (0: all groups show the same map)\n")
    return 0
