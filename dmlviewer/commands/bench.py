"""``dmlviewer bench``: benchmarks that measure the project against a baseline in the same run.

Each benchmark is a module ``dmlviewer.bench.<name>`` with ``run(args) -> dict``; this command
prints the dicts as JSON (``--json``) or as short text. ``--all`` runs every benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time

log = logging.getLogger(__name__)

#: benchmark name -> module under dmlviewer.bench
BENCHMARKS = {
    "hover": "hover",
    "explain": "explain",
    "extract": "extract",
    "metrics": "metrics",
    "train-step": "train_step",
    "train-gui": "train_gui",
    "index": "index",
    "memory": "memory",
    "faithfulness": "faithfulness",
    "search": "search",
    "startup": "startup",
    "changes": "changes",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import add_decode, add_device, int_range

    p = sub.add_parser("bench", help="run benchmarks (ratios against a baseline measured in the same run)")
    p.add_argument("name", nargs="?", choices=sorted(BENCHMARKS), help="benchmark to run")
    p.add_argument("--all", action="store_true", help="run every benchmark")
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    p.add_argument("--quick", action="store_true",
                   help="smaller sizes for a smoke run (search and the large app: 100,000 rows; index: "
                        "200,000; metrics: 5,000; extraction: 6,000; changes: 20,000)")
    p.add_argument("--size", type=int, default=None, metavar="N",
                   help="number of items for bench metrics (default 120,053; the baseline runs up to 60,000)")
    p.add_argument("--backbone", default=None, metavar="NAME",
                   help="bench extract: the model's backbone (default resnet18; --quick: small_cnn)")
    p.add_argument("--batch-size", type=int_range(1, 4096), default=None, metavar="N",
                   help="bench extract: images per batch (default 64; --quick: 50)")
    add_device(p, default="cpu", what=" (benchmarks that use a model or compute metrics)")
    add_decode(p, what="bench extract: ", both=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.bench import BenchError
    from dmlviewer.cli import UsageError

    if args.all:
        names = list(BENCHMARKS)
    elif args.name:
        names = [args.name]
    else:
        raise UsageError("name a benchmark or pass --all")
    results = []
    for name in names:
        module = importlib.import_module(f"dmlviewer.bench.{BENCHMARKS[name]}")
        log.info("running bench %s", name)
        start = time.perf_counter()
        try:
            result = module.run(args)
        except BenchError as exc:
            sys.stderr.write(f"dmlviewer bench: error: {name}: {exc}\n")
            return 1
        result.setdefault("benchmark", name)
        result["wall_s"] = round(time.perf_counter() - start, 2)
        results.append(result)
        if not args.json:
            sys.stdout.write(_summary(result) + "\n")
    if args.json:
        from dmlviewer.commands.common import print_json

        print_json(results[0] if len(results) == 1 else results)
    return 0


def _summary(result: dict) -> str:
    keys = [k for k in ("ratio", "largest_ratio", "largest_p95_ms", "whole_run_s", "scaling", "p50_ms", "p95_ms",
                        "two_models_p50_ms", "two_models_p95_ms", "second_model_p50", "second_model_p95",
                        "opengl_p50_ratio", "opengl_p95_ratio", "opengl_two_models_p95_ratio", "opengl_viewport",
                        "vit_s16_256_p95_ms", "dinov2_reg4_518_p95_ms", "busy_p95_ms", "busy_two_models_p95_ms",
                        "busy_second_model_p95", "gc_full_ms", "gc_after_freeze_ms",
                        "seconds", "events", "app_rss_mb", "listing_rss_mb", "extract_rss_mb", "images_per_s", "query_ms", "recall@10", "floor_ratio",
                        "million_seconds", "browser_filter_worst_ms", "large_rss_mb", "splash_s", "window_s",
                        "loaded_s") if k in result]
    parts = ", ".join(f"{k}={result[k]}" for k in keys)
    return f"{result['benchmark']}: {parts} ({result.get('wall_s')} s)"
