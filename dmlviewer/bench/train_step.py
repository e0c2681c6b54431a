"""``bench train-step``: our training step against a bare PyTorch step.

Ours: :meth:`Trainer.step` plus :meth:`Trainer.record` (the loop's per-step work: device
transfer, label mapping, forward through the whole objective, backward, optimizer and
scheduler steps, the one synchronization for the loss values, accumulators, the buffered
metrics line every ``log_every`` steps, the progress event). Bare: the same model (a copy),
the same metric loss, Adam, the same batch: ``forward, loss, zero_grad, backward, step``.
``ratio`` = our median step time / the bare one's (target at most 1.05); the two are
interleaved so that load from other processes hits both alike.
Default: resnet18 at 128 px, 8 classes x 4 images; ``--quick``: small_cnn at 64 px.
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dmlviewer.bench.machine import describe


def run(args) -> dict:
    from dmlviewer.core.data import make_demo_data
    from dmlviewer.core.train import TrainConfig, Trainer
    from dmlviewer.core.train.losses import GroupedMetricLoss

    quick = bool(getattr(args, "quick", False))
    device = getattr(args, "device", "cpu") or "cpu"
    backbone, size, repeat = ("small_cnn", 64, 20) if quick else ("resnet18", 128, 15)
    with tempfile.TemporaryDirectory() as tmp:
        root = make_demo_data(Path(tmp) / "data", classes=16, per_class=8, size=size)
        config = TrainConfig(dataset=str(root), out=str(Path(tmp) / "run"), backbone=backbone, image_size=size,
                             dim=128, classes_per_batch=8, images_per_class=4, num_workers=0, device=device,
                             epochs=1, lr=1e-4, weight_decay=0.0, scheduler="constant", amp="off")
        trainer = Trainer(config)
        list(trainer.prepare())
        images, labels, _ = next(iter(trainer.loader))
        dev = trainer.device
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

        model = copy.deepcopy(trainer.model)
        loss_fn = GroupedMetricLoss(config.loss, model.group_slices, trainer.num_classes).to(dev)
        optimizer = torch.optim.Adam(list(model.parameters()) + list(loss_fn.parameters()), lr=config.lr)
        x, y = images.to(dev), trainer.label_map[labels.to(dev)]

        def bare() -> None:
            out = model(x)
            loss = loss_fn(out.embedding_raw, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            sync()

        def ours() -> None:
            trainer.record(trainer.step(images, labels))
            sync()

        times: dict[str, list[float]] = {"ours": [], "bare": []}
        for i in range(repeat + 2):
            for name, fn in (("ours", ours), ("bare", bare)) if i % 2 else (("bare", bare), ("ours", ours)):
                start = time.perf_counter()
                fn()
                if i >= 2:  # the first two rounds warm up
                    times[name].append((time.perf_counter() - start) * 1e3)
    ours_ms, bare_ms = float(np.median(times["ours"])), float(np.median(times["bare"]))
    return {
        "benchmark": "train-step",
        "model": f"{backbone}@{size}", "batch_size": config.batch_size, "loss": config.loss, "device": str(dev),
        "ours_ms": round(ours_ms, 2), "bare_ms": round(bare_ms, 2),
        "ratio": round(ours_ms / bare_ms, 3),
        "ratio_of_minimums": round(min(times["ours"]) / min(times["bare"]), 3),
        "steps": repeat,
        "machine": describe(),
    }
