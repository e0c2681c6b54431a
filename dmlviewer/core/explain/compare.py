"""Model diagnosis: two models on the same pairs (issue 24; seed 000 Sec. 5.2, App. A.2).

:func:`compare_models` puts two models (any door: whatever :func:`~dmlviewer.core.models.open_model`
or the importer returns, or a live module wrapped as a model) side by side on one dataset split:

- **per model**: Recall@1 and MAP@R of the split (:func:`~dmlviewer.core.evaluate.metrics.retrieval_metrics`
  on the split's embeddings, the numbers ``evaluate`` prints), weakly supervised localization
  accuracy over thresholds of the "Decomposition" and "Decomposition+Bias" overall maps
  (:func:`.localization.localize`, self pairing, the numbers ``localize`` prints; only where the
  split has boxes) and part correspondence (:func:`.correspondence.correspond`; only where the
  dataset has part masks). These are the paper's diagnosis figures: a model whose training-set
  maps lie on the background generalizes worse (Tables 2-3).
- **per pair** (same-class pairs of the split, seeded, as :func:`.correspondence.same_class_pairs`
  draws them): both models' cosine similarities and the agreement of their maps of the same
  images (:mod:`.agreement`): Spearman rank correlation, hot-region IoU and peak distance of the
  overall maps of ``method`` (default "Decomposition"; each measure the mean over the query's
  and the reference's map), and the point-to-point agreement: for a fixed lattice of query
  points (:func:`query_points`, ``points x points`` cell centres over the query image) the
  Spearman correlation of the two models' partial maps on the reference, averaged over the
  points.
- **pairs ranked by disagreement** (``1 - Spearman`` of the overall maps, largest first; pairs
  with an undefined correlation last), each with whether each model's nearest neighbour of the
  query (among the split's other images) is of its class; and every query of the split where
  exactly one model retrieves a same-class nearest neighbour (``retrieval_disagreements``).

``split="both"``: the figures per split (``by_split``), the contract's top-level figures of
each model are the test split's, and the pairs are drawn half from each split.
"""

from __future__ import annotations

import logging
from typing import Iterator, Sequence

import numpy as np
import torch

from dmlviewer.core.explain.agreement import IOU_FRACTION, iou, nanmean, peak_distance, spearman
from dmlviewer.core.explain.correspondence import correspond, same_class_pairs
from dmlviewer.core.explain import methods as registry
from dmlviewer.core.explain.localization import DEFAULT_THRESHOLDS, localize
from dmlviewer.core.explain.pair import SIDES, PairExplanation, explain_pair
from dmlviewer.core.progress import CancelToken, EtaClock, Progress

log = logging.getLogger(__name__)

SPLITS = ("train", "test", "both")
#: query points per side of the point-to-point lattice
QUERY_POINTS = 3
AGREEMENT_KEYS = ("overall_map_spearman", "peak_distance", "iou", "point_to_point_spearman")


def split_names(split: str | None) -> list[str | None]:
    """The dataset splits ``split`` stands for (``"both"``: train and test)."""
    if split == "both":
        return ["train", "test"]
    if split in (None, "all", "train", "test"):
        return [None if split == "all" else split]
    raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")


