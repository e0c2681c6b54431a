"""``dmlviewer faithfulness``: deletion and insertion AUCs of every explanation method over
same-class and different-class pairs of a dataset split (see
:mod:`dmlviewer.core.explain.faithfulness`).

``--method`` may be repeated and each value may be a comma list; ``all`` selects every map the
model has (the six overall maps, ``occlusion``, ``point_to_point`` and, for grouping heads,
``group_<p>``). ``random`` (the floor) is always reported and ``oracle`` (the greedy ceiling) on
the first ``--oracle-pairs`` pairs (0: none). ``grad_transfer`` takes the grad weights of
``--features F.h5`` (computed and stored there when missing) or, without it, computes them from
the dataset's train split; ``all`` leaves it out when there is neither.

``--json`` prints a list, one object per method: ``method baseline steps fractions
deletion_auc insertion_auc deletion_auc_sem insertion_auc_sem num_pairs deletion_curve
insertion_curve oracle_pairs`` over the same-class pairs and ``different_class`` with the same
keys (but ``method baseline steps fractions``) over the different-class pairs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from dmlviewer.commands.common import (GRAD_FEATURES_HELP, add_model_options, add_source_options, drive, int_range,
                                      open_command_model, print_json, seed_type, usage_error)
from dmlviewer.core.explain import methods as registry
from dmlviewer.core.explain.perturb_options import BASELINES, CPU_BATCH, DEFAULT_ORACLE_PAIRS, DEFAULT_STEPS, GPU_BATCH

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("faithfulness", help="deletion/insertion faithfulness of explanation methods (JSON)",
                       description="Deletion and insertion curves (AUC) of each explanation map over "
                                   "same-class and different-class pairs.")
    add_model_options(p)
    p.add_argument("--dataset", required=True, help="dataset folder")
    p.add_argument("--method", action="append", default=None,
                   help=f"method(s), repeatable or comma-separated: {', '.join(registry.methods('faithfulness'))}, "
                        "group_<p>, or all (default all)")
    p.add_argument("--pairs", type=int_range(1, 100_000), default=200, metavar="N",
                   help="pairs evaluated, half same-class (default 200)")
    p.add_argument("--baseline", default="blur", choices=BASELINES, help="what a removed cell shows (default blur)")
    p.add_argument("--steps", type=int_range(1, 4096), default=DEFAULT_STEPS, metavar="S",
                   help=f"points of each curve after the first (default {DEFAULT_STEPS})")
    p.add_argument("--oracle-pairs", type=int_range(0, 100_000), default=DEFAULT_ORACLE_PAIRS, metavar="N",
                   help=f"pairs on which the greedy oracle runs (default {DEFAULT_ORACLE_PAIRS}; 0: no oracle)")
    p.add_argument("--split", default="test", choices=["train", "test", "all"], help="images to pair (default test)")
    p.add_argument("--batch-size", type=int_range(1, 4096), default=None, metavar="B",
                   help=f"perturbed images per forward pass (default {CPU_BATCH} on the CPU, where small "
                        f"batches run fastest, {GPU_BATCH} on a GPU)")
    p.add_argument("--seed", type=seed_type, default=0,
                   help="seed of the pairs, the random order and the noise (default 0)")
    add_source_options(p, GRAD_FEATURES_HELP)
    p.set_defaults(func=run)


def parse_methods(values: list[str] | None, available: list[str]) -> tuple[list[str], bool]:
    """``(methods, all_given)`` from the ``--method`` values (``random``/``oracle`` accepted
    and ignored: they are always reported)."""
    from dmlviewer.cli import UsageError

    methods, everything = [], not values
    for value in values or []:
        for name in value.split(","):
            name = name.strip()
            if name == "all":
                everything = True
            elif name in ("random", "oracle"):
                continue
            elif name:
                if name not in available:
                    raise UsageError(f"unknown method {name!r} for this model; choose from "
                                     f"{', '.join(available)}, all")
                methods.append(name)
    if everything:
        methods = list(available) + methods
    return list(dict.fromkeys(methods)), everything


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError

    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.explain.faithfulness import available_methods, faithfulness

    dataset = open_dataset(args.dataset, args.format, args.protocol)
    model, device = open_command_model(args, args.device)
    methods, everything = parse_methods(args.method, available_methods(model))
    split = None if args.split == "all" else args.split
    if split is not None and len(dataset.indices(split)) == 0:
        raise UsageError(f"the dataset has no {split!r} images")
    if everything and "grad_transfer" in methods and not args.features and len(dataset.indices("train")) == 0:
        log.info("grad_transfer left out: no --features and no train split to compute grad weights from")
        methods.remove("grad_transfer")
    try:
        bank = None
        if args.features and "grad_transfer" in methods:
            from dmlviewer.commands.explain import grad_bank_from_features

            bank = grad_bank_from_features(model, args.features, device, save=args.save_grad_weights)
        results = drive(faithfulness(model, dataset, methods, pairs=args.pairs, baseline=args.baseline,
                                     steps=args.steps, oracle_pairs=args.oracle_pairs, split=split,
                                     device=device, batch_size=args.batch_size, seed=args.seed,
                                     grad_bank=bank), "faithfulness")
    except ValueError as exc:
        raise usage_error(exc) from None
    if args.json:
        print_json(results)
    else:
        sys.stdout.write(format_table(results) + "\n")
    return 0


def format_table(results: list[dict]) -> str:
    """A plain-text AUC table (same-class and different-class pairs)."""
    lines = [f"{'':<20} {'same-class pairs':^25}   {'different-class pairs':^25}",
             f"{'method':<20} {'deletion':>9} {'insertion':>9} {'pairs':>5}   {'deletion':>9} {'insertion':>9} "
             f"{'pairs':>5}"]
    def cells(s: dict) -> str:
        auc = lambda v: f"{v:>9.4f}" if v is not None else f"{'-':>9}"  # noqa: E731
        return f"{auc(s['deletion_auc'])} {auc(s['insertion_auc'])} {s['num_pairs']:>5}"

    for r in results:
        lines.append(f"{r['method']:<20} {cells(r)}   {cells(r['different_class'])}")
    if results:
        lines.append(f"baseline {results[0]['baseline']}, {results[0]['steps']} steps; deletion: lower is "
                     "more faithful, insertion: higher")
    return "\n".join(lines)
