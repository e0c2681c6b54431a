"""``dmlviewer bench``: benchmarks that measure the project against a baseline in the same run.

Each benchmark is a module ``dmlviewer.bench.<name>`` with ``run(args) -> dict``; this command
prints the dicts as JSON (``--json``) or as short text. ``--all`` runs every benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import json
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
    "index": "index",
    "memory": "memory",
    "startup": "startup",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run benchmarks (ratios against a baseline measured in the same run)")
    p.add_argument("name", nargs="?", choices=sorted(BENCHMARKS), help="benchmark to run")
    p.add_argument("--all", action="store_true", help="run every benchmark")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--quick", action="store_true", help="smaller sizes (for a smoke run)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (where the benchmark uses a model)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
        result = module.run(args)
        result.setdefault("benchmark", name)
        result["wall_s"] = round(time.perf_counter() - start, 2)
        results.append(result)
        if not args.json:
            sys.stdout.write(_summary(result) + "\n")
    if args.json:
        out = results[0] if len(results) == 1 else results
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    return 0


def _summary(result: dict) -> str:
    keys = [k for k in ("ratio", "p50_ms", "p95_ms", "seconds", "events", "app_rss_mb", "listing_rss_mb",
                        "extract_rss_mb", "images_per_s", "splash_s", "window_s", "loaded_s") if k in result]
    parts = ", ".join(f"{k}={result[k]}" for k in keys)
    return f"{result['benchmark']}: {parts} ({result.get('wall_s')} s)"
