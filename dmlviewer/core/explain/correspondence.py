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

Also reported, to judge what the viewer shows:

- ``chance_accuracy``: the accuracy of a peak drawn uniformly over the reference image, the
  mean share of the reference's area covered by the part (the chance level of both accuracies).
- ``matches_on_object`` / ``matches_same_part``: of the top ``MATCHES`` point-to-point matches
  of each pair (:meth:`.PairExplanation.correspondences`, what "Matches" draws), the share
  whose two ends both lie on the object (any part), and on the same part;
  ``matches_score_on_object``: the share of their summed scores held by the matches on the
  object (the matches are spread out, so once the object's cells are used up the remaining
  ones are weak; the pair view draws each line as strong as its score). A match joins two grid
  cells; an end lies on a part when the part covers some of the middle of its cell (the central
  half in each direction, where the marker is drawn): on a coarse grid a thin part rarely
  covers the exact centre pixel of the cell it fills most of. The same part: the part covering
  most of the middle of each end's cell.
- ``group_diversity`` (grouping heads only, else None): how different the groups' maps are. For
  each image of each pair and each group p, the group's decomposition map ``m_p`` (positive part
  of its point-to-point tensor summed over the other image: where that image supports the
  group's share of the similarity, exact, what the Group attention tab shows); the figure is the
  mean over group pairs of ``1 - cos(m_p, m_q)``: 0 when every group shows the same map, 1 when
  no two groups share a position.
"""

from __future__ import annotations

import logging
from typing import Iterator

import numpy as np
import torch

from dmlviewer.core.explain.groups import group_diversity
from dmlviewer.core.explain.pair import explain_pair
from dmlviewer.core.progress import CancelToken, EtaClock, Progress

log = logging.getLogger(__name__)

#: Matches per pair scored by ``matches_on_object`` / ``matches_same_part`` (the viewer's default).
MATCHES = 8


def part_point(mask: np.ndarray) -> tuple[float, float]:
    """``(x, y)`` of the mask's centroid, or of the mask pixel nearest to it if the centroid is
    not on the mask."""
    ys, xs = np.nonzero(mask)
    cx, cy = float(xs.mean()), float(ys.mean())
    if mask[int(round(cy)), int(round(cx))]:
        return cx, cy
    k = int(np.argmin((xs - cx) ** 2 + (ys - cy) ** 2))
    return float(xs[k]), float(ys[k])


def _cross_view_sides(dataset, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``indices`` may be a query and which a reference: in a dataset that divides its
    images between branches (``Dataset.branches``: cross-view data, streets ``query`` and
    aerial images ``reference``) only the query branch's images are queries and only the
    reference branch's are references (a two-branch model embeds each with its own branch; the
    pair runs street to aerial); elsewhere any image is either."""
    branches = getattr(dataset, "branches", None)
    if branches is None:
        everything = np.ones(len(indices), dtype=bool)
        return everything, everything
    sides = np.asarray(branches, dtype=object)[indices]
    return sides == "query", sides == "reference"


def same_class_pairs(dataset, split: str | None, max_pairs: int, seed: int = 0) -> list[tuple[int, int]]:
    """Up to ``max_pairs`` (query, reference) dataset indices of the same class (see module doc;
    street to aerial in a cross-view dataset, :func:`_cross_view_sides`)."""
    rng = np.random.default_rng(seed)
    indices = dataset.indices(split)
    labels = dataset.labels[indices]
    queries, references = _cross_view_sides(dataset, indices)
    pairs = []
    for k in rng.permutation(len(indices)):
        if not queries[k]:
            continue
        same = indices[(labels == labels[k]) & (indices != indices[k]) & references]
        if len(same):
            pairs.append((int(indices[k]), int(rng.choice(same))))
        if len(pairs) >= max_pairs:
            break
    return pairs


def different_class_pairs(dataset, split: str | None, max_pairs: int, seed: int = 0) -> list[tuple[int, int]]:
    """Up to ``max_pairs`` (query, reference) dataset indices of different classes: the split's
    images in a seeded random order, each with a random image of another class (street to
    aerial in a cross-view dataset, :func:`_cross_view_sides`)."""
    rng = np.random.default_rng(seed + 1)
    indices = dataset.indices(split)
    labels = dataset.labels[indices]
    queries, references = _cross_view_sides(dataset, indices)
    pairs = []
    for k in rng.permutation(len(indices)):
        if not queries[k]:
            continue
        other = indices[(labels != labels[k]) & references]
        if len(other):
            pairs.append((int(indices[k]), int(rng.choice(other))))
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
    chance = 0.0
    matches = on_object = same_part = 0
    score_total = score_on_object = 0.0
    diversities: list[float] = []
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
            chance += float(mask_r.mean())
            cases += 1
        for m in pair.correspondences(MATCHES):
            part_q = _part_at(masks_q, m["query_xy"], pair.grid_query)
            part_r = _part_at(masks_r, m["reference_xy"], pair.grid_reference)
            joined = part_q is not None and part_r is not None
            matches += 1
            on_object += joined
            same_part += part_q is not None and part_q == part_r
            score_total += float(m["score"])
            score_on_object += float(m["score"]) * joined
        if pair.num_groups > 1:
            diversities.extend(group_diversity(pair))
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
        "chance_accuracy": chance / cases if cases else 0.0,
        "matches_on_object": on_object / matches if matches else 0.0,
        "matches_same_part": same_part / matches if matches else 0.0,
        "matches_score_on_object": score_on_object / score_total if score_total > 0 else 0.0,
        "group_diversity": float(np.mean(diversities)) if diversities else None,
    }
    yield Progress("done", len(pairs), len(pairs), data={"result": result})


def _part_at(masks: dict[str, np.ndarray], xy: tuple[float, float], grid: tuple[int, int]) -> str | None:
    """The part covering most of the middle of the grid cell centred at pixel ``xy`` (the
    central half of the cell in each direction), or None when no part reaches it."""
    if not masks:
        return None
    h, w = next(iter(masks.values())).shape
    rx, ry = w / grid[1] / 4.0, h / grid[0] / 4.0
    x0, x1 = max(int(np.floor(xy[0] - rx + 0.5)), 0), min(int(np.ceil(xy[0] + rx + 0.5)), w)
    y0, y1 = max(int(np.floor(xy[1] - ry + 0.5)), 0), min(int(np.ceil(xy[1] + ry + 0.5)), h)
    cover = {name: int(mask[y0:y1, x0:x1].sum()) for name, mask in masks.items()}
    name = max(cover, key=cover.get)
    return name if cover[name] > 0 else None

