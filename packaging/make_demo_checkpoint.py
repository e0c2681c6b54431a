"""Regenerate ``resources/demo_checkpoint.pt`` with the project's own trainer.

The demo checkpoint is a small_cnn with a C-grouping head (DeML channel attention, 4 groups, so
the group tabs have something to show; GAP pooling keeps the point-to-point maps sharp: on the
demo's part-correspondence test it beats an A-grouping model trained the same way, 0.53 against
0.27) trained on the default synthetic parts dataset (20 classes x 40 images,
128 px; zero-shot split: the first 10 classes train, the last 10 test). On a 2-core CPU it
takes a few minutes:

    python packaging/make_demo_checkpoint.py [--epochs 40] [--grouping c] [--out resources/demo_checkpoint.pt]

The training settings are the ``demo`` recipe (``dmlviewer train --recipe demo``,
``core/train/recipes.py``).

The script prints the test-split metrics of the untrained and the trained model and stores
the training configuration and final metrics inside the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger("make_demo_checkpoint")


def main(argv: list[str] | None = None) -> int:
    from dmlviewer.core.data import make_demo_data
    from dmlviewer.core.models import build_model, load_checkpoint, save_checkpoint
    from dmlviewer.core.train import apply_recipe, train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "resources" / "demo_checkpoint.pt"))
    parser.add_argument("--epochs", type=int, help="default: the demo recipe's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grouping", choices=["none", "m", "g", "c", "a"], help="default: the demo recipe's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(max(1, torch.get_num_threads()))

    with tempfile.TemporaryDirectory(prefix="dmlviewer-demo-") as tmp:
        data = Path(tmp) / "data"
        make_demo_data(data, classes=20, per_class=40, size=128, seed=0)
        given = dict(dataset=str(data), out=str(Path(tmp) / "run"), device="cpu", seed=args.seed, num_workers=0)
        given.update({k: v for k, v in (("epochs", args.epochs), ("grouping", args.grouping)) if v is not None})
        config = apply_recipe("demo", given)  # the recipe lives in core/train/recipes.py
        untrained = _test_metrics(build_model(config.model_config()), data)
        log.info("untrained: %s", _short(untrained))
        for event in train(config):
            if event.kind == "eval":
                log.info("epoch %s: %s", event.data["epoch"], _short(event.data["metrics"]))
            elif event.kind == "done":
                result = event.data["result"]
        model, info = load_checkpoint(result["checkpoint"])
        # Keep only what the demo needs: no optimizer state, a few MB at most.
        save_checkpoint(args.out, model, epoch=info.get("epoch", 0), metrics=info.get("metrics", {}),
                        extra={"training_config": json.dumps(config.to_dict(), default=str),
                               "dataset": "make_demo_data(classes=20, per_class=40, size=128, seed=0)"})
    log.info("wrote %s (%.1f MB)", args.out, Path(args.out).stat().st_size / 1e6)
    return 0


def _test_metrics(model, data: Path) -> dict:
    """Metrics of ``model`` on the test split (the unseen classes)."""
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.evaluate import compute_metrics, embed_dataset
    from dmlviewer.core.progress import run_to_end

    model.eval()
    test = open_dataset(data).select_split("test")
    result = run_to_end(embed_dataset(model, test, batch_size=64, device="cpu", num_workers=0))
    return compute_metrics(result["embeddings"], test.labels[result["rows"]])


def _short(metrics: dict) -> str:
    keys = ("recall@1", "recall@2", "nmi", "map@r")
    return ", ".join(f"{k} {metrics[k]:.3f}" for k in keys if k in metrics)


if __name__ == "__main__":
    sys.exit(main())
