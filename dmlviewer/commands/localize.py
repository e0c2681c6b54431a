"""``dmlviewer localize``: weakly supervised localization accuracy per threshold and method.

``--method`` may be repeated and each value may be a comma list (``--method decomposition,gradcam
--method rgradcam``); ``all`` selects every method. The JSON (``--json``) is a list with one
object per method: ``method pairing thresholds accuracy best_threshold best_accuracy
num_images`` (DESIGN.md). ``--pairing`` chooses each image's reference (self, nearest,
same-class; see :mod:`dmlviewer.core.explain.localization`). ``grad_transfer`` takes the grad
weights of ``--features F.h5`` (computed and stored there when missing) or, without it, computes
them from the dataset's train split.
"""

from __future__ import annotations

import argparse
import logging
import sys

from dmlviewer.commands.common import (GRAD_FEATURES_HELP, add_model_options, add_source_options, drive,
                                      open_command_model, print_json, thresholds_type, usage_error)
from dmlviewer.core.explain import methods as registry

log = logging.getLogger(__name__)

PAIRINGS = ("self", "nearest", "same-class")



def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import int_range, seed_type

    p = sub.add_parser("localize", help="weakly supervised localization accuracy (JSON)",
                       description="Box-from-map localization accuracy (IoU > 0.5) per threshold and method.")
    add_model_options(p)
    p.add_argument("--dataset", required=True, help="dataset folder (with boxes)")
    p.add_argument("--method", action="append", required=True,
                   help=f"overall-map method(s), repeatable or comma-separated: "
                        f"{', '.join(registry.methods('explain'))}, or all")
    p.add_argument("--thresholds", default="0.05:0.8:0.05", type=thresholds_type, metavar="a:b:step",
                   help="thresholds in [0, 1] as a fraction of each map's maximum: a:b:step or a comma list "
                        "(at most 1000; default 0.05:0.8:0.05)")
    p.add_argument("--pairing", default="self", choices=PAIRINGS, help="reference of each image (default: self)")
    p.add_argument("--split", default="test", choices=["train", "test", "all"], help="images to localize (default: test)")
    p.add_argument("--limit", type=int_range(1, 10**9), metavar="N", help="use the first N images only (default: all)")
    p.add_argument("--seed", type=seed_type, default=0, help="seed of the same-class pairing (default: 0)")
    add_source_options(p, GRAD_FEATURES_HELP)
    p.set_defaults(func=run)


def parse_methods(values: list[str]) -> list[str]:
    from dmlviewer.cli import UsageError

    known = registry.methods("explain")
    methods = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name == "all":
                methods.extend(known)
            elif name:
                if name not in known:
                    raise UsageError(f"unknown method {name!r}; choose from {', '.join(known)}, all")
                methods.append(name)
    if not methods:
        raise UsageError("no method given")
    return list(dict.fromkeys(methods))


def _two_branch_methods(model, methods: list[str], given: list[str]) -> list[str]:
    """``methods`` for a two-branch model: those of the registry's ``two_branch`` use (without
    ``grad_transfer``: its bank holds one network's Grad-CAM weights); one named on its own is
    refused, under ``all`` left out."""
    from dmlviewer.cli import UsageError
    from dmlviewer.core.models.two_branch import TwoBranchModel

    kept = registry.methods("two_branch")
    if not isinstance(model, TwoBranchModel) or all(m in kept for m in methods):
        return methods
    named = {name.strip() for value in given for name in value.split(",")}
    for m in methods:
        if m not in kept and m in named:
            raise UsageError(f"--method {m} is not available for a two-branch model (its grad-weight bank "
                             "holds one network's Grad-CAM weights); choose another --method")
    log.info("%s left out: not available for a two-branch model", ", ".join(m for m in methods if m not in kept))
    return [m for m in methods if m in kept]


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.explain import localize

    methods = parse_methods(args.method)
    thresholds = args.thresholds
    from dmlviewer.core.data import open_dataset

    dataset = open_dataset(args.dataset, args.format, args.protocol)
    if dataset.format == "cvusa":
        raise UsageError(f"{args.dataset} is a cross-view (cvusa) dataset: it has no ground-truth boxes, which "
                         "localize scores the maps against (use a dataset with boxes, e.g. CUB or make-demo-data)")
    model, device = open_command_model(args, args.device)
    methods = _two_branch_methods(model, methods, args.method)
    split = None if args.split == "all" else args.split
    if split is not None and len(dataset.indices(split)) == 0:
        raise UsageError(f"the dataset has no {split!r} images")
    try:
        bank = None
        if args.features and "grad_transfer" in methods:
            from dmlviewer.commands.explain import grad_bank_from_features

            bank = grad_bank_from_features(model, args.features, device, save=args.save_grad_weights)
        results = drive(localize(model, dataset, methods, thresholds, args.pairing, split, device,
                                 limit=args.limit, seed=args.seed, grad_bank=bank), "localize")
    except ValueError as exc:
        raise usage_error(exc) from None
    if args.json:
        print_json(results)
    else:
        for r in results:
            curve = " ".join(f"{t:g}:{a:.3f}" for t, a in zip(r["thresholds"], r["accuracy"]))
            sys.stdout.write(f"{r['method']} ({r['pairing']}, {r['num_images']} images): best "
                             f"{r['best_accuracy']:.3f} at {r['best_threshold']:g}  [{curve}]\n")
    return 0
