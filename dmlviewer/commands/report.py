"""``dmlviewer report``: one self-contained HTML file on why a model retrieves wrong images
(issue 33; DESIGN.md "Contracts added for reports, figures and the session").

``--checkpoint C [--checkpoint B | --model ...] --dataset P [--split test] [--failures N |
--pairs FILE] --out report.html [--figures DIR] [--features F.h5]``: the header (models,
dataset, date, metrics as ``evaluate`` computes them), the failure gallery (the N most
confident wrong top-1 queries of the split, each explained, see
:mod:`dmlviewer.core.report.report`) and, with two models, the diagnosis, the most disagreeing
pairs and the sanity-check curves, and what changed from A to B (``--changes N``: the change
table, the classes that gained and lost most, the N broken and N fixed queries most changed). Images are embedded; the file needs no script and fetches
nothing. ``--features``: the first model's feature file, used when it matches (written, as
``evaluate`` writes it, when it does not exist). Progress on stderr; the path of the report on
stdout. Bad input: one line, exit 2; nothing half-written (temporary file, renamed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dmlviewer.commands.common import (FORMATS, PROTOCOLS, add_device, add_two_models,
                                      int_range)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.evaluate import _ks

    p = sub.add_parser("report", help="write an HTML report: the retrieval failures of a split explained",
                       description="Write one self-contained HTML file (images embedded, no script, nothing "
                                   "fetched): the metrics and the test queries whose nearest neighbour is of "
                                   "another class, each explained; with two models also their diagnosis.")
    add_two_models(p, "give two for a report on two models (A first)")
    p.add_argument("--dataset", required=True, metavar="P", help="dataset folder")
    p.add_argument("--split", default="test", choices=["train", "test", "all"], help="images to report on")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--failures", type=int_range(0, 10_000), default=None, metavar="N",
                       help="failures shown per model, the most confident first (default 20)")
    group.add_argument("--pairs", metavar="FILE",
                       help="explain these pairs instead: one a line, query and reference paths relative to "
                            "the dataset root, separated by a comma, a tab or spaces")
    p.add_argument("--changes", type=int_range(0, 10_000), default=None, metavar="N",
                   help="with two models: broken and fixed queries shown in the 'What changed' section, "
                        "each (default 5)")
    p.add_argument("--out", required=True, metavar="report.html", help="the HTML file to write (replaced atomically)")
    p.add_argument("--figures", metavar="DIR", help="also write every figure as SVG into this folder")
    p.add_argument("--features", metavar="F.h5",
                   help="feature file of the first model: used when it matches the model and holds the split, "
                        "written (as evaluate writes it) when it does not exist")
    p.add_argument("--format", choices=FORMATS, help="dataset format (default: detected)")
    p.add_argument("--protocol", default="default", choices=PROTOCOLS, help="split protocol")
    p.add_argument("--batch-size", type=int_range(1, 65_536), default=64, metavar="B", help="images per batch")
    p.add_argument("--ks", type=_ks, default=[1, 2, 4, 8], metavar="K,K,...", help="Recall@K values")
    add_device(p, default="cpu")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import check_output_file, command_model_source, drive
    from dmlviewer.commands.compare import _label, _sources
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.models import resolve_device
    from dmlviewer.core.report import ReportModel, build_report, read_pairs
    from dmlviewer.core.report.report import DEFAULT_CHANGES, DEFAULT_FAILURES

    args.randomize = False
    given = len(args.checkpoint or []) + bool(args.model)
    if given not in (1, 2):
        raise UsageError(f"give one model (--checkpoint C or --model ...) or two (--checkpoint A --checkpoint B, "
                         f"or --checkpoint A --model ...); got {given}")
    sources = _sources(args) if given == 2 else [
        argparse.Namespace(checkpoint=(args.checkpoint or [None])[0], model=args.model,
                           model_args=args.model_args, weights=args.weights,
                           **{k: getattr(args, k, None) for k in ("reference_weights", "input_shapes",
                                                                  "feature_layer", "model_output")})]
    model_sources = [command_model_source(s) for s in sources]  # a missing file: one line
    if not Path(args.dataset).exists():
        raise UsageError(f"dataset folder not found: {args.dataset}")
    out = check_output_file(args.out, "report")
    if args.figures and Path(args.figures).exists() and not Path(args.figures).is_dir():
        raise UsageError(f"--figures: not a folder: {args.figures}")
    if args.features:
        check_output_file(args.features, "feature file")
    dataset = open_dataset(args.dataset, args.format, args.protocol)
    if len(dataset.indices(args.split)) < 2:
        raise UsageError(f"the dataset has fewer than two {args.split!r} images")
    from dmlviewer.core.files import RefusedFile

    pairs = None
    if args.pairs:
        try:
            pairs = read_pairs(args.pairs, dataset)
        except (RefusedFile, ValueError) as exc:  # a missing or refused file, or a bad line: one line
            raise UsageError(f"--pairs: {exc}") from None
    if args.changes is not None and given != 2:
        raise UsageError("--changes shows what changed between two models: give two (--checkpoint A --checkpoint B)")
    failures = DEFAULT_FAILURES if args.failures is None else args.failures
    if pairs is None and failures == 0:
        raise UsageError("--failures 0 shows nothing: give at least 1")
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    models = []
    for k, (namespace, source) in enumerate(zip(sources, model_sources)):
        model, info = source.open(device)
        models.append(ReportModel("AB"[k] if given == 2 else "A", _label(namespace), model.eval(),
                                  str(info.get("sha256") or ""), args.features if k == 0 else None))
    try:
        result = drive(build_report(models, dataset, out, args.split, failures, pairs, args.figures, device,
                                    args.batch_size, None, args.ks, dataset_label=args.dataset,
                                    changes=DEFAULT_CHANGES if args.changes is None else args.changes), "report")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for name, m in result["models"].items():
        sys.stderr.write(f"model {name}: Recall@1 {m['metrics']['recall@1']:.4f}, {m['num_failures']} wrong top-1 "
                         f"queries, {m['failures']} shown\n")
    if args.figures:
        sys.stderr.write(f"{len(result['figures'])} figures written to {args.figures}\n")
    sys.stdout.write(f"report written to {out}\n")
    return 0
