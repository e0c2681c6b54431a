"""``dmlviewer import-model``: a dmlviewer checkpoint from weights files trained elsewhere.

``dmlviewer import-model WEIGHTS [WEIGHTS ...] [--arch NAME] [--head auto|SPEC] [--pooling gap|gmp|gem|token
[--gem-p P]] [--check-against FILE [--force]] --out CHECKPOINT.pt``
(``--image-size`` takes a side S or HxW)

A two-branch (cross-view) model from two sets of weights files (issue 25):
``--reference-weights FILE [FILE ...]`` imports the reference branch (e.g. the aerial encoder)
beside the query branch of ``WEIGHTS`` (e.g. the street encoder) into one two-branch checkpoint
(:mod:`dmlviewer.core.models.two_branch`); ``--image-size HxW`` and ``--reference-image-size``
give each branch's input shape (``64x256`` and ``128``). The other ``--reference-*`` options
default to the query's (said in the report); both branches must embed into the same number of
dimensions. ``--check-against`` checks the query branch and ``--reference-check-against`` the
reference branch, each against its own file.
(docs/internals.md, "import-model"). Prints what was recognized (architecture, head, mapping,
unmatched keys, notes) and writes the checkpoint; an unrecognized layout or a head that cannot be
represented exits with status 2 and one line (the closest layouts, the unmatched keys), and
nothing is written. Several WEIGHTS files are merged (pytorch-metric-learning's trunk and
embedder files).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import MAX_IMAGE_SIZE, float_range, shape_type

    p = sub.add_parser(
        "import-model", help="write a dmlviewer checkpoint from a state dict trained elsewhere",
        description="Recognize the architecture of a weights file (a state dict or a common wrapper: "
                    "state_dict, model, net, DDP module. prefixes; pytorch-metric-learning's trunk and "
                    "embedder files together), propose its head, and write a dmlviewer checkpoint.")
    p.add_argument("weights", nargs="+", metavar="WEIGHTS",
                   help="weights file(s): .pth/.pt/.bin (read with torch.load(weights_only=True)) or "
                        ".safetensors, or one timm Hugging Face folder (config.json + model.safetensors)")
    p.add_argument("--arch", help="architecture (a built-in backbone or timm:NAME); default: recognized from the keys")
    p.add_argument("--head", default="auto",
                   help="auto (propose from the keys), none (the embedding is the pooled feature), or a comma "
                        "list in forward order of source modules and relu/identity, optionally starting with "
                        "gap, gmp or gem=MODULE|NUMBER; the report prints the proposal in this form")
    p.add_argument("--prefix", help="key prefix of the backbone when the files hold several copies "
                                    "(e.g. teacher.backbone.)")
    p.add_argument("--image-size", type=shape_type(32, MAX_IMAGE_SIZE), metavar="S|HxW",
                   help="input size the model expects: a side, or HxW (e.g. 64x256) for a non-square query branch "
                        "of a two-branch import (default: 224, or timm's)")
    p.add_argument("--mean", type=float_range(-1e3, 1e3), nargs=3, metavar=("R", "G", "B"),
                   help="input normalization mean (default: ImageNet's, or timm's)")
    p.add_argument("--std", type=float_range(0.0, 1e3, low_open=True), nargs=3, metavar=("R", "G", "B"),
                   help="input normalization std (default: ImageNet's, or timm's)")
    p.add_argument("--pooling", choices=("gap", "gmp", "gem", "token"),
                   help="the pooling your model uses (a weights file does not store it; default: the "
                        "architecture's own, stated as an assumption); vision transformers: token (the "
                        "class token) or gap (the mean of the patch tokens)")
    p.add_argument("--gem-p", type=float_range(0.0, 100.0, low_open=True), metavar="P",
                   help="GeM exponent with --pooling gem (default: the file's GeM p, when it holds one)")
    p.add_argument("--check-against", metavar="FILE",
                   help=".npz or .pt holding 'images' (N x 3 x H x W, preprocessed) and 'embeddings' (N x D) "
                        "computed by your model: the written model must reproduce them within 1e-4 (relative)")
    p.add_argument("--force", action="store_true",
                   help="write even when --check-against differs or the head skips a layer of the "
                        "architecture (said loudly)")
    two = p.add_argument_group("two-branch (cross-view) import", "the reference branch (e.g. the aerial "
                               "encoder) beside the query branch of WEIGHTS (e.g. the street encoder); the options "
                               "it does not give are the query's")
    two.add_argument("--reference-weights", nargs="+", metavar="FILE",
                     help="the reference branch's weights file(s): writes one two-branch checkpoint")
    two.add_argument("--reference-arch", help="the reference branch's architecture (default: --arch, else recognized)")
    two.add_argument("--reference-head", help="the reference branch's head, as --head (default: --head)")
    two.add_argument("--reference-prefix", help="the reference branch's key prefix, as --prefix (default: --prefix)")
    two.add_argument("--reference-image-size", type=shape_type(32, MAX_IMAGE_SIZE), metavar="S|HxW",
                     help="the reference branch's input, a side or HxW (default: its architecture's, 224)")
    two.add_argument("--reference-mean", type=float_range(-1e3, 1e3), nargs=3, metavar=("R", "G", "B"),
                     help="the reference branch's normalization mean (default: --mean)")
    two.add_argument("--reference-std", type=float_range(0.0, 1e3, low_open=True), nargs=3, metavar=("R", "G", "B"),
                     help="the reference branch's normalization std (default: --std)")
    two.add_argument("--reference-pooling", choices=("gap", "gmp", "gem", "token"),
                     help="the reference branch's pooling, as --pooling (default: --pooling)")
    two.add_argument("--reference-gem-p", type=float_range(0.0, 100.0, low_open=True), metavar="P",
                     help="the reference branch's GeM exponent (default: --gem-p)")
    two.add_argument("--reference-check-against", metavar="FILE",
                     help="as --check-against, for the reference branch (its own images and embeddings); "
                          "--check-against then checks the query branch")
    p.add_argument("--full-mapping", action="store_true", help="list every backbone key's mapping")
    p.add_argument("--out", required=True, help="checkpoint to write (.pt)")
    p.set_defaults(func=run)


def option_names() -> dict[str, str]:
    """The importer's input fields (``core.models.importing.FIELDS``) as this command's options."""
    from dmlviewer.commands.options import option_names as names
    from dmlviewer.core.models.importing import FIELDS

    return {**names(FIELDS), "weights": "WEIGHTS"}  # here the weights are the positional files


def run(args: argparse.Namespace) -> int:
    """The command; the importer's errors name its inputs by field, worded here as options."""
    from dmlviewer.core.fields import FieldError
    from dmlviewer.core.models import CheckpointError

    try:
        return _run(args)
    except FieldError as exc:
        raise CheckpointError(exc.worded(option_names())) from None


