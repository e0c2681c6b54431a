"""``dmlviewer retrieve``: the K nearest neighbours of one stored image.

``--region y0,x0,y1,x1 --checkpoint C`` asks for interactive partial retrieval (seed 000
Sec. 5.4): the query is the partial feature of that region (pixels of the original query
image, read from the feature file's ``dataset_root``), computed and ranked by
``dmlviewer.core.explain.region_query``; as in whole-image retrieval, the query image itself
is left out of the results.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _region(text: str) -> tuple[int, int, int, int]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 4 or values[2] <= values[0] or values[3] <= values[1]:
        raise argparse.ArgumentTypeError(f"expected y0,x0,y1,x1 with y1 > y0 and x1 > x0, got {text!r}")
    return values


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("retrieve", help="nearest neighbours of one image in a feature file")
    p.add_argument("--features", required=True, metavar="F.h5")
    p.add_argument("--query", required=True, type=int, metavar="I", help="row index of the query image")
    p.add_argument("-k", type=int, default=10, metavar="K", help="number of neighbours (default 10)")
    p.add_argument("--region", type=_region, metavar="y0,x0,y1,x1",
                   help="retrieve with the feature of this region of the query (needs --checkpoint)")
    p.add_argument("--checkpoint", metavar="C", help="model for --region")
    p.add_argument("--device", default="cpu", help="device for --region: auto | cpu | cuda | cuda:N | mps")
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.evaluate import read_features, retrieve

    if not Path(args.features).is_file():
        raise UsageError(f"feature file not found: {args.features}")
    if args.k < 1:
        raise UsageError(f"-k must be at least 1 (got {args.k})")
    if args.checkpoint and not args.region:
        raise UsageError("--checkpoint is only used with --region")
    features = read_features(args.features, include_raw=False, include_groups=False)  # StoreError: cli
    if not 0 <= args.query < len(features):
        raise UsageError(f"--query {args.query} out of range: {args.features} has {len(features)} images "
                         f"(0..{len(features) - 1})")
    if args.region:
        if not args.checkpoint:
            raise UsageError("--region needs --checkpoint (the model that computes the region's feature)")
        from dmlviewer.commands.common import model_source_exists

        if not model_source_exists(args.checkpoint):
            raise UsageError(f"checkpoint not found: {args.checkpoint}")
        results = _region_results(args, features)
    else:
        results = retrieve(features, args.query, args.k)
    query = {"index": args.query, "path": features.paths[args.query], "label": int(features.labels[args.query])}
    if args.region:
        query["region"] = list(args.region)
    if args.json:
        sys.stdout.write(json.dumps({"query": query, "results": results}) + "\n")
    else:
        name = features.class_name
        sys.stdout.write(f"query {query['index']}: {query['path']} ({name(query['label'])}, label {query['label']})\n")
        for rank, r in enumerate(results, 1):
            sys.stdout.write(f"{rank:3d}. {r['similarity']:.4f}  {r['path']} ({name(r['label'])}, label {r['label']}, "
                             f"index {r['index']})\n")
    return 0


def _region_results(args: argparse.Namespace, features) -> list[dict]:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.data import load_image
    from dmlviewer.core.explain import region_query
    from dmlviewer.core.models import open_model, resolve_device

    root = features.attrs.get("dataset_root") or ""
    image_path = Path(root) / features.paths[args.query]
    try:
        device = resolve_device(args.device)
        image = load_image(image_path)
        model, _ = open_model(args.checkpoint, device)
        return region_query(model, image, args.region, features, k=args.k, device=device, exclude=args.query)
    except ValueError as exc:  # bad device, empty region; bad files are reported by the cli
        raise UsageError(str(exc)) from None