def sample_pairs(dataset, split: str | None, count: int, seed: int = 0) -> list[tuple[int, int, str | None]]:
    """Up to ``count`` same-class ``(query, reference, split)`` pairs (dataset indices) of
    ``split``; for ``"both"`` half from each split (:func:`.correspondence.same_class_pairs`)."""
    if count < 1:
        raise ValueError(f"the number of pairs must be positive, got {count}")
    names = split_names(split)
    shares = [count // len(names) + (k < count % len(names)) for k in range(len(names))]
    pairs = []
    for name, share in zip(names, shares):
        pairs.extend((q, r, name) for q, r in same_class_pairs(dataset, name, share, seed))
    return pairs


def query_points(image_shape: tuple[int, int], points: int = QUERY_POINTS) -> list[tuple[float, float]]:
    """``points x points`` query points ``(x, y)`` in pixel-centre coordinates: the cell centres
    of a regular lattice over an ``H x W`` image (row by row)."""
    height, width = image_shape
    xs = [(k + 0.5) * width / points - 0.5 for k in range(points)]
    ys = [(k + 0.5) * height / points - 0.5 for k in range(points)]
    return [(x, y) for y in ys for x in xs]


def overall_agreement(maps_a: dict[str, np.ndarray], maps_b: dict[str, np.ndarray],
                      image_shapes: dict[str, tuple[int, int]], fraction: float = IOU_FRACTION) -> dict[str, float]:
    """Spearman, IoU and peak distance of two models' grid maps per side (``side -> map``),
    each the mean over the sides given."""
    sides = list(maps_a)
    return {
        "overall_map_spearman": nanmean(spearman(maps_a[s], maps_b[s]) for s in sides),
        "peak_distance": nanmean(peak_distance(maps_a[s], maps_b[s], image_shapes[s]) for s in sides),
        "iou": nanmean(iou(maps_a[s], maps_b[s], fraction) for s in sides),
    }


def pair_agreement(expl_a: PairExplanation, expl_b: PairExplanation, method: str = "decomposition",
                   points: int = QUERY_POINTS, fraction: float = IOU_FRACTION) -> dict[str, float]:
    """Agreement of two explanations of the same pair (module docstring): the keys of
    :data:`AGREEMENT_KEYS`."""
    shapes = {"query": expl_a.image_shape_query, "reference": expl_a.image_shape_reference}
    result = overall_agreement({s: expl_a.overall_grid(method, s) for s in SIDES},
                               {s: expl_b.overall_grid(method, s) for s in SIDES}, shapes, fraction)
    result["point_to_point_spearman"] = nanmean(
        spearman(expl_a.partial_map("query", x, y), expl_b.partial_map("query", x, y))
        for x, y in query_points(shapes["query"], points))
    return result


def _relay(job: Iterator[Progress], label: str) -> Iterator[Progress]:
    """Re-yield a sub-job's events with ``label`` before their message; return its result."""
    result = None
    while True:
        try:
            event = next(job)
        except StopIteration as stop:  # a generator that returns its result
            return stop.value if stop.value is not None else result
        if event.kind == "done":
            result = event.data.get("result")
            continue
        event.message = f"{label}: {event.message}" if event.message else label
        yield event


def retrieval_figures(model: torch.nn.Module, dataset, split: str | None, device="cpu", batch_size: int = 64,
                      num_workers: int | None = 0, cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Generator; result (``done`` event and return value): ``{"recall@1", "map@r",
    "num_queries", "nearest", "same_class"}`` of ``split``, where
    ``nearest`` maps each embedded image (dataset index) to its nearest other image of the split
    (dataset index) and ``same_class`` says whether that one shares its label."""
    from dmlviewer.core.evaluate.evaluation import query_gallery
    from dmlviewer.core.evaluate.extract import embed_dataset
    from dmlviewer.core.evaluate.metrics import nearest_neighbors, retrieval_metrics

    indices = dataset.indices(split)
    subset = dataset.select_split(split)
    if len(subset) < 2:
        raise ValueError(f"split {split!r} has fewer than two images")
    embedded = yield from _relay(embed_dataset(model, subset, batch_size, device, num_workers, cancel), "embedding")
    rows = embedded["rows"]
    emb = embedded["embeddings"]
    labels = subset.labels[rows]
    queries, gallery = query_gallery(subset, rows)
    metrics = retrieval_metrics(emb, labels, (1,), device, queries=queries, gallery=gallery)
    if subset.branches is None:
        _, nn_rows = nearest_neighbors(emb, 1, device)
    else:  # cross-view: a street image's nearest is an aerial image, and an aerial image's a street
        nn_rows = _nearest_across(emb, subset.branches[rows] == "query", device)
    nearest = {int(indices[r]): int(indices[rows[n]]) for r, n in zip(rows, nn_rows[:, 0])}
    same = {int(indices[r]): bool(labels[n] == labels[k]) for k, (r, n) in enumerate(zip(rows, nn_rows[:, 0]))}
    result = {"recall@1": metrics["recall@1"], "map@r": metrics["map@r"], "num_queries": metrics["num_queries"],
              "nearest": nearest, "same_class": same}
    yield Progress("done", 1, 1, data={"result": result})
    return result


def _nearest_across(embeddings: np.ndarray, street: np.ndarray, device) -> np.ndarray:
    """Per row, the nearest row (cosine) of the other side of ``street`` (N x 1, as
    :func:`~dmlviewer.core.evaluate.metrics.nearest_neighbors`' indices)."""
    from dmlviewer.core.evaluate.metrics import iter_nearest_neighbors

    emb = torch.nn.functional.normalize(torch.as_tensor(embeddings, dtype=torch.float32, device=device), dim=1)
    out = np.zeros((len(emb), 1), dtype=np.int64)
    for side in (street, ~street):
        mine, other = np.flatnonzero(side), np.flatnonzero(~side)
        if len(mine) == 0 or len(other) == 0:
            raise ValueError("cross-view figures need street and aerial images in the split")
        for start, _sims, idx in iter_nearest_neighbors(emb[mine], emb[other], 1):
            out[mine[start:start + len(idx)], 0] = other[idx[:, 0].cpu().numpy()]
    return out


def has_boxes(dataset, split: str | None) -> bool:
    """Whether any image of ``split`` has a ground-truth box."""
    boxes = dataset.boxes[dataset.indices(split)]
    return bool(np.all(np.isfinite(boxes), axis=1).any()) if len(boxes) else False


def model_figures(model: torch.nn.Module, dataset, split: str | None, device="cpu",
                  thresholds: Sequence[float] = DEFAULT_THRESHOLDS, localization_limit: int | None = None,
                  correspondence_pairs: int = 200, seed: int = 0, num_workers: int | None = 0,
                  cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Generator; result (``done`` event and return value): one model's diagnosis figures on one
    split: ``recall@1``, ``map@r``,
    ``localization`` (``{method: {thresholds, accuracy, best_threshold, best_accuracy,
    num_images}}`` for the registry's ``diagnosis`` maps (seed 000 Tables 2-3), ``None`` without boxes) and
    ``part_correspondence`` (``correspond``'s result; only where the dataset has part masks),
    plus the private ``_retrieval`` (nearest neighbours) for :func:`compare_models`."""
    retrieval = yield from retrieval_figures(model, dataset, split, device, num_workers=num_workers, cancel=cancel)
    figures: dict = {"recall@1": retrieval["recall@1"], "map@r": retrieval["map@r"],
                     "num_queries": retrieval["num_queries"], "localization": None}
    if has_boxes(dataset, split):
        results = yield from _relay(localize(model, dataset, registry.methods("diagnosis"), thresholds, "self", split,
                                             device, limit=localization_limit, seed=seed, cancel=cancel),
                                    "localization")
        figures["localization"] = {r["method"]: {k: v for k, v in r.items() if k != "method"} for r in results}
    if dataset.parts_root is not None:
        figures["part_correspondence"] = yield from _relay(
            correspond(model, dataset, split, correspondence_pairs, seed, device, cancel), "part correspondence")
    figures["_retrieval"] = retrieval
    yield Progress("done", 1, 1, data={"result": figures})
    return figures


def _summary(values: list[float]) -> dict:
    return {"mean": nanmean(values), "per_pair": [float(v) for v in values]}


def compare_models(
    model_a: torch.nn.Module,
    model_b: torch.nn.Module,
    dataset,
    split: str = "test",
    pairs: int = 50,
    device: str | torch.device = "cpu",
    method: str = "decomposition",
    points: int = QUERY_POINTS,
    fraction: float = IOU_FRACTION,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    localization_limit: int | None = None,
    correspondence_pairs: int | None = None,
    seed: int = 0,
    names: Sequence[str] = ("A", "B"),
    num_workers: int | None = 0,
    cancel: CancelToken | None = None,
) -> Iterator[Progress]:
    """Compare two models on ``split`` of ``dataset`` (module docstring). The ``done`` event's
    result: ``{"split", "models", "agreement", "pairs", "retrieval_disagreements", "num_pairs"}``
    (the ``compare --json`` document, see ``docs/contracts.md``); ``agreement`` holds ``method``
    and each :data:`AGREEMENT_KEYS` measure's ``mean`` and ``per_pair`` (in the order of
    ``pairs``). Sub-jobs (embedding, localization, correspondence of each model) report their
    own steps, then one step per pair; the cancel token is checked between pairs and inside
    the sub-jobs. ``correspondence_pairs``: pairs of the part-correspondence score (default:
    ``pairs``)."""
    from dmlviewer.core.data.images import load_or_skip

    names_of_splits = split_names(split)
    chosen = sample_pairs(dataset, split, pairs, seed)
    if not chosen:
        raise ValueError(f"split {split!r} has no two images of the same class")
    models = {names[0]: model_a, names[1]: model_b}
    by_split: dict[str, dict[str, dict]] = {name: {} for name in names}
    for name, model in models.items():
        for part in names_of_splits:
            label = f"model {name}" + (f", {part}" if len(names_of_splits) > 1 else "")
            by_split[name][str(part)] = yield from _relay(
                model_figures(model, dataset, part, device, thresholds, localization_limit,
                              correspondence_pairs or pairs, seed, num_workers, cancel), label)
    nearest = {name: {k: v for f in figs.values() for k, v in f["_retrieval"]["nearest"].items()}
               for name, figs in by_split.items()}
    same_class = {name: {k: v for f in figs.values() for k, v in f["_retrieval"]["same_class"].items()}
                  for name, figs in by_split.items()}

    log.info("comparing %s and %s on %d pairs (%s)", *names, len(chosen), split)
    rows = []
    skipped: dict = {}
    clock = EtaClock(len(chosen))
    for k, (q, r, part) in enumerate(chosen):
        if cancel is not None:
            cancel.raise_if_cancelled()
        image_q, image_r = load_or_skip(dataset, q, skipped), load_or_skip(dataset, r, skipped)
        if image_q is not None and image_r is not None:
            expl_a = explain_pair(model_a, image_q, image_r, device)
            expl_b = explain_pair(model_b, image_q, image_r, device)
            rows.append({
                "query": q, "reference": r,
                "query_path": dataset.paths[q], "reference_path": dataset.paths[r], "split": part,
                "similarity": [float(expl_a.similarity), float(expl_b.similarity)],
                "nearest_same_class": [same_class[n].get(q) for n in names],
                **pair_agreement(expl_a, expl_b, method, points, fraction),
            })
        yield Progress("step", k + 1, len(chosen), "comparing pairs", eta_s=clock.eta(k + 1))
    if not rows:
        raise ValueError(f"none of the {len(chosen)} pairs could be read; see the warnings above")
    if skipped:
        log.warning("comparison skipped %d unreadable image(s); %d of %d pairs used", len(skipped), len(rows), len(chosen))

    for row in rows:
        rho = row["overall_map_spearman"]
        row["disagreement"] = 1.0 - rho if np.isfinite(rho) else float("nan")
    rows.sort(key=lambda row: (not np.isfinite(row["disagreement"]), -np.nan_to_num(row["disagreement"])))
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
    agreement = {"method": method, **{key: _summary([row[key] for row in rows]) for key in AGREEMENT_KEYS}}
    agreement["iou"]["fraction"] = fraction
    agreement["point_to_point_spearman"]["points"] = points * points

    disagreements = []
    for index in sorted(same_class[names[0]]):
        flags = [same_class[n].get(index) for n in names]
        if None not in flags and flags[0] != flags[1]:
            disagreements.append({"index": index, "path": dataset.paths[index], "split": str(dataset.split[index]),
                                  "nearest": [nearest[n][index] for n in names], "nearest_same_class": flags})

    model_entries = []
    for name in names:
        figs = {part: {k: v for k, v in f.items() if not k.startswith("_")} for part, f in by_split[name].items()}
        top = figs["test"] if split == "both" else figs[str(names_of_splits[0])]
        entry = {"name": name, **top}
        if split == "both":
            entry["by_split"] = figs
        model_entries.append(entry)
    result = {
        "split": split,
        "models": model_entries,
        "agreement": agreement,
        "pairs": rows,
        "retrieval_disagreements": disagreements,
        "num_pairs": len(rows),
    }
    yield Progress("done", len(chosen), len(chosen), data={"result": result})