def _run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import check_output_file
    from dmlviewer.core.models.importing import analyze, describe_reference_check, named, write_checkpoint
    from dmlviewer.core.progress import run_to_end

    out = Path(args.out)
    two_branch = args.reference_weights is not None
    if not two_branch:
        for option in REFERENCE_OPTIONS:
            if getattr(args, option.lstrip("-").replace("-", "_")) is not None:
                raise UsageError(f"{option} is only used with --reference-weights (a two-branch import)")
        if args.image_size and args.image_size[0] != args.image_size[1]:
            raise UsageError(f"--image-size {args.image_size[0]}x{args.image_size[1]}: a non-square input is for "
                             "the query branch of a two-branch import (--reference-weights); give one side")
    for path in [*args.weights, *(args.reference_weights or [])]:
        if not Path(path).exists():  # a folder, a FIFO or a device is refused by the reader, saying so
            raise FileNotFoundError(2, "not found", path)
        if out.exists() and out.resolve() == Path(path).resolve():
            raise UsageError(f"--out {out} is one of the WEIGHTS files: choose another name")
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder: give a file name (e.g. {out / 'imported.pt'})")
    check_output_file(str(out), "--out")
    # no progress display: a refusal must be the only line on stderr (it takes seconds at most)
    for check in (args.check_against, args.reference_check_against):
        if check and not Path(check).is_file():
            raise FileNotFoundError(2, "not found", check)
    if two_branch:
        return _run_two_branch(args, out)
    side = max(args.image_size) if args.image_size else None
    plan = run_to_end(analyze(args.weights, arch=args.arch, head=args.head, prefix=args.prefix,
                              image_size=side, mean=args.mean, std=args.std,
                              pooling=args.pooling, gem_p=args.gem_p, force=args.force))
    sys.stdout.write(plan.report(full_mapping=args.full_mapping, names=option_names()) + "\n")
    path, diff = write_checkpoint(plan, out, check_against=args.check_against, force=args.force)
    sys.stdout.write(f"wrote {path}\n")
    sys.stdout.write(f"folding check: the folded head vs. its own source layers differs by {diff:.2g} (relative); "
                     "this checks the folding, not the model against yours\n")
    check = plan.reference_check
    if check is None:
        sys.stdout.write("embeddings NOT compared with your model: give --check-against FILE (images and your "
                         "model's embeddings of them) to compare\n")
    elif check["forced"]:
        line = f"WARNING: {describe_reference_check(check)}; written only because of --force"
        sys.stdout.write(line + "\n")
        sys.stderr.write(line + "\n")
    else:
        sys.stdout.write(describe_reference_check(check) + "\n")
    for line in plan.assumptions:
        if line.startswith("LEFT OUT"):
            sys.stderr.write(f"WARNING: {named(line, option_names())}\n")
    return 0


