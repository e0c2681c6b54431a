"""Run the training-quality grid: for each data set, the plain pytorch-metric-learning loop
(``plain_pml.py``) and dmlviewer's trainer with its defaults and each recipe, with a few seeds
at the same budget (network, epochs, batch, image size). One JSON line per run is appended to
``OUT/results.jsonl`` (runs already there are skipped, so an interrupted grid continues), with
every evaluation of a dmlviewer run (``history``: test and validation metrics), so that
selection rules can be compared afterwards; ``--table`` prints the Markdown table of the
README from that file (seeds shown, and mean ± sd over every seed run), ``--history`` the
epoch-by-epoch table of the pretrained runs.

    python packaging/quality/grid.py OUT [--sets demo,photos,digits] [--arms plain,default,...]
        [--seeds 0,1] [--backbone small_cnn|efficientnet_lite0] [--epochs 12] [--results results.jsonl]
        [--table | --history]

Arms: ``plain`` (the plain loop), ``default`` (dmlviewer's defaults: no option given), and
``recipe:NAME`` for each named recipe. ``--set key=value`` adds a TrainConfig override to every
dmlviewer arm (for exploring). The budget per set is in ``BUDGET``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: per backbone: image size, epochs, embedding size, batch (classes x images)
BUDGET = {
    "small_cnn": dict(image_size=64, epochs=12, dim=128, classes_per_batch=8, images_per_class=4),
    "efficientnet_lite0": dict(image_size=64, epochs=4, dim=128, classes_per_batch=8, images_per_class=4),
}


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def run_plain(dataset: Path, backbone: str, seed: int, budget: dict) -> dict:
    import plain_pml

    pretrained = "imagenet" if backbone != "small_cnn" else "none"
    out = plain_pml.run(str(dataset), backbone, pretrained, budget["dim"], budget["epochs"], budget["image_size"],
                        budget["classes_per_batch"] * budget["images_per_class"], budget["images_per_class"], seed)
    return {"test": out["metrics"], "epoch0": out["untrained"], "train_s": out["train_s"]}


def run_dmlviewer(dataset: Path, backbone: str, seed: int, budget: dict, recipe: str | None,
                  overrides: dict) -> dict:
    from dmlviewer.core.train import train
    from dmlviewer.core.train.recipes import apply_recipe

    with tempfile.TemporaryDirectory(prefix="dmlviewer-grid-") as tmp:
        base = dict(dataset=str(dataset), out=str(Path(tmp) / "run"), device="cpu", num_workers=0, seed=seed,
                    backbone=backbone, pretrained="imagenet" if backbone != "small_cnn" else "none", **budget)
        config = apply_recipe(recipe, base)
        for key, value in overrides.items():
            setattr(config, key, value)
        start = time.perf_counter()
        result, history = None, []
        for event in train(config):
            if event.kind == "eval":  # every evaluation, so that selection rules can be compared afterwards
                history.append({"epoch": event.data["epoch"], "test": _short(event.data["metrics"]),
                                "val": _short(event.data["val"]) or None})
            elif event.kind == "done":
                result = event.data["result"]
        seconds = time.perf_counter() - start
    return {"test": result["metrics"], "last": result["last_metrics"], "epoch0": result["epoch0_metrics"] or None,
            "selected_epoch": result.get("selected_epoch"), "selected_on": result.get("selected_on"),
            "history": history, "train_s": round(seconds, 1), "config": config.to_dict()}


def _short(metrics: dict) -> dict:
    return {k: metrics[k] for k in ("recall@1", "map@r") if k in metrics}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--sets", default="demo,photos,digits")
    p.add_argument("--arms", default="plain,default", help="with --table: the rows shown, or all")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--backbone", default="small_cnn")
    p.add_argument("--epochs", type=int)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--tag", default="", help="name suffix of the arm in results.jsonl")
    p.add_argument("--results", default="results.jsonl", help="file name of the results in OUT")
    p.add_argument("--table", action="store_true")
    p.add_argument("--history", action="store_true", help="print every evaluation of the --backbone runs")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    results = out / args.results
    arms = args.arms.split(",") if args.arms != "all" else None
    if args.table:  # the seeds given (or all) and the arms given (or all)
        print(table(results, [int(x) for x in args.seeds.split(",")], arms))
        return 0
    if args.history:
        print(history_table(results, arms, args.backbone))
        return 0
    import sets as set_builder

    paths = set_builder.make_all(out / "sets")
    budget = dict(BUDGET[args.backbone])
    if args.epochs:
        budget["epochs"] = args.epochs
    overrides = dict(kv.split("=", 1) for kv in args.set)
    overrides = {k: _value(v) for k, v in overrides.items()}
    claims = out / "claims.txt"  # runs started by any grid process (several may run side by side)

    def taken(key: tuple) -> bool:
        done = set()
        if results.exists():
            for line in results.read_text().splitlines():
                r = json.loads(line)
                done.add((r["set"], r["arm"], r["backbone"], r["seed"]))
        started = set(claims.read_text().splitlines()) if claims.exists() else set()
        return key in done or json.dumps(key) in started

    for seed in (int(s) for s in args.seeds.split(",")):  # every set and arm with the first seed first
        for name in args.sets.split(","):
            for arm in args.arms.split(","):
                label = arm + (f"+{args.tag}" if args.tag else "")
                key = (name, label, args.backbone, seed)
                if taken(key):
                    continue
                with open(claims, "a") as fh:
                    fh.write(json.dumps(key) + "\n")
                dataset = paths.get(name, out / "sets" / name)  # or a folder dataset placed there by hand
                if arm == "plain":
                    record = run_plain(dataset, args.backbone, seed, budget)
                else:
                    recipe = arm.split(":", 1)[1] if arm.startswith("recipe:") else None
                    record = run_dmlviewer(dataset, args.backbone, seed, budget, recipe, overrides)
                record.update({"set": name, "arm": label, "backbone": args.backbone, "seed": seed,
                               "budget": budget, "overrides": overrides})
                with open(results, "a") as fh:
                    fh.write(json.dumps(record) + "\n")
                t = record["test"]
                print(f"{name} {label} {args.backbone} seed {seed}: R@1 {t['recall@1']:.4f} "
                      f"MAP@R {t['map@r']:.4f} ({record['train_s']} s)", flush=True)
    return 0


def table(results: Path, seeds: list[int] | None = None, arms: list[str] | None = None) -> str:
    """Markdown: one row per (set, backbone, arm) in ``arms`` (all when None), Recall@1 and MAP@R
    for each of ``seeds`` (all when None), their mean and standard deviation over every seed
    run, and epoch 0 against the selected model for the shown seeds."""
    import statistics

    rows: dict[tuple, dict[int, dict]] = {}
    for line in results.read_text().splitlines():
        r = json.loads(line)
        if arms is None or r["arm"] in arms:
            rows.setdefault((r["set"], r["backbone"], r["arm"]), {}).setdefault(r["seed"], r)  # first run per seed

    def spread(values: list[float]) -> str:
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.mean(values):.3f} ± {sd:.3f} ({len(values)})"

    lines = ["| set | network | arm | Recall@1 (seeds) | MAP@R (seeds) | Recall@1 mean ± sd (runs) | "
             "MAP@R mean ± sd (runs) | epoch 0 R@1 -> selected (epoch) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    order = {a: i for i, a in enumerate(arms or [])}
    for (name, backbone, arm), by_seed in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                               order.get(kv[0][2], 0), kv[0][2])):
        every = [by_seed[s] for s in sorted(by_seed)]
        shown = [by_seed.get(s) for s in seeds] if seeds is not None else every

        def cell(key: str) -> str:
            return " / ".join("-" if r is None else f"{r['test'][key]:.3f}" for r in shown)

        e0 = " / ".join(
            f"{r['epoch0']['recall@1']:.3f} -> {r['test']['recall@1']:.3f} ({r.get('selected_epoch', '-')})"
            for r in shown if r is not None and r.get("epoch0") and backbone != "small_cnn") or "-"
        means = " | ".join(spread([r["test"][key] for r in every]) for key in ("recall@1", "map@r"))
        lines.append(f"| {name} | {backbone} | {arm} | {cell('recall@1')} | {cell('map@r')} | {means} | {e0} |")
    return "\n".join(lines)


def history_table(results: Path, arms: list[str] | None = None, backbone: str = "efficientnet_lite0") -> str:
    """Markdown: for each run of ``backbone`` with a recorded history (arm in ``arms``, or all),
    test Recall@1 / MAP@R after each evaluation (validation MAP@R in brackets) and the model
    the run selected."""
    lines, width = [], 0
    for line in results.read_text().splitlines():
        r = json.loads(line)
        if r["backbone"] != backbone or not r.get("history") or (arms is not None and r["arm"] not in arms):
            continue
        cells = []
        for h in r["history"]:
            cell = f"{h['test']['recall@1']:.3f} / {h['test']['map@r']:.3f}"
            cells.append(cell + (f" ({h['val']['map@r']:.3f})" if h.get("val") else ""))
        width = max(width, len(cells))
        t = r["test"]
        chosen = f"epoch {r['selected_epoch']}: **{t['recall@1']:.3f} / {t['map@r']:.3f}**"
        lines.append((r["set"], r["arm"], r["seed"], cells, chosen))
    head = ["| set | arm | seed | " + " | ".join(f"epoch {i}" for i in range(width)) + " | selected |",
            "| --- | --- | --- | " + " | ".join("---" for _ in range(width)) + " | --- |"]
    body = [f"| {name} | {arm} | {seed} | " + " | ".join(cells + ["-"] * (width - len(cells))) + f" | {chosen} |"
            for name, arm, seed, cells, chosen in sorted(lines, key=lambda x: (x[0], x[1], x[2]))]
    return "\n".join(head + body)


if __name__ == "__main__":
    sys.exit(main())
