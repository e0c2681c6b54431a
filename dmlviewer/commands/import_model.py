"""``dmlviewer import-model``: a dmlviewer checkpoint from weights files trained elsewhere.

``dmlviewer import-model WEIGHTS [WEIGHTS ...] [--arch NAME] [--head auto|SPEC] [--pooling gap|gmp|gem|token
[--gem-p P]] [--check-against FILE [--force]] --out CHECKPOINT.pt``
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
    from dmlviewer.commands.common import MAX_IMAGE_SIZE, float_range, int_range

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
    p.add_argument("--image-size", type=int_range(32, MAX_IMAGE_SIZE),
                   help="input size the model expects (default: 224, or timm's)")
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
    p.add_argument("--full-mapping", action="store_true", help="list every backbone key's mapping")
    p.add_argument("--out", required=True, help="checkpoint to write (.pt)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import check_output_file
    from dmlviewer.core.models.importer import analyze, describe_reference_check, write_checkpoint
    from dmlviewer.core.progress import run_to_end

    out = Path(args.out)
    for path in args.weights:
        if not Path(path).exists():  # a folder, a FIFO or a device is refused by the reader, saying so
            raise FileNotFoundError(2, "not found", path)
        if out.exists() and out.resolve() == Path(path).resolve():
            raise UsageError(f"--out {out} is one of the WEIGHTS files: choose another name")
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder: give a file name (e.g. {out / 'imported.pt'})")
    check_output_file(str(out), "--out")
    # no progress display: a refusal must be the only line on stderr (it takes seconds at most)
    if args.check_against and not Path(args.check_against).is_file():
        raise FileNotFoundError(2, "not found", args.check_against)
    plan = run_to_end(analyze(args.weights, arch=args.arch, head=args.head, prefix=args.prefix,
                              image_size=args.image_size, mean=args.mean, std=args.std,
                              pooling=args.pooling, gem_p=args.gem_p, force=args.force))
    sys.stdout.write(plan.report(full_mapping=args.full_mapping) + "\n")
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
            sys.stderr.write(f"WARNING: {line}\n")
    return 0
