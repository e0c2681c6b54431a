"""Training a two-branch (cross-view) model as the cross-view papers do (issue 25).

Data: a ``cvusa`` dataset (:mod:`dmlviewer.core.data.cross_view`), one match per query. A batch
is ``batch_pairs`` training pairs; the street panorama goes through the query branch at its
input shape, the aerial image through the reference branch, **randomly rotated** about its
centre (uniform angle) so that the aerial branch becomes near rotation invariant (seed 000
Sec. 5.3 trains so).

Loss: the weighted soft-margin triplet loss of Hu et al. 2018 (CVM-Net, Eq. 9),
``log(1 + exp(alpha (d_pos - d_neg)))`` with ``alpha = 10`` and ``d`` the squared Euclidean
distance of the L2-normalized embeddings, over every in-batch negative in both directions
(street to aerial and aerial to street; CVM-Net's exhaustive mini-batch).

Default model: ``small_cnn`` per branch, global max pooling, D = 64 (on the synthetic set GMP's
peaky maps gave far better orientation estimates than GAP's, at a somewhat lower Recall@1;
README "Cross-view").

Metrics (:func:`cross_view_recall`): Recall@1, @5 and @1 % of street-to-aerial retrieval on the
test pairs, each query against every test aerial image (CVUSA's protocol); ``num_queries``.
The run folder gets ``checkpoint.pt`` (two-branch format, with the metrics) and
``metrics.jsonl`` (one line per epoch, epoch 0 before training).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import cv2
import numpy as np
import torch

log = logging.getLogger(__name__)

ALPHA = 10.0


@dataclass
class CrossViewConfig:
    """Options of :func:`train_cross_view` (``query_shape``: the panorama input; ``reference_size``:
    the square aerial input)."""

    dataset: str
    out: str
    backbone: str = "small_cnn"
    pretrained: str | None = None
    pooling: str = "gmp"  # peaky maps: on the synthetic set, orientation from GAP models was at chance
    dim: int = 64
    epochs: int = 20
    batch_pairs: int = 16
    lr: float = 1e-3
    alpha: float = ALPHA
    rotate: bool = True
    query_shape: tuple[int, int] = (64, 256)
    reference_size: int = 128
    seed: int = 0
    device: str = "cpu"
    extra_model: dict = field(default_factory=dict)


def soft_margin_triplet_loss(query: torch.Tensor, reference: torch.Tensor, alpha: float = ALPHA) -> torch.Tensor:
    """CVM-Net's weighted soft-margin triplet loss (Hu et al. 2018, Eq. 9) over all in-batch
    negatives, both directions: ``query[i]`` and ``reference[i]`` (L2-normalized, B x D) match."""
    distance = 2.0 - 2.0 * query @ reference.T  # squared Euclidean distance of unit vectors
    positive = distance.diagonal()
    off = ~torch.eye(len(query), dtype=torch.bool, device=query.device)
    to_reference = torch.nn.functional.softplus(alpha * (positive[:, None] - distance))[off]
    to_query = torch.nn.functional.softplus(alpha * (positive[None, :] - distance))[off]
    return (to_reference.mean() + to_query.mean()) / 2


def cross_view_recall(query: np.ndarray, reference: np.ndarray) -> dict:
    """Recall@1, @5 and @1 % of retrieving ``reference[i]`` for ``query[i]`` among all rows of
    ``reference`` (cosine similarity; ties count against the query). @1 % is the top
    ``ceil(N / 100)``: with fewer than 101 references it equals Recall@1."""
    query, reference = np.asarray(query, np.float64), np.asarray(reference, np.float64)
    similarity = query @ reference.T
    true = similarity.diagonal()
    rank = (similarity >= true[:, None]).sum(1) - 1  # 0: the match is first
    n = len(reference)
    top_percent = max(1, int(math.ceil(0.01 * n)))
    return {"recall@1": float((rank < 1).mean()), "recall@5": float((rank < 5).mean()),
            "recall@1%": float((rank < top_percent).mean()), "num_queries": int(len(query))}


def rotate_about_centre(image: np.ndarray, degrees: float) -> np.ndarray:
    """``image`` rotated counter-clockwise by ``degrees`` about its centre (borders reflected)."""
    h, w = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((w / 2 - 0.5, h / 2 - 0.5), degrees, 1.0)
    return cv2.warpAffine(image, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def build_cross_view_model(config: CrossViewConfig):
    """The two-branch model of ``config``: one backbone per branch, same head, separate weights."""
    from dmlviewer.core.models.model import default_config
    from dmlviewer.core.models.two_branch import build_two_branch

    branch = default_config(backbone=config.backbone, pretrained=config.pretrained, pooling=config.pooling,
                            dim=config.dim, **config.extra_model)
    return build_two_branch({"branches": {"query": branch, "reference": dict(branch)},
                             "input_shapes": {"query": list(config.query_shape),
                                              "reference": [config.reference_size] * 2}}, config.device)


def _load(dataset, indices) -> list[np.ndarray]:
    from dmlviewer.core.data import load_dataset_image

    return [load_dataset_image(dataset, int(i)) for i in indices]


@torch.no_grad()
def embed_pairs(model, streets: list[np.ndarray], aerials: list[np.ndarray], device, batch: int = 64):
    """Embeddings (N x D numpy) of the streets by the query branch and the aerials by the reference branch."""
    model.eval()
    out = []
    for side, images in (("query", streets), ("reference", aerials)):
        preprocess, branch = model.preprocess_of(side), model.branch(side)
        rows = [branch(torch.stack([preprocess(im) for im in images[i : i + batch]]).to(device)).embedding.cpu()
                for i in range(0, len(images), batch)]
        out.append(torch.cat(rows).numpy())
    return out[0], out[1]


def train_cross_view(config: CrossViewConfig, on_epoch: Callable[[dict], None] | None = None) -> dict:
    """Train (module docstring); returns the last epoch's record (``epoch``, ``loss``, metrics,
    ``checkpoint``)."""
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.data.cross_view import cross_view_pairs
    from dmlviewer.core.models.checkpoint import save_checkpoint
    from dmlviewer.core.models.device import resolve_device

    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    device = resolve_device(config.device)
    dataset = open_dataset(config.dataset)
    pairs = cross_view_pairs(dataset)
    train_idx, test_idx = np.flatnonzero(pairs.split == "train"), np.flatnonzero(pairs.split == "test")
    if len(train_idx) < 2 or len(test_idx) < 1:
        raise ValueError(f"{config.dataset}: need at least 2 training pairs and 1 test pair, "
                         f"got {len(train_idx)} and {len(test_idx)}")
    train_s, train_a = _load(dataset, pairs.street[train_idx]), _load(dataset, pairs.aerial[train_idx])
    test_s, test_a = _load(dataset, pairs.street[test_idx]), _load(dataset, pairs.aerial[test_idx])
    model = build_cross_view_model(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    pre_q, pre_r = model.preprocess_of("query"), model.preprocess_of("reference")
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(asdict(config), indent=2))
    lines = []

    def evaluate(epoch: int, loss: float | None) -> dict:
        metrics = cross_view_recall(*embed_pairs(model, test_s, test_a, device))
        record = {"epoch": epoch, "loss": loss, **metrics}
        lines.append(json.dumps(record))
        (out / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        log.info("epoch %d: loss %s, recall@1 %.3f, recall@5 %.3f, recall@1%% %.3f", epoch,
                 "-" if loss is None else f"{loss:.4f}", metrics["recall@1"], metrics["recall@5"], metrics["recall@1%"])
        if on_epoch is not None:
            on_epoch(record)
        return record

    record = evaluate(0, None)
    batch = max(2, min(config.batch_pairs, len(train_idx)))
    started = time.perf_counter()
    for epoch in range(1, config.epochs + 1):
        model.train()
        order = rng.permutation(len(train_idx))
        losses = []
        for start in range(0, len(order) - batch + 1, batch):
            chosen = order[start : start + batch]
            xq = torch.stack([pre_q(train_s[i]) for i in chosen]).to(device)
            aerials = [rotate_about_centre(train_a[i], rng.uniform(0, 360)) if config.rotate else train_a[i]
                       for i in chosen]
            xr = torch.stack([pre_r(a) for a in aerials]).to(device)
            loss = soft_margin_triplet_loss(model(xq, "query").embedding, model(xr, "reference").embedding,
                                            config.alpha)
            if not torch.isfinite(loss):
                raise RuntimeError(f"the loss is not finite at epoch {epoch}: lower the learning rate")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        record = evaluate(epoch, float(np.mean(losses)))
    model.eval()
    metrics = {k: record[k] for k in ("recall@1", "recall@5", "recall@1%", "num_queries")}
    path = save_checkpoint(out / "checkpoint.pt", model, config.epochs, metrics)
    log.info("trained %d epochs in %.1f s; checkpoint %s", config.epochs, time.perf_counter() - started, path)
    return {**record, "checkpoint": str(path)}
