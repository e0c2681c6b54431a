"""``dmlviewer compare``: model diagnosis (issue 24; DESIGN.md "Contracts added for model
comparison"): two models on the same pairs, or one model against copies of itself whose layers
are re-initialized from the top down (the cascading randomization sanity check).

Models: ``--checkpoint A --checkpoint B`` (each a checkpoint file or ``imagenet:BACKBONE``), or
one of them given as code and weights (``--checkpoint A --model FILE.py:NAME [--model-args
JSON] [--weights FILE]``: the ``--checkpoint`` models come first); ``--randomize`` takes exactly
one model. ``--method`` names the overall map whose agreement is measured: one method when
comparing two models (default ``decomposition``), any of ``decomposition decomposition_bias
gradcam gradcam_nonorm rgradcam occlusion`` (repeatable or a comma list; default all) with
``--randomize``.

``--changes`` (issue 41) prints instead what changed from A to B on the split, the change table
of :mod:`dmlviewer.core.evaluate.changes`: ``split``, ``models`` (``name source recall@1
num_queries features from_file``) and ``changes`` (``num_queries both_right a_only b_only
both_wrong overlap classes broken fixed``; docs/contracts.md). ``--features A.h5 --features
B.h5``: the models' feature files, used instead of extracting; a file of another checkpoint or
without the split's images is refused in one line naming it.

``--json`` prints (see :func:`dmlviewer.core.explain.compare.compare_models` and
:func:`dmlviewer.core.explain.randomization.randomization_check`):

- two models: ``split``, ``models`` (per model ``name source recall@1 map@r num_queries
  localization part_correspondence``, the last only where the dataset has part masks; with
  ``--split both`` the test split's figures and ``by_split``), ``agreement`` (``method`` and
  ``overall_map_spearman peak_distance iou point_to_point_spearman``, each ``mean`` and
  ``per_pair``, in the order of ``pairs``), ``pairs`` ranked by disagreement, largest first
  (``rank query reference query_path reference_path split similarity [A, B]
  nearest_same_class [A, B]`` and the pair's agreement values, ``disagreement = 1 - Spearman``),
  ``retrieval_disagreements`` (queries where exactly one model's nearest neighbour is of the
  query's class), ``num_pairs``;
- ``--randomize``: ``split``, ``models`` (the one model's figures), ``agreement`` (``methods``
  and ``depths``: per randomized depth its ``label``, ``name`` (readable: ``stage 4``), ``modules``, mean ``similarity`` and per
  method ``overall_map_spearman iou peak_distance`` with ``mean`` and ``per_pair``), ``pairs``
  (``query reference query_path reference_path similarity randomized_similarity``),
  ``num_pairs``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from dmlviewer.commands.common import (FORMATS, PROTOCOLS, add_device, add_two_models,
                                      drive, int_range, open_command_model, print_json, seed_type, thresholds_type,
                                      usage_error)

log = logging.getLogger(__name__)

SPLITS = ("train", "test", "both")
DEFAULT_PAIRS = 20
DEFAULT_DEPTHS = 10



def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import MAX_IMAGE_SIZE

    p = sub.add_parser("compare", help="model diagnosis: two models on the same pairs, or a randomization check (JSON)",
                       description="Compare two models on the same pairs (retrieval, localization, part "
                                   "correspondence, agreement of their maps), or check explanation methods "
                                   "against copies of a model whose layers are re-initialized from the top down.")
    add_two_models(p, "give two to compare them (A first), one with --randomize")
    p.add_argument("--randomize", action="store_true",
                   help="compare the model with copies whose layers are re-initialized from the top down "
                        "(cascading randomization check; one model only)")
    p.add_argument("--dataset", required=True, metavar="P", help="dataset folder")
    p.add_argument("--split", default="test", choices=SPLITS, help="images to use (both: train and test)")
    p.add_argument("--pairs", type=int_range(1, 100_000), default=DEFAULT_PAIRS, metavar="N",
                   help="same-class pairs compared")
    p.add_argument("--method", action="append", default=None, metavar="M",
                   help="overall-map method whose agreement is measured (default decomposition); with "
                        "--randomize, repeatable or comma-separated (default: every method of the check)")
    p.add_argument("--max-depths", type=int_range(1, 1000), default=DEFAULT_DEPTHS, metavar="K",
                   help="with --randomize: at most K randomized depths (the head is the first; deeper "
                        "backbones are re-initialized a group of layers at a time)")
    p.add_argument("--thresholds", default="0.05:0.8:0.05", type=thresholds_type, metavar="a:b:step",
                   help="localization thresholds as a fraction of each map's maximum (default 0.05:0.8:0.05)")
    p.add_argument("--limit", type=int_range(1, 10**9), metavar="N",
                   help="localize the first N images with boxes only (default: all)")
    p.add_argument("--size", type=int_range(16, MAX_IMAGE_SIZE), metavar="S",
                   help="network input size in pixels of every model (default: each model's image_size)")
    p.add_argument("--seed", type=seed_type, default=0, help="seed of the pairs and of the re-initialization")
    p.add_argument("--format", choices=FORMATS, help="dataset format (default: detected)")
    p.add_argument("--protocol", default="default", choices=PROTOCOLS, help="split protocol")
    p.add_argument("--changes", action="store_true",
                   help="what changed from model A to B instead: each query's top-1 right or wrong under each, "
                        "neighbour overlap, per-class Recall@1 changes, the broken and fixed queries")
    p.add_argument("--features", action="append", default=None, metavar="F.h5",
                   help="with --changes: a model's feature file (from evaluate --out), one per model in order "
                        "(A's, then B's); it must belong to the model and hold the split, nothing is re-extracted")
    add_device(p)
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    p.set_defaults(func=run)


def _sources(args: argparse.Namespace) -> list[argparse.Namespace]:
    """One namespace per model (``checkpoint`` or ``model`` set), for ``open_command_model``."""
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import CODE_OPTIONS

    models = [argparse.Namespace(checkpoint=c, model=None, model_args=None, weights=None)
              for c in args.checkpoint or []]
    if args.model:
        models.append(argparse.Namespace(checkpoint=None, model=args.model,
                                         **{attr: getattr(args, attr) for _, attr in CODE_OPTIONS}))
    else:
        for option, attr in CODE_OPTIONS:
            if getattr(args, attr, None) is not None:
                raise UsageError(f"{option} is only used with --model")
    wanted = 1 if args.randomize else 2
    if len(models) != wanted:
        if args.randomize:
            raise UsageError(f"--randomize compares one model with randomized copies of itself: give one "
                             f"--checkpoint (or --model), not {len(models)} models")
        raise UsageError(f"give two models to compare (--checkpoint A --checkpoint B, or --checkpoint A "
                         f"--model ...), or one with --randomize; got {len(models)}")
    return models


def _methods(args: argparse.Namespace) -> list[str]:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.explain import methods as registry

    checked = registry.methods("sanity_check")

    names = [n.strip() for v in (args.method or []) for n in v.split(",") if n.strip()]
    if args.randomize:
        if not names or names == ["all"]:
            return list(checked)
        bad = [n for n in names if n not in checked]
        if bad:
            raise UsageError(f"unknown method {bad[0]!r} for --randomize; choose from {', '.join(checked)}, all")
        return list(dict.fromkeys(names))
    names = names or ["decomposition"]
    choices = registry.methods("compare")
    if len(names) != 1 or names[0] not in choices:
        raise UsageError(f"comparing two models measures one method's agreement: --method one of {', '.join(choices)}")
    return names


def _label(source: argparse.Namespace) -> str:
    return source.checkpoint if source.checkpoint else source.model


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import command_model_source
    from dmlviewer.commands.explain import check_two_branch_options
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.explain.compare import compare_models, split_names

    sources = _sources(args)
    if args.changes or args.features:
        _check_changes_options(args)
    methods = _methods(args)
    for source in sources:
        command_model_source(source)  # a missing file named in one line before anything is loaded
    if not Path(args.dataset).exists():
        raise UsageError(f"dataset folder not found: {args.dataset}")
    dataset = open_dataset(args.dataset, args.format, args.protocol)
    for name in split_names(args.split):
        if len(dataset.indices(name)) == 0:
            raise UsageError(f"the dataset has no {name!r} images")
    if args.changes:
        return _changes(args, sources, dataset)
    models, device = [], None
    for source in sources:
        model, device = open_command_model(source, args.device, args.size)
        check_two_branch_options(model, args.size)  # one --size means nothing to a two-branch model
        models.append(model)
    try:
        if args.randomize:
            result = _randomize(args, models[0], dataset, device, methods, _label(sources[0]))
        else:
            names = ("A", "B")
            result = drive(compare_models(models[0], models[1], dataset, args.split, args.pairs, device, methods[0],
                                          thresholds=args.thresholds, localization_limit=args.limit, seed=args.seed,
                                          names=names, num_workers=None), "compare")
            result["models"] = [{"name": e["name"], "source": _label(source),
                                 **{k: v for k, v in e.items() if k != "name"}}
                                for e, source in zip(result["models"], sources)]
    except ValueError as exc:
        raise usage_error(exc) from None
    if args.json:
        print_json(result)
    else:
        _print_text(result, args.randomize)
    return 0


def _check_changes_options(args: argparse.Namespace) -> None:
    from pathlib import Path

    from dmlviewer.cli import UsageError

    if not args.changes:
        raise UsageError("--features is only used with --changes")
    if args.randomize:
        raise UsageError("--changes compares two models; it does not go with --randomize")
    if args.split == "both":
        raise UsageError("--changes compares one split: --split train or --split test")
    files = args.features or []
    if files and len(files) != 2:
        raise UsageError(f"--features: give one feature file per model (A's, then B's), not {len(files)}")
    for path in files:
        if not Path(path).is_file():
            raise UsageError(f"feature file not found: {path}")


def _changes(args: argparse.Namespace, sources: list, dataset) -> int:
    """``--changes``: the change table (``dmlviewer.core.evaluate.changes``) as JSON or text."""
    from dataclasses import replace

    from dmlviewer.commands.common import command_model_source
    from dmlviewer.core.evaluate.changes import compare_models_changes
    from dmlviewer.core.models import resolve_device

    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        raise usage_error(exc) from None
    files = args.features or [None, None]
    models = []
    for name, source, features in zip("AB", sources, files):
        model_source = command_model_source(source)
        if args.size:
            model_source = replace(model_source, options={**model_source.options, "size": int(args.size)})
        model, info = model_source.open(device)
        models.append((name, model.eval(), str(info.get("sha256") or ""), features))
    try:
        changes = drive(compare_models_changes(models, dataset, args.split, device), "changes")
    except ValueError as exc:
        raise usage_error(exc) from None
    from_file = changes.pop("from_file")
    recall = changes.pop("recall@1")
    result = {"split": args.split,
              "models": [{"name": name, "source": _label(source), "recall@1": r,
                          "num_queries": changes["num_queries"], "features": f or None, "from_file": ff}
                         for name, source, r, f, ff in zip("AB", sources, recall, files, from_file)],
              "changes": changes}
    if args.json:
        print_json(result)
    else:
        _print_changes(result)
    return 0


def _print_changes(result: dict) -> None:
    out = sys.stdout
    c = result["changes"]
    for m in result["models"]:
        out.write(f"model {m['name']} ({m['source']}): Recall@1 {_number(m['recall@1'])}\n")
    out.write(f"{c['num_queries']} queries of the {result['split']} split: both right {c['both_right']}, "
              f"A only {c['a_only']}, B only {c['b_only']}, both wrong {c['both_wrong']}\n")
    out.write("neighbour overlap: " + ", ".join(f"top-{k} {_number(v)}" for k, v in c["overlap"].items()) + "\n")
    for title, rows in (("classes that gained most", [x for x in c["classes"] if x["change"] > 0][:5]),
                        ("classes that lost most", [x for x in c["classes"][::-1] if x["change"] < 0][:5])):
        if rows:
            out.write(f"{title}: " + ", ".join(f"{x['name']} {x['change']:+.3f}" for x in rows) + "\n")
    for title, rows in (("broken (right under A, wrong under B)", c["broken"]),
                        ("fixed (wrong under A, right under B)", c["fixed"])):
        out.write(f"{len(rows)} {title}\n")
        for row in rows[:10]:
            ta, tb = row["top1"]
            out.write(f"  {row['path']}: A {ta['path']} ({ta['similarity']:.3f}), B {tb['path']} "
                      f"({tb['similarity']:.3f}), margin {row['margin'][0]:+.3f} -> {row['margin'][1]:+.3f}\n")


def _randomize(args, model, dataset, device, methods, label) -> dict:
    """The ``--randomize`` document (module docstring)."""
    from dmlviewer.core.explain.compare import model_figures, split_names
    from dmlviewer.core.explain.randomization import randomization_check

    parts = split_names(args.split)
    figures = {}
    for part in parts:
        figures[str(part)] = {k: v for k, v in drive(
            model_figures(model, dataset, part, device, args.thresholds, args.limit, args.pairs, args.seed,
                          num_workers=None), f"model ({part})").items() if not k.startswith("_")}
    entry = {"name": "A", "source": label, **(figures["test"] if args.split == "both" else figures[str(parts[0])])}
    if args.split == "both":
        entry["by_split"] = figures
    check = drive(randomization_check(model, dataset, args.pairs, methods, args.split, device, args.max_depths,
                                      seed=args.seed), "randomization check")
    return {"split": args.split, "models": [entry],
            "agreement": {"methods": check["methods"], "depths": check["depths"]},
            "pairs": check["pairs"], "num_pairs": check["num_pairs"]}


def _number(value) -> str:
    return "n/a" if value is None or value != value else f"{value:.3f}"


def _print_text(result: dict, randomize: bool) -> None:
    out = sys.stdout
    for m in result["models"]:
        loc = m.get("localization") or {}
        best = ", ".join(f"{k} {_number(v['best_accuracy'])}" for k, v in loc.items()) or "no boxes"
        out.write(f"model {m['name']} ({m['source']}): Recall@1 {_number(m['recall@1'])}, MAP@R {_number(m['map@r'])}, "
                  f"localization {best}\n")
        if "part_correspondence" in m:
            pc = m["part_correspondence"]
            out.write(f"  part correspondence: partial map {_number(pc['partial_map_accuracy'])}, "
                      f"overall map {_number(pc['overall_map_accuracy'])}\n")
    if randomize:
        agreement = result["agreement"]
        out.write(f"randomization check on {result['num_pairs']} pairs (Spearman of the overall maps with the "
                  f"trained model's):\n")
        out.write("depth  " + "  ".join(f"{m:>18s}" for m in agreement["methods"]) + "  randomized\n")
        for d in agreement["depths"]:
            cells = "  ".join(f"{_number(d['methods'][m]['overall_map_spearman']['mean']):>18s}"
                              for m in agreement["methods"])
            name = d.get("name") or d["label"]
            out.write(f"{d['depth']:5d}  {cells}  {name}" + (f" ({d['label']})" if name != d["label"] else "") + "\n")
        return
    a = result["agreement"]
    out.write(f"agreement of the {a['method']} maps over {result['num_pairs']} pairs: Spearman "
              f"{_number(a['overall_map_spearman']['mean'])}, IoU {_number(a['iou']['mean'])}, peak distance "
              f"{_number(a['peak_distance']['mean'])}, point-to-point Spearman "
              f"{_number(a['point_to_point_spearman']['mean'])}\n")
    for row in result["pairs"][:10]:
        out.write(f"  #{row['rank']}: {row['query_path']} / {row['reference_path']}: similarity "
                  f"{_number(row['similarity'][0])} / {_number(row['similarity'][1])}, Spearman "
                  f"{_number(row['overall_map_spearman'])}\n")
    if result["retrieval_disagreements"]:
        out.write(f"{len(result['retrieval_disagreements'])} queries where one model's nearest neighbour is of "
                  "the right class and the other's is not\n")
