"""The reference every dmlviewer default is measured against: a plain training loop written
directly on pytorch-metric-learning, as a competent researcher would write it in fifty lines.

MPerClassSampler (``images_per_class`` per class), MultiSimilarityLoss with its default
hyper-parameters, Adam at 1e-3 on every parameter, no scheduler, no miner, no weight decay,
no validation; the model after the last epoch is evaluated on the unseen test classes. The
network, images, augmentation, batch, epochs and metrics are dmlviewer's (``build_model``,
``ImageFolderDataset``, ``compute_metrics``), so that only the training recipe differs.

    python packaging/quality/plain_pml.py --dataset D --backbone small_cnn --epochs 12 \
        --image-size 64 --batch 32 --images-per-class 4 --seed 0 [--pretrained imagenet] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch


def test_metrics(model, test_set) -> dict:
    from dmlviewer.core.evaluate import compute_metrics, embed_dataset
    from dmlviewer.core.progress import run_to_end

    result = run_to_end(embed_dataset(model, test_set, batch_size=128, device="cpu", num_workers=0))
    return compute_metrics(result["embeddings"], test_set.labels[result["rows"]])


def run(dataset: str, backbone: str = "small_cnn", pretrained: str = "none", dim: int = 128,
        epochs: int = 12, image_size: int = 64, batch: int = 32, images_per_class: int = 4,
        seed: int = 0) -> dict:
    """Train with the plain loop; ``{"metrics": test metrics after the last epoch, "untrained":
    test metrics before training (pretrained backbones), "train_s"}``."""
    from pytorch_metric_learning import losses, samplers

    from dmlviewer.core.data import ImageFolderDataset, open_dataset
    from dmlviewer.core.models import build_model, default_config

    torch.manual_seed(seed)
    np.random.seed(seed)
    data = open_dataset(dataset)
    train_set, test_set = data.select_split("train"), data.select_split("test")
    model = build_model(default_config(backbone=backbone, dim=dim, image_size=image_size,
                                       pretrained=None if pretrained == "none" else pretrained))
    untrained = test_metrics(model, test_set) if pretrained != "none" else None

    # the plain loop: sampler, loss, optimizer
    labels = train_set.labels
    classes = len(np.unique(labels))
    if classes * images_per_class < batch:  # few classes: all of them in each batch, the batch size kept
        images_per_class = batch // classes
        batch = images_per_class * classes
    sampler = samplers.MPerClassSampler(labels, m=images_per_class, batch_size=batch,
                                        length_before_new_iter=len(labels))
    loader = torch.utils.data.DataLoader(ImageFolderDataset(train_set, model.preprocess, train=True),
                                         batch_size=batch, sampler=sampler, num_workers=0, drop_last=True)
    loss_fn = losses.MultiSimilarityLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        for images, y, _ in loader:
            loss = loss_fn(model(images).embedding_raw, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    seconds = time.perf_counter() - start
    return {"metrics": test_metrics(model.eval(), test_set), "untrained": untrained, "train_s": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--backbone", default="small_cnn")
    p.add_argument("--pretrained", default="none")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--images-per-class", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    result = run(args.dataset, args.backbone, args.pretrained, args.dim, args.epochs, args.image_size,
                 args.batch, args.images_per_class, args.seed)
    metrics = result["metrics"]
    if args.json:
        print(json.dumps({**result, "config": vars(args)}))
    else:
        print(f"recall@1 {metrics['recall@1']:.4f} map@r {metrics['map@r']:.4f} ({result['train_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
