"""Boxes from activation maps and box overlap (seed 000 App. A.1, seed 002 Sec. 1).

Protocol: the full-size map is normalized to its maximum, binarized at a threshold
(``map / max >= threshold``), and the box is the bounding box of the largest 8-connected
component (by pixel count) of the binary image. A map whose maximum is not positive has no
box (``None``: counts as a miss). Boxes are ``(x, y, w, h)`` in pixel-edge coordinates: a
component spanning pixel columns ``c0..c1`` gives ``x = c0, w = c1 - c0 + 1``.
"""

from __future__ import annotations

import cv2
import numpy as np

Box = tuple[float, float, float, float]


def box_from_map(activation: np.ndarray, threshold: float) -> Box | None:
    """Box of the largest connected component of ``activation / max >= threshold``."""
    activation = np.asarray(activation, dtype=np.float32)
    peak = float(activation.max()) if activation.size else 0.0
    if not peak > 0:
        return None
    binary = (activation >= threshold * peak).astype(np.uint8)
    count, _, stats, _ = cv2.connectedComponentsWithStats(binary, connectivity=8)
    if count < 2:
        return None
    best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    x, y, w, h = (int(v) for v in stats[best, :4])
    return (float(x), float(y), float(w), float(h))


def iou(a: Box | None, b: Box | None) -> float:
    """Intersection over union of two ``(x, y, w, h)`` boxes (0 when either is missing or empty)."""
    if a is None or b is None:
        return 0.0
    ax, ay, aw, ah = (float(v) for v in a)
    bx, by, bw, bh = (float(v) for v in b)
    if not all(np.isfinite((ax, ay, aw, ah, bx, by, bw, bh))):
        return 0.0
    iw = min(ax + aw, bx + bw) - max(ax, bx)
    ih = min(ay + ah, by + bh) - max(ay, by)
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    union = aw * ah + bw * bh - inter
    return inter / union if union > 0 else 0.0


#: the most thresholds one localization run evaluates
MAX_THRESHOLDS = 1000


def parse_thresholds(spec: str) -> list[float]:
    """``"a:b:step"`` (inclusive of ``b`` up to rounding) or a comma list ``"0.2,0.3"``; values
    in [0, 1], at most :data:`MAX_THRESHOLDS` of them (checked before any list is built)."""
    spec = spec.strip()
    try:
        if ":" in spec:
            parts = [float(v) for v in spec.split(":")]
            if len(parts) != 3 or not all(np.isfinite(parts)):
                raise ValueError
            start, stop, step = parts
            if step <= 0 or stop < start:
                raise ValueError
            if not (0.0 <= start and stop <= 1.0):
                raise ValueError(f"bad thresholds {spec!r}: values must lie in [0, 1]")
            if (stop - start) / step >= MAX_THRESHOLDS:
                raise ValueError(f"bad thresholds {spec!r}: more than {MAX_THRESHOLDS} thresholds; use a larger step")
            count = int(np.floor((stop - start) / step + 1e-9)) + 1
            values = [round(start + k * step, 10) for k in range(count)]
        else:
            values = [float(v) for v in spec.split(",") if v.strip()]
    except ValueError as exc:
        if str(exc).startswith("bad thresholds"):
            raise
        raise ValueError(f"bad thresholds {spec!r}: expected a:b:step (e.g. 0.1:0.7:0.05) or a comma list") from None
    if len(values) > MAX_THRESHOLDS:
        raise ValueError(f"bad thresholds {spec!r}: more than {MAX_THRESHOLDS} thresholds")
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"bad thresholds {spec!r}: values must lie in [0, 1]")
    return values
