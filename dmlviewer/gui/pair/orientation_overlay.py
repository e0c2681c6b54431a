"""The cross-view orientation overlay (issue 25): with a two-branch model on a street/aerial
pair, the headings that the partial map's and the overall map's peaks imply, drawn as lines
from the camera at the aerial image's centre, and the column of the query's most activated
point on the panorama (``core.explain.orientation.pair_orientation``, seed 000 Sec. 5.3)."""

from __future__ import annotations

import logging
import math

log = logging.getLogger(__name__)

#: the two orientation estimates the pair view draws, with their legend names (issue 25)
ORIENTATION_MAPS = {"partial_map": "partial map", "overall_map": "overall map"}
ORIENTATION_COLORS = {"north": "#e0e0e0", "partial_map": "#00e676", "overall_map": "#ff4081", "truth": "#ffffff"}


def _ray(shape: tuple[int, int], azimuth: float) -> tuple[list[float], list[float]]:
    """The segment from the centre of an aerial image of ``shape`` (where the camera stands)
    to its inscribed circle along ``azimuth`` (degrees clockwise from north, image up; the
    convention of ``core.data.cross_view.pixel_azimuth``), in image coordinates."""
    h, w = shape
    radius, a = min(h, w) / 2.0, math.radians(azimuth)
    return [w / 2.0, w / 2.0 + radius * math.sin(a)], [h / 2.0, h / 2.0 - radius * math.cos(a)]


def show_orientation(panes, images, expl, model) -> dict | None:
    """With a two-branch ``model`` on a street/aerial pair ``images``: on the aerial image
    (``panes[1]``) the 0-degree line (north, from the camera at the centre), the headings the
    partial map's and the overall map's peaks imply (and the true heading, dashed, when known)
    and the two peaks (dots); on the panorama (``panes[0]``) the column of the query's most
    activated point (and a dot on it). Returns ``pair_orientation``'s result with each map's
    ``error_deg`` and ``true_heading_deg`` (None when unknown), or None when nothing is drawn."""
    from dmlviewer.core.data.cross_view import angle_error
    from dmlviewer.core.explain.orientation import pair_orientation

    if (expl is None or images is None or not images.cross_view
            or getattr(model, "input_shapes", None) is None):
        return None
    try:
        result = pair_orientation(expl)
    except Exception:  # noqa: BLE001 - the lines are an extra: never break the pair view
        log.warning("orientation unavailable for this pair", exc_info=True)
        return None
    truth = images.true_heading
    for name in ORIENTATION_MAPS:
        heading = result[name]["heading_deg"]
        result[name]["error_deg"] = None if truth is None else float(angle_error(heading, truth))
    result["true_heading_deg"] = truth
    shape = tuple(expl.image_shape_reference)
    guides = [("north: 0°", *_ray(shape, 0.0), ORIENTATION_COLORS["north"], False)]
    for name, label in ORIENTATION_MAPS.items():
        heading, error = result[name]["heading_deg"], result[name]["error_deg"]
        text = f"{label}: {heading:.1f}°" + ("" if error is None else f", error {error:.1f}°")
        guides.append((text, *_ray(shape, heading), ORIENTATION_COLORS[name], False))
    if truth is not None:
        guides.append((f"true heading: {truth:.1f}°", *_ray(shape, truth), ORIENTATION_COLORS["truth"], True))
    peaks = [(*result[name]["peak"], ORIENTATION_COLORS[name]) for name in ORIENTATION_MAPS]
    panes[1].set_guides(guides, peaks)
    x_q, y_q = result["query_point"]
    height = expl.image_shape_query[0]
    panes[0].set_guides([(f"most activated point: column {x_q:.0f}", [x_q, x_q], [0.0, float(height)],
                                   ORIENTATION_COLORS["partial_map"], False)],
                                 [(x_q, y_q, ORIENTATION_COLORS["partial_map"])])
    return result
