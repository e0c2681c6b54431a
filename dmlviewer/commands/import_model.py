"""``dmlviewer import-model``: a dmlviewer checkpoint from weights files trained elsewhere.

``dmlviewer import-model WEIGHTS [WEIGHTS ...] [--arch NAME] [--head auto|SPEC] --out CHECKPOINT.pt``
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
                   help="weights file(s): .pth/.pt/.bin (read with torch.load(weights_only=True)) or .safetensors")
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
    p.add_argument("--full-mapping", action="store_true", help="list every backbone key's mapping")
    p.add_argument("--out", required=True, help="checkpoint to write (.pt)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import check_output_file
    from dmlviewer.core.models.importer import analyze, write_checkpoint
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
    plan = run_to_end(analyze(args.weights, arch=args.arch, head=args.head, prefix=args.prefix,
                              image_size=args.image_size, mean=args.mean, std=args.std))
    sys.stdout.write(plan.report(full_mapping=args.full_mapping) + "\n")
    path, diff = write_checkpoint(plan, out)
    sys.stdout.write(f"wrote {path} (folded head vs. source layers: max relative difference {diff:.2g})\n")
    return 0
