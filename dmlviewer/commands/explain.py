"""``dmlviewer explain``: one pair's explanation written to an npz (DESIGN.md, "Explanation npz").

Keys: ``similarity``, ``point_to_point`` (h1 x w1 x h2 x w2, divided by |Eq||Er|), ``bias_query``,
``bias_reference``, ``bias_both`` (Eq. 3 of seed 000; ``bias_query`` = sum_ij Cq_ij . Br / Z, the
term that varies over the query), ``overall_query``, ``overall_reference`` (full-resolution signed
maps of ``--method``), ``grid_query``, ``grid_reference``. Completeness holds in the file:
``point_to_point.sum() + bias_query + bias_reference + bias_both == similarity``.

``--method grad_transfer`` needs ``--features F.h5`` holding ``grad_weights`` (seed 002): the
Grad-CAM weights of the file's labelled images; when the file has none they are computed from the
images it lists and stored in it.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from dmlviewer.commands.common import CHECKPOINT_HELP

log = logging.getLogger(__name__)

#: the overall-map methods (``dmlviewer.core.explain.METHODS``; repeated so that building the
#: parser does not import torch)
METHODS = ("decomposition", "decomposition_bias", "gradcam", "gradcam_nonorm", "rgradcam", "grad_transfer")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="explain one image pair's similarity (npz)",
                       description="Point-to-point activation maps, bias terms and overall maps of one pair.")
    p.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    p.add_argument("--query", required=True, help="query image file")
    p.add_argument("--reference", required=True, help="reference image file")
    p.add_argument("--method", default="decomposition", choices=METHODS, help="overall map method")
    p.add_argument("--out", required=True, help="output .npz")
    p.add_argument("--features", help="feature file with grad_weights (for --method grad_transfer)")
    p.add_argument("--size", type=int, help="network input size (default: the model's image_size)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import load_model

    out = Path(args.out)
    if not out.parent.exists():
        raise UsageError(f"output folder not found: {out.parent}")
    if args.size is not None and args.size < 16:
        raise UsageError(f"--size must be at least 16, got {args.size}")
    if args.method == "grad_transfer" and not args.features:
        raise UsageError("--method grad_transfer needs --features F.h5 (the labelled images' grad weights)")
    from dmlviewer.core.explain import Explanation, explain_pair

    model, device = load_model(args.checkpoint, args.device)
    bank = grad_bank_from_features(model, args.features, device) if args.method == "grad_transfer" else None
    pair = explain_pair(model, Path(args.query), Path(args.reference), device, size=args.size, grad_bank=bank)
    written = Explanation.from_pair(pair, args.method).save(out)
    log.info("similarity %.4f; decomposition %s; wrote %s", pair.similarity, pair.rule_detail, written)
    return 0


def grad_bank_from_features(model, features_path: str, device):
    """The :class:`GradWeightBank` of a feature file, computing and storing ``grad_weights`` first
    when the file has none."""
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.evaluate import read_features
    from dmlviewer.core.explain import GradWeightBank, add_grad_weights, compute_grad_weights, read_grad_weights
    from dmlviewer.core.progress import run_to_end

    weights = read_grad_weights(features_path)
    features = read_features(features_path, include_raw=False, include_groups=False)
    if weights is None:
        root = features.attrs.get("dataset_root")
        if not root:
            raise ValueError(f"{features_path} has no grad_weights and no dataset_root to compute them from")
        dataset = open_dataset(root, features.attrs.get("dataset_format") or None)
        index = {p: i for i, p in enumerate(dataset.paths)}
        missing = [p for p in features.paths if p not in index]
        if missing:
            raise ValueError(f"{features_path}: {len(missing)} stored image(s) are not in {root}, e.g. {missing[0]}")
        rows = dataset.subset([index[p] for p in features.paths])
        log.info("computing grad weights of %d images in %s", len(rows), features_path)
        result = run_to_end(compute_grad_weights(model, rows, device=device))
        weights = result["weights"]
        add_grad_weights(features_path, weights)
    return GradWeightBank(features.embeddings, weights)
