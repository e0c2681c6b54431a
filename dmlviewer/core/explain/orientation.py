"""Camera orientation from point-to-point maps (seed 000 Sec. 5.3, Fig. 7; issue 25).

For a street panorama (query) and its aerial image (reference) explained by a two-branch model
(:func:`~.pair.explain_pair`):

1. the query's most activated point: the peak of the query's "Decomposition" overall map; its
   column coordinate ``x_q`` (panorama pixels) looks along ``heading + 360 x_q / W``
   (:func:`~dmlviewer.core.data.cross_view.column_azimuth`);
2. the peak of that point's **partial map** (the bilinear blend of the point-to-point rows of
   the cells around it, as hovering shows it) in the aerial image, and, as the baseline, the
   peak of the aerial **overall map**. Every peak (the query's included) is refined to sub-cell
   precision by the centroid of the positive values in its 3 x 3 neighbourhood of grid cells
   (:func:`refined_peak`): a panorama grid of 16 columns is 22.5 degrees a cell;
3. the azimuth of each peak seen from the aerial centre (where the camera stands) gives a
   heading, ``azimuth - 360 x_q / W`` (:func:`~dmlviewer.core.data.cross_view.heading_from`),
   compared with the true heading (angle error in degrees, in [0, 180]).

:func:`orientation` runs this over the test pairs of a ``cvusa`` dataset with true headings
(``headings.csv``) and reports, per map, ``within_3.5deg`` (the share of pairs within 3.5
degrees, the paper's figure), ``median_error_deg`` and a ``histogram`` of the errors (Fig. 7).
"""

from __future__ import annotations

import logging

import numpy as np

from dmlviewer.core.data.cross_view import angle_error, heading_from, pixel_azimuth
from dmlviewer.core.progress import EtaClock, Progress

log = logging.getLogger(__name__)

WITHIN_DEG = 3.5
#: the error histogram's bin edges in degrees (Fig. 7 of seed 000 bins the errors likewise)
HISTOGRAM_EDGES = tuple(float(e) for e in range(0, 181, 10))
MAPS = ("partial_map", "overall_map")


def refined_peak(grid: np.ndarray) -> tuple[float, float]:
    """``(row, col)`` of ``grid``'s maximum in continuous grid coordinates (cell ``i`` spans
    ``[i, i + 1)``), refined by the centroid of the positive values of its 3 x 3 neighbourhood
    (the panorama's columns wrap around, the aerial grid does not: no wrap)."""
    h, w = grid.shape
    i, j = np.unravel_index(int(np.argmax(grid)), grid.shape)
    rows = np.arange(max(0, i - 1), min(h, i + 2))
    cols = np.arange(max(0, j - 1), min(w, j + 2))
    patch = np.maximum(grid[np.ix_(rows, cols)], 0.0).astype(np.float64)
    total = patch.sum()
    if total <= 0:
        return i + 0.5, j + 0.5
    return (float((patch.sum(1) * (rows + 0.5)).sum() / total), float((patch.sum(0) * (cols + 0.5)).sum() / total))


def pair_orientation(explanation) -> dict:
    """The headings one explained pair implies (module docstring): ``query_point`` (x, y in
    panorama pixels), ``partial_map`` and ``overall_map`` each with ``peak`` (x, y in aerial
    pixels), ``azimuth_deg`` and ``heading_deg``."""
    hq, wq = explanation.grid_query
    H, W = explanation.image_shape_query
    row, col = refined_peak(np.asarray(explanation.overall_grid("decomposition", "query")))
    x_q, y_q = col * W / wq, row * H / hq
    partial = explanation.partial_map("query", x_q, y_q)
    hr, wr = explanation.grid_reference
    Ha, Wa = explanation.image_shape_reference
    out = {"query_point": [float(x_q), float(y_q)]}
    overall = explanation.overall_grid("decomposition", "reference")
    for name, grid in (("partial_map", partial), ("overall_map", overall)):
        r, c = refined_peak(np.asarray(grid))
        x, y = c * Wa / wr, r * Ha / hr
        azimuth = pixel_azimuth(x, y, (Ha, Wa))
        out[name] = {"peak": [float(x), float(y)], "azimuth_deg": azimuth,
                     "heading_deg": heading_from(x_q, W, azimuth)}
    return out


def summarize(errors: np.ndarray) -> dict:
    """``within_3.5deg``, ``median_error_deg``, ``mean_error_deg`` and ``histogram`` (``edges_deg``,
    ``counts``) of angle errors in degrees."""
    errors = np.asarray(errors, dtype=np.float64)
    counts, edges = np.histogram(errors, bins=np.array(HISTOGRAM_EDGES))
    return {"within_3.5deg": float((errors <= WITHIN_DEG).mean()) if len(errors) else float("nan"),
            "median_error_deg": float(np.median(errors)) if len(errors) else float("nan"),
            "mean_error_deg": float(errors.mean()) if len(errors) else float("nan"),
            "histogram": {"edges_deg": edges.tolist(), "counts": counts.astype(int).tolist()}}


def orientation(model, dataset, split: str | None = "test", device="cpu", max_pairs: int | None = None):
    """Progress generator over the pairs of ``dataset`` (``cvusa`` with true headings) in
    ``split`` (``None``: all); its ``done`` event's result: ``partial_map``, ``overall_map``
    (:func:`summarize`), ``num_pairs`` and ``pairs`` (per pair: street path, true heading, both
    estimates and errors)."""
    from dmlviewer.core.data import load_dataset_image
    from dmlviewer.core.data.cross_view import cross_view_pairs
    from dmlviewer.core.explain.pair import explain_pair

    pairs = cross_view_pairs(dataset)
    chosen = np.flatnonzero((pairs.split == split) if split else np.ones(len(pairs), bool))
    chosen = chosen[np.isfinite(pairs.heading[chosen])]
    if max_pairs:
        chosen = chosen[:max_pairs]
    if not len(chosen):
        from dmlviewer.core.fields import FieldError
        from dmlviewer.core.fields import literal

        raise FieldError("dataset", f"{{field}} {literal(dataset.root)} has no {split or ''} pair with a true heading "
                                    "(headings.csv, which the synthetic cross-view data has)".replace("  ", " "))
    clock = EtaClock(len(chosen))
    records, errors = [], {name: [] for name in MAPS}
    for k, p in enumerate(chosen):
        street, aerial = load_dataset_image(dataset, pairs.street[p]), load_dataset_image(dataset, pairs.aerial[p])
        result = pair_orientation(explain_pair(model, street, aerial, device))
        truth = float(pairs.heading[p])
        record = {"street": dataset.paths[pairs.street[p]], "true_heading_deg": truth}
        for name in MAPS:
            error = angle_error(result[name]["heading_deg"], truth)
            errors[name].append(error)
            record[name] = {**result[name], "error_deg": error}
        records.append(record)
        yield Progress("step", k + 1, len(chosen), "orientation", eta_s=clock.eta(k + 1))
    result = {name: summarize(np.array(errors[name])) for name in MAPS}
    result.update(num_pairs=len(records), pairs=records)
    yield Progress("done", len(chosen), len(chosen), data={"result": result})
