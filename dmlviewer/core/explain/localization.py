"""Weakly supervised localization accuracy of overall maps (seed 000 Sec. 5.1, App. A.1; seed 002).

For every image of the split with a ground-truth box, the query-side overall map of each
method is computed at the full image size against a reference image, turned into a box at each
threshold (:func:`.boxes.box_from_map`: normalized to its maximum, largest connected component)
and counted as a hit when its IoU with the ground-truth box exceeds 0.5. Accuracy per threshold
is hits / images.

Pairing (which reference each image is explained against; reported in the result):

- ``"self"``: the image itself (the map of ``S(q, q)``).
- ``"nearest"``: its nearest other image of the split by embedding cosine (a retrieval result,
  as in seed 000).
- ``"same-class"``: a random other image of its class in the split (seeded); images alone in
  their class fall back to themselves.

``grad_transfer`` needs Grad-CAM weights of labelled images (seed 002): given as a
:class:`.GradWeightBank`, or computed here from the dataset's training split.
"""

from __future__ import annotations

import logging
from typing import Iterator, Sequence

import numpy as np
import torch

from dmlviewer.core.explain.boxes import box_from_map, iou
from dmlviewer.core.explain.grad_transfer import GradWeightBank, bank_from_train_split
from dmlviewer.core.explain.inputs import as_device, eval_mode
from dmlviewer.core.explain import methods as registry
from dmlviewer.core.explain.pair import explain_pair
from dmlviewer.core.progress import CancelToken, EtaClock, Progress

log = logging.getLogger(__name__)

PAIRINGS = ("self", "nearest", "same-class")
IOU_HIT = 0.5
DEFAULT_THRESHOLDS = tuple(round(0.05 * k, 2) for k in range(1, 17))  # 0.05 .. 0.80


def embed_images(model: torch.nn.Module, dataset, indices: np.ndarray, device="cpu", batch_size: int = 32,
                 skipped: dict | None = None, side: str = "query") -> np.ndarray:
    """L2-normalized embeddings (len(indices) x D) of the listed images; NaN rows for images
    that cannot be read (skipped and reported, see ``core.data.load_or_skip``). ``side``: the
    branch of a two-branch model that embeds them (at its input shape)."""
    from dmlviewer.core.data.images import load_or_skip
    from dmlviewer.core.models.two_branch import TwoBranchModel

    preprocess = model.preprocess_of(side) if isinstance(model, TwoBranchModel) else model.preprocess
    net = model.branch(side) if isinstance(model, TwoBranchModel) else model
    dev = as_device(device)
    out = None
    with eval_mode(model), torch.no_grad():
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            images = [(k, load_or_skip(dataset, int(i), skipped)) for k, i in enumerate(chunk, start)]
            images = [(k, im) for k, im in images if im is not None]
            if not images:
                continue
            batch = torch.stack([preprocess(im) for _, im in images])
            emb = net(batch.to(dev)).embedding.float().cpu().numpy()
            if out is None:
                out = np.full((len(indices), emb.shape[1]), np.nan, np.float32)
            out[[k for k, _ in images]] = emb
    return out if out is not None else np.full((len(indices), 1), np.nan, np.float32)


def choose_references(
    model: torch.nn.Module, dataset, indices: np.ndarray, pairing: str, device="cpu", seed: int = 0,
    skipped: dict | None = None,
) -> np.ndarray:
    """The reference image (dataset index) of each query in ``indices`` under ``pairing``."""
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; choose from {', '.join(PAIRINGS)}")
    if pairing == "self":
        return indices.copy()
    if pairing == "nearest":
        from dmlviewer.core.models.two_branch import TwoBranchModel

        emb = embed_images(model, dataset, indices, device, skipped=skipped)
        # a two-branch model: queries by the query branch, candidate references by the reference branch
        emb_r = (embed_images(model, dataset, indices, device, skipped=skipped, side="reference")
                 if isinstance(model, TwoBranchModel) else emb)
        sims = np.nan_to_num(emb @ emb_r.T, nan=-np.inf)
        np.fill_diagonal(sims, -np.inf)
        return indices[np.argmax(sims, axis=1)] if len(indices) > 1 else indices.copy()
    rng = np.random.default_rng(seed)
    labels = dataset.labels[indices]
    refs = indices.copy()
    for k, i in enumerate(indices):
        same = indices[(labels == labels[k]) & (indices != i)]
        if len(same):
            refs[k] = rng.choice(same)
    return refs