#: the options of the reference branch, used only with --reference-weights
REFERENCE_OPTIONS = ("--reference-arch", "--reference-head", "--reference-prefix", "--reference-image-size",
                     "--reference-mean", "--reference-std", "--reference-pooling", "--reference-gem-p",
                     "--reference-check-against")


def _run_two_branch(args: argparse.Namespace, out: Path) -> int:
    """Both branches' plans (``analyze_two_branch``: the reference's first, each file set read
    before any report), the report of both, one two-branch checkpoint (issue 25)."""
    from dmlviewer.core.models.importing import (TWO_BRANCH_INHERITED, analyze_two_branch, check_two_branch_plans,
                                                 describe_reference_check, named, two_branch_report,
                                                 write_two_branch_checkpoint)

    query, reference, shapes = analyze_two_branch(
        args.weights, args.reference_weights,
        {key: getattr(args, key) for key in TWO_BRANCH_INHERITED},
        {key: getattr(args, f"reference_{key}") for key in TWO_BRANCH_INHERITED},
        query_shape=args.image_size, reference_shape=args.reference_image_size, force=args.force,
        not_given="no --reference-* option gave them")
    check_two_branch_plans(query, reference)  # before the long report: one line
    sys.stdout.write(two_branch_report(query, reference, shapes, full_mapping=args.full_mapping, names=option_names())
                     + "\n")
    path, diff = write_two_branch_checkpoint(query, reference, out, shapes,
                                             check_against=(args.check_against, args.reference_check_against),
                                             force=args.force)
    sys.stdout.write(f"wrote {path} (two branches)\n")
    sys.stdout.write(f"folding check: each folded head vs. its own source layers differs by at most {diff:.2g} "
                     "(relative); this checks the folding, not the model against yours\n")
    for side, plan, option in (("query", query, "--check-against"),
                               ("reference", reference, "--reference-check-against")):
        check = plan.reference_check
        if check is None:
            sys.stdout.write(f"{side} branch: embeddings NOT compared with your model: give {option} FILE (images "
                             f"and your {side} encoder's embeddings of them) to compare\n")
        elif check["forced"]:
            line = f"WARNING: {side} branch: {describe_reference_check(check)}; written only because of --force"
            sys.stdout.write(line + "\n")
            sys.stderr.write(line + "\n")
        else:
            sys.stdout.write(f"{side} branch: {describe_reference_check(check)}\n")
        for line in plan.assumptions:
            if line.startswith("LEFT OUT"):
                sys.stderr.write(f"WARNING: {side} branch: {named(line, option_names())}\n")
    return 0
