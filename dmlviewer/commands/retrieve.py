"""``dmlviewer retrieve``: the K nearest neighbours of one stored image.

``--region y0,x0,y1,x1 --checkpoint C`` asks for interactive partial retrieval (seed 000
Sec. 5.4): the query is the partial feature of that region (pixels of the original query
image, read from the feature file's ``dataset_root``), computed and ranked by
``dmlviewer.core.explain.region_query``; as in whole-image retrieval, the query image itself
is left out of the results.

The feature file is opened lazily and searched exactly (streamed in chunks: a million rows
need no more memory than one chunk). ``--index`` searches through the approximate faiss index
beside the file instead (``core.evaluate.search``), building it first when it is missing or
stale (progress on stderr).

A feature file of a two-branch model (``evaluate`` on cross-view data, issue 25) records each
row's branch: a street query then lists only the aerial images of its split (an aerial query
only the streets), searched exactly over those rows; ``--region`` takes the region's feature
from the query's own branch (``core.evaluate.retrieval``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dmlviewer.commands.common import usage_error


def _region(text: str) -> tuple[int, int, int, int]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 4 or values[2] <= values[0] or values[3] <= values[1] or min(values) < 0 or (
            max(values) > 1_000_000):
        raise argparse.ArgumentTypeError(f"expected y0,x0,y1,x1 in pixels with y1 > y0 >= 0 and x1 > x0 >= 0, got {text!r}")
    return values


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import add_device, add_model_options, int_range

    p = sub.add_parser("retrieve", help="nearest neighbours of one image in a feature file")
    p.add_argument("--features", required=True, metavar="F.h5", help="HDF5 feature file (from evaluate)")
    p.add_argument("--query", required=True, type=int_range(0, 2**62), metavar="I",
                   help="row index of the query image in the feature file")
    p.add_argument("-k", type=int_range(1, 100_000), default=10, metavar="K", help="number of neighbours")
    p.add_argument("--region", type=_region, metavar="y0,x0,y1,x1",
                   help="retrieve with the feature of this region of the query image (needs --checkpoint): its "
                        "edges in pixels of the original image, counted from the top-left corner, rows first: "
                        "top y0, left x0, bottom y1, right x1 (y1 and x1 excluded). The GUI shows points as "
                        "x, y; this order is rows, columns")
    add_model_options(p, required=False, checkpoint_help="checkpoint (or imagenet:BACKBONE)", what=" (for --region)")
    add_device(p, default="cpu", what=" (for --region)")
    p.add_argument("--index", action="store_true",
                   help="search through the approximate index beside the feature file (faiss, the 'search' "
                        "extra), building it first when it is missing or stale; default: exact search")
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import print_json
    from dmlviewer.core.evaluate import open_features, retrieve
    from dmlviewer.core.evaluate.store import StoreError

    if not Path(args.features).exists():
        raise UsageError(f"feature file not found: {args.features}")
    from dmlviewer.commands.common import command_model_source

    source = command_model_source(args)  # a file that is not there: one line (UsageError)
    if source is not None and not args.region:
        raise UsageError(f"--{'model' if args.model else 'checkpoint'} is only used with --region")
    features = open_features(args.features)  # lazy: embeddings are streamed; StoreError: cli
    if not 0 <= args.query < len(features):
        raise UsageError(f"--query {args.query} out of range: {args.features} has {len(features)} images "
                         f"(0..{len(features) - 1})")
    index = _index(args) if args.index else None
    if args.region:
        if source is None:
            raise UsageError("--region needs --checkpoint or --model (the model that computes the region's feature)")
        results = _region_results(args, source, features, index)
    else:
        try:
            results = retrieve(features, args.query, args.k, index=index)
        except StoreError:
            raise  # a bad file: the cli's one line
        except ValueError as exc:  # a zero query vector
            raise UsageError(f"{args.features}: {exc}") from None
    query = {"index": args.query, "path": features.paths[args.query], "label": int(features.labels[args.query])}
    if args.region:
        query["region"] = list(args.region)
    if args.json:
        print_json({"query": query, "results": results})
    else:
        name = features.class_name
        sys.stdout.write(f"query {query['index']}: {query['path']} ({name(query['label'])}, label {query['label']})\n")
        for rank, r in enumerate(results, 1):
            sys.stdout.write(f"{rank:3d}. {r['similarity']:.4f}  {r['path']} ({name(r['label'])}, label {r['label']}, "
                             f"index {r['index']})\n")
    return 0


def _index(args: argparse.Namespace):
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import drive
    from dmlviewer.core.evaluate.search import faiss_module, prepare_index

    if faiss_module() is None:
        raise UsageError("--index needs faiss: pip install 'dmlviewer[search]'")
    try:
        return drive(prepare_index(args.features), "search index")
    except PermissionError as exc:
        raise usage_error(exc) from None


def _region_results(args: argparse.Namespace, source, features, index=None) -> list[dict]:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.data import load_image
    from dmlviewer.core.data.images import check_inside
    from dmlviewer.core.data.paths import path_problem
    from dmlviewer.core.evaluate.region_retrieval import region_retrieve
    from dmlviewer.core.models import resolve_device

    root = features.attrs.get("dataset_root") or ""
    rel = features.paths[args.query]
    problem = path_problem(rel)
    if problem:  # a feature file from elsewhere: its paths are not trusted (core.data.paths)
        raise UsageError(f"{args.features}: the query's stored path may not be used ({problem})")
    image_path = Path(root) / rel
    try:
        device = resolve_device(args.device)
        check_inside(root, image_path)
        image = load_image(image_path)
        model, _ = source.open(device)
        return region_retrieve(model, image, args.region, features, k=args.k, device=device, index=index,
                               query_row=args.query)
    except ValueError as exc:  # bad device, empty region; bad files are reported by the cli
        raise usage_error(exc) from None