def localize(
    model: torch.nn.Module,
    dataset,
    methods: Sequence[str] | None = None,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    pairing: str = "self",
    split: str | None = "test",
    device: str | torch.device = "cpu",
    limit: int | None = None,
    seed: int = 0,
    grad_bank: GradWeightBank | None = None,
    cancel: CancelToken | None = None,
) -> Iterator[Progress]:
    """Localization accuracy per method and threshold; the ``done`` event's result is a list of
    dicts ``method pairing thresholds accuracy best_threshold best_accuracy num_images``.
    ``methods``: any of the registry's ``explain`` use (default: its ``diagnosis`` maps, those of
    the decomposition)."""
    known = registry.methods("explain")
    methods = list(dict.fromkeys(registry.methods("diagnosis") if methods is None else methods))
    bad = [m for m in methods if m not in known]
    if bad:
        raise ValueError(f"unknown method(s) {', '.join(bad)}; choose from {', '.join(known)}")
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; choose from {', '.join(PAIRINGS)}")
    thresholds = [float(t) for t in thresholds]
    if not thresholds:
        raise ValueError("no thresholds given")
    from dmlviewer.core.data.images import load_or_skip

    indices = dataset.indices(split)
    indices = indices[np.all(np.isfinite(dataset.boxes[indices]), axis=1)]
    if limit is not None:
        indices = indices[: int(limit)]
    if len(indices) == 0:
        raise ValueError(f"no image of split {split!r} has a ground-truth box")
    if registry.method("grad_transfer").key in methods and grad_bank is None:
        grad_bank = yield from bank_from_train_split(model, dataset, len(indices), device, cancel)
    skipped: dict = {}  # unreadable images, reported once each
    refs = choose_references(model, dataset, indices, pairing, device, seed, skipped)
    log.info("localizing %d images (%s pairing), methods %s", len(indices), pairing, ", ".join(methods))
    hits = {m: np.zeros(len(thresholds), np.int64) for m in methods}
    clock = EtaClock(len(indices))
    used = 0
    for k, (i, r) in enumerate(zip(indices, refs)):
        if cancel is not None:
            cancel.raise_if_cancelled()
        image = load_or_skip(dataset, int(i), skipped)
        reference = image if r == i else load_or_skip(dataset, int(r), skipped)
        if image is None or reference is None:
            yield Progress("step", k + 1, len(indices), "localize", eta_s=clock.eta(k + 1))
            continue
        used += 1
        pair = explain_pair(model, image, reference, device, grad_bank=grad_bank)
        truth = tuple(float(v) for v in dataset.boxes[i])
        for m in methods:
            activation = pair.overall(m, "query")
            for t, threshold in enumerate(thresholds):
                if iou(box_from_map(activation, threshold), truth) > IOU_HIT:
                    hits[m][t] += 1
        yield Progress("step", k + 1, len(indices), "localize", eta_s=clock.eta(k + 1))
    n = used
    if n == 0:
        raise ValueError(f"none of the {len(indices)} images (or their references) could be read; "
                         "see the warnings above")
    if skipped:
        log.warning("localization skipped %d unreadable image(s); accuracies are over the %d pairs read",
                    len(skipped), n)
    results = []
    for m in methods:
        acc = hits[m] / n
        best = int(np.argmax(acc))
        results.append({
            "method": m,
            "pairing": pairing,
            "thresholds": thresholds,
            "accuracy": [float(a) for a in acc],
            "best_threshold": thresholds[best],
            "best_accuracy": float(acc[best]),
            "num_images": int(n),
        })
    yield Progress("done", n, n, data={"result": results})
