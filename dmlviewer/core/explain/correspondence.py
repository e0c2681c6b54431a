"""Part-correspondence accuracy of partial maps vs overall maps (seed 000 Sec. 5.3, on data with
part masks such as the synthetic parts data).

For same-class pairs ``(q, r)`` of the split: for every part present in both images, the query
point is the part's centroid in ``q`` (or, when the centroid falls outside a non-convex part,
the part pixel nearest to it). The partial map of that point, upsampled to ``r``'s size, is a
hit when its peak (argmax) lies inside the same part's mask in ``r``. The baseline replaces the
partial map by ``r``'s overall "Decomposition" map, which is the same for every part of the
pair: it shows how much the point-to-point tensor adds over the overall map.

Pairs: the split's images in a seeded random order, each paired with a random other image of
its class, up to ``max_pairs``. ``num_parts`` counts the evaluated (pair, part) cases, the
denominator of both accuracies.
"""

from __future__ import annotations

import logging
from typing import Iterator

import numpy as np
import torch

from dmlviewer.core.explain.pair import explain_pair
from dmlviewer.core.progress import CancelToken, EtaClock, Progress

log = logging.getLogger(__name__)


def part_point(mask: np.ndarray) -> tuple[float, float]:
    """``(x, y)`` of the mask's centroid, or of the mask pixel nearest to it if the centroid is
    not on the mask."""
    ys, xs = np.nonzero(mask)
    cx, cy = float(xs.mean()), float(ys.mean())
    if mask[int(round(cy)), int(round(cx))]:
        return cx, cy
    k = int(np.argmin((xs - cx) ** 2 + (ys - cy) ** 2))
    return float(xs[k]), float(ys[k])


def same_class_pairs(dataset, split: str | None, max_pairs: int, seed: int = 0) -> list[tuple[int, int]]:
    """Up to ``max_pairs`` (query, reference) dataset indices of the same class (see module doc)."""
    rng = np.random.default_rng(seed)
    indices = dataset.indices(split)
    labels = dataset.labels[indices]
    pairs = []
    for k in rng.permutation(len(indices)):
        same = indices[(labels == labels[k]) & (indices != indices[k])]
        if len(same):
            pairs.append((int(indices[k]), int(rng.choice(same))))
        if len(pairs) >= max_pairs:
            break
    return pairs


def correspond(
    model: torch.nn.Module,
    dataset,
    split: str | None = "test",
    max_pairs: int = 200,
    seed: int = 0,
    device: str | torch.device = "cpu",
    cancel: CancelToken | None = None,
) -> Iterator[Progress]:
    """Part-correspondence accuracies; the ``done`` event's result is ``{partial_map_accuracy,
    overall_map_accuracy, num_pairs, num_parts}``."""
    from dmlviewer.core.data import DatasetError, ImageError, load_part_masks
    from dmlviewer.core.data.errors import ImageProblem
    from dmlviewer.core.data.images import load_or_skip, report_skipped

    if dataset.parts_root is None:
        raise DatasetError(f"{dataset.root}: the dataset has no part masks (make one with make-demo-data)")
    pairs = same_class_pairs(dataset, split, max_pairs, seed)
    if not pairs:
        raise ValueError(f"split {split!r} has no two images of the same class")
    log.info("part correspondence on %d same-class pairs", len(pairs))
    partial_hits = overall_hits = cases = used = 0
    skipped: dict = {}  # unreadable images and masks, reported once each
    clock = EtaClock(len(pairs))
    for k, (q, r) in enumerate(pairs):
        if cancel is not None:
            cancel.raise_if_cancelled()
        image_q, image_r = load_or_skip(dataset, q, skipped), load_or_skip(dataset, r, skipped)
        try:
            masks_q, masks_r = load_part_masks(dataset, q), load_part_masks(dataset, r)
        except ImageError as exc:
            if exc.path not in skipped:
                skipped[exc.path] = ImageProblem(exc.path, exc.reason)
                report_skipped(skipped[exc.path])
            image_q = None
        if image_q is None or image_r is None:
            yield Progress("step", k + 1, len(pairs), "correspond", eta_s=clock.eta(k + 1))
            continue
        used += 1
        pair = explain_pair(model, image_q, image_r, device)
        overall = pair.overall("decomposition", "reference")
        overall_peak = np.unravel_index(int(np.argmax(overall)), overall.shape)
        for name, mask_q in masks_q.items():
            mask_r = masks_r.get(name)
            if mask_r is None or not mask_q.any() or not mask_r.any():
                continue
            x, y = part_point(mask_q)
            partial = pair.partial_map_image("query", x, y)
            peak = np.unravel_index(int(np.argmax(partial)), partial.shape)
            partial_hits += bool(mask_r[peak])
            overall_hits += bool(mask_r[overall_peak])
            cases += 1
        yield Progress("step", k + 1, len(pairs), "correspond", eta_s=clock.eta(k + 1))
    if used == 0:
        raise ValueError(f"none of the {len(pairs)} pairs could be read (images or part masks); "
                         "see the warnings above")
    if skipped:
        log.warning("correspondence skipped %d unreadable file(s); %d of %d pairs used",
                    len(skipped), used, len(pairs))
    result = {
        "partial_map_accuracy": partial_hits / cases if cases else 0.0,
        "overall_map_accuracy": overall_hits / cases if cases else 0.0,
        "num_pairs": used,
        "num_parts": cases,
    }
    yield Progress("done", len(pairs), len(pairs), data={"result": result})
