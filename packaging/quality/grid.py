"""Run the training-quality grid: for each data set, the plain pytorch-metric-learning loop
(``plain_pml.py``) and dmlviewer's trainer with its defaults and each recipe, with a few seeds
at the same budget (network, epochs, batch, image size). One JSON line per run is appended to
``OUT/results.jsonl`` (runs already there are skipped, so an interrupted grid continues);
``--table`` prints the Markdown table of the README from that file.

    python packaging/quality/grid.py OUT [--sets demo,photos,digits] [--arms plain,default,...]
        [--seeds 0,1] [--backbone small_cnn|efficientnet_lite0] [--epochs 12] [--table]

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
        result = None
        for event in train(config):
            if event.kind == "done":
                result = event.data["result"]
        seconds = time.perf_counter() - start
    return {"test": result["metrics"], "last": result["last_metrics"], "epoch0": result["epoch0_metrics"] or None,
            "selected_epoch": result.get("selected_epoch"), "train_s": round(seconds, 1),
            "config": config.to_dict()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--sets", default="demo,photos,digits")
    p.add_argument("--arms", default="plain,default")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--backbone", default="small_cnn")
    p.add_argument("--epochs", type=int)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--tag", default="", help="name suffix of the arm in results.jsonl")
    p.add_argument("--table", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    results = out / "results.jsonl"
    if args.table:
        print(table(results))
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
                if arm == "plain":
                    record = run_plain(paths[name], args.backbone, seed, budget)
                else:
                    recipe = arm.split(":", 1)[1] if arm.startswith("recipe:") else None
                    record = run_dmlviewer(paths[name], args.backbone, seed, budget, recipe, overrides)
                record.update({"set": name, "arm": label, "backbone": args.backbone, "seed": seed,
                               "budget": budget, "overrides": overrides})
                with open(results, "a") as fh:
                    fh.write(json.dumps(record) + "\n")
                t = record["test"]
                print(f"{name} {label} {args.backbone} seed {seed}: R@1 {t['recall@1']:.4f} "
                      f"MAP@R {t['map@r']:.4f} ({record['train_s']} s)", flush=True)
    return 0


def table(results: Path) -> str:
    """Markdown: one row per (set, backbone, arm), Recall@1 and MAP@R per seed."""
    rows: dict[tuple, list[dict]] = {}
    for line in results.read_text().splitlines():
        r = json.loads(line)
        rows.setdefault((r["set"], r["backbone"], r["arm"]), []).append(r)
    lines = ["| set | network | arm | Recall@1 (seeds) | MAP@R (seeds) | epoch 0 R@1 -> selected (epoch) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for (name, backbone, arm), runs in rows.items():
        runs.sort(key=lambda r: r["seed"])
        r1 = " / ".join(f"{r['test']['recall@1']:.3f}" for r in runs)
        mapr = " / ".join(f"{r['test']['map@r']:.3f}" for r in runs)
        e0 = " / ".join(
            f"{r['epoch0']['recall@1']:.3f} -> {r['test']['recall@1']:.3f} ({r.get('selected_epoch', '-')})"
            for r in runs if r.get("epoch0")) or "-"
        lines.append(f"| {name} | {backbone} | {arm} | {r1} | {mapr} | {e0} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
