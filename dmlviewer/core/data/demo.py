"""Synthetic parts dataset: composite objects whose parts define the class.

Each object has three named parts: a ``head`` whose *shape* varies (circle, triangle, square,
cross, star, hexagon; white with a dark outline), a ``body`` whose *colour* varies (an ellipse in
one of six saturated colours) and a ``tail`` whose *pattern* varies (a fan in dark/light
stripes, solid, checker, dots, lengthwise or diagonal stripes). A class is one combination
(head shape, body colour, tail pattern). :func:`class_design` picks the combinations so that
every value of every part is shared by several classes (no single part identifies a class)
and every class has a neighbour that differs in one part only: a model has to find the object
and look at all of its parts.

Each image places one object at a random position, scale (its length is 40-62 % of the image
side) and rotation (+-25 degrees, head left or right) over a cluttered background: smooth
colour noise, fine luminance noise, sometimes a faint grating, and 3-8 distractors (lines, arcs,
ellipses and irregular polygons). Filled distractors have at most 35 % saturation and 70-215
brightness (lines and arcs up to 80 % saturation but 1-2 px thin), so none repeats a body
colour, the white head or the black-and-white tail.

The object is drawn at twice the resolution and area-averaged down (smooth edges); part masks
are rasterized on the same grid and thresholded at half coverage, so they line up with the drawn
pixels and stay disjoint (each pixel belongs to the part on top: head over body over tail).
The box is the tight box of the three masks. Everything derives from ``(seed, class, image)``
through numpy's PCG64, so the same seed writes byte-identical files.

Output: the CUB-200-2011 layout (see :mod:`.cub`) plus the part masks (see :mod:`.parts`).
``train_test_split.txt`` marks every other image of each class as training (the "official"
protocol); the default protocol splits the classes in half.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import cv2
import numpy as np

from dmlviewer.core.files import new_folder

from .parts import MASKS_DIR, PART_LIST, PARTS_DIR, mask_dir

log = logging.getLogger(__name__)

SHAPES = ("circle", "triangle", "square", "cross", "star", "hexagon")
COLOURS = {
    "red": (215, 40, 40),
    "green": (40, 165, 60),
    "blue": (40, 85, 220),
    "yellow": (240, 200, 25),
    "purple": (150, 55, 205),
    "orange": (245, 130, 25),
}
PATTERNS = ("stripes", "solid", "checker", "dots", "lengthwise", "diagonal")
PART_NAMES = ("head", "body", "tail")
MAX_CLASSES = len(SHAPES) ** 3

HEAD_COLOUR = np.array((240, 240, 235), np.float32)
DARK = np.array((30, 30, 30), np.float32)
LIGHT = np.array((235, 235, 235), np.float32)
OUTLINE = np.array((25, 25, 25), np.float32)

# Object geometry in body lengths; x points to the head, y down.
BODY_AXES = (0.5, 0.27)
HEAD_CENTRE, HEAD_RADIUS = 0.64, 0.24
TAIL = np.array([(-0.35, -0.12), (-0.95, -0.33), (-0.95, 0.33), (-0.35, 0.12)], np.float32)
OBJECT_LENGTH = HEAD_CENTRE + HEAD_RADIUS + 0.95  # tail end to head tip
LENGTH_RANGE = (0.40, 0.62)  # object length / image side
MAX_ROTATION_DEG = 25.0


@dataclass(frozen=True)
class DemoClass:
    head: str
    body: str
    tail: str

    @property
    def name(self) -> str:
        return f"{self.head}_{self.body}_{self.tail}"


def class_design(classes: int) -> list[DemoClass]:
    """``classes`` distinct (shape, colour, pattern) combinations, chosen greedily.

    Uses the first k values of each part with the smallest k for which k^3 >= 2 * classes (so
    at most half of the combinations are used); each step adds the combination whose values
    are least used so far, preferring one that differs from an already chosen class in
    exactly one part. The design depends on ``classes`` only, not on the seed.
    """
    if not 1 <= classes <= MAX_CLASSES:
        raise ValueError(f"classes must be in 1..{MAX_CLASSES}, got {classes}")
    k = 2
    while k < len(SHAPES) and k**3 < 2 * classes:
        k += 1
    candidates = list(product(range(k), repeat=3))
    chosen: list[tuple[int, int, int]] = []
    usage = np.zeros((3, k), np.int64)
    for _ in range(classes):
        def score(c: tuple[int, int, int]) -> tuple[int, int, int]:
            one_apart = sum(sum(a != b for a, b in zip(c, d)) == 1 for d in chosen)
            return (sum(usage[p, v] for p, v in enumerate(c)), 0 if one_apart or not chosen else 1, one_apart)
        best = min((c for c in candidates if c not in chosen), key=score)
        chosen.append(best)
        for p, v in enumerate(best):
            usage[p, v] += 1
    colours = list(COLOURS)
    return [DemoClass(SHAPES[s], colours[c], PATTERNS[t]) for s, c, t in chosen]


# ---------------------------------------------------------------------------------- drawing


def _regular(n: int, radius: float, phase: float = 0.0) -> np.ndarray:
    a = phase + np.arange(n) * 2 * np.pi / n
    return np.stack([np.cos(a), np.sin(a)], 1) * radius


def _head_polygon(shape: str) -> np.ndarray:
    """Head outline around the origin, radius about 1, pointing to +x."""
    if shape == "circle":
        return _regular(40, 1.0)
    if shape == "triangle":
        return _regular(3, 1.2)
    if shape == "square":
        return np.array([(-0.85, -0.85), (0.85, -0.85), (0.85, 0.85), (-0.85, 0.85)])
    if shape == "cross":
        a, w = 1.0, 0.36
        return np.array([(w, -w), (w, -a), (-w, -a), (-w, -w), (-a, -w), (-a, w), (-w, w), (-w, a),
                         (w, a), (w, w), (a, w), (a, -w)])[::-1]
    if shape == "star":
        outer, inner = _regular(5, 1.2), _regular(5, 0.5, np.pi / 5)
        return np.stack([outer, inner], 1).reshape(-1, 2)
    if shape == "hexagon":
        return _regular(6, 1.0, np.pi / 6)
    raise ValueError(f"unknown head shape {shape!r}")


def _pattern_is_dark(pattern: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per pixel, whether the tail pattern is dark at object coordinates (u, v)."""
    if pattern == "solid":
        return np.ones(u.shape, bool)
    if pattern == "stripes":
        return np.floor(u / 0.11).astype(np.int64) % 2 == 0
    if pattern == "lengthwise":
        return np.floor(v / 0.11).astype(np.int64) % 2 == 0
    if pattern == "diagonal":
        return np.floor((u + v) / 0.155).astype(np.int64) % 2 == 0
    if pattern == "checker":
        return (np.floor(u / 0.14).astype(np.int64) + np.floor(v / 0.14).astype(np.int64)) % 2 == 0
    if pattern == "dots":
        du, dv = np.mod(u, 0.2) - 0.1, np.mod(v, 0.2) - 0.1
        return du * du + dv * dv < 0.068**2
    raise ValueError(f"unknown tail pattern {pattern!r}")


def _muted_colour(rng: np.random.Generator, max_saturation: float = 0.35) -> tuple[float, float, float]:
    """A random colour with saturation at most ``max_saturation`` (OpenCV HSV, hue 0-180)."""
    hsv = np.array([[[rng.uniform(0, 180), rng.uniform(0.0, max_saturation) * 255, rng.uniform(70, 215)]]])
    return tuple(float(c) for c in cv2.cvtColor(hsv.astype(np.uint8), cv2.COLOR_HSV2RGB)[0, 0])


def _background(rng: np.random.Generator, side: int) -> np.ndarray:
    """Cluttered, textured background (uint8 RGB, ``side x side``)."""
    base = np.array(_muted_colour(rng, 0.3), np.float32)
    k = int(rng.integers(3, 7))
    colour_noise = cv2.resize(rng.normal(0, 1, (k, k, 3)).astype(np.float32), (side, side), interpolation=cv2.INTER_CUBIC)
    m = int(rng.integers(12, 40))
    texture = cv2.resize(rng.normal(0, 1, (m, m)).astype(np.float32), (side, side), interpolation=cv2.INTER_LINEAR)
    image = base + colour_noise * rng.uniform(10, 28) + texture[..., None] * rng.uniform(6, 22)
    if rng.random() < 0.3:  # a faint grating in a muted colour
        angle, period = rng.uniform(0, np.pi), rng.uniform(0.05, 0.15) * side
        yy, xx = np.mgrid[0:side, 0:side].astype(np.float32)
        wave = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 2 * np.pi / period)
        image += wave[..., None] * rng.uniform(6, 16)
    image = np.clip(image, 0, 255).astype(np.uint8)
    _distractors(rng, image)
    return image


def _distractors(rng: np.random.Generator, image: np.ndarray) -> None:
    side = image.shape[0]
    for _ in range(int(rng.integers(3, 9))):
        kind = rng.integers(4)
        c = (int(rng.integers(0, side)), int(rng.integers(0, side)))
        if kind == 0:  # line (any hue, thin)
            end = (int(rng.integers(0, side)), int(rng.integers(0, side)))
            colour = _muted_colour(rng, 0.8)
            cv2.line(image, c, end, colour, int(rng.integers(1, 3)), cv2.LINE_AA)
        elif kind == 1:  # arc
            axes = (int(rng.uniform(0.05, 0.25) * side), int(rng.uniform(0.05, 0.25) * side))
            start = rng.uniform(0, 360)
            cv2.ellipse(image, c, axes, rng.uniform(0, 180), start, start + rng.uniform(60, 220),
                        _muted_colour(rng, 0.6), int(rng.integers(1, 3)), cv2.LINE_AA)
        elif kind == 2:  # muted elongated ellipse
            a = rng.uniform(0.04, 0.18) * side
            axes = (int(a), int(a * rng.uniform(0.2, 0.5)))
            cv2.ellipse(image, c, axes, rng.uniform(0, 180), 0, 360, _muted_colour(rng), -1, cv2.LINE_AA)
        else:  # muted irregular polygon
            n = int(rng.integers(5, 9))
            angles = np.sort(rng.uniform(0, 2 * np.pi, n))
            radii = rng.uniform(0.03, 0.14, n) * side
            pts = np.stack([c[0] + radii * np.cos(angles), c[1] + radii * np.sin(angles)], 1)
            cv2.fillPoly(image, [pts.astype(np.int32)], _muted_colour(rng), cv2.LINE_AA)


def _raster(points: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    mask = np.zeros(shape, np.uint8)
    cv2.fillPoly(mask, [np.round(points * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)
    return mask.astype(bool)


def _outline(mask: np.ndarray) -> np.ndarray:
    return mask & ~cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)


def render_image(cls: DemoClass, rng: np.random.Generator, size: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One image of class ``cls``: uint8 RGB ``size x size`` and a boolean mask per part.

    The object is drawn at twice the resolution inside its bounding box only (over the
    nearest-neighbour upsampled background) and area-averaged back.
    """
    image = _background(rng, size)

    length = rng.uniform(*LENGTH_RANGE) * size / OBJECT_LENGTH  # pixels per body length
    angle = np.deg2rad(rng.uniform(-MAX_ROTATION_DEG, MAX_ROTATION_DEG))
    flip = -1.0 if rng.random() < 0.5 else 1.0
    cos, sin = np.cos(angle), np.sin(angle)
    linear = length * np.array([[cos, -sin], [sin, cos]]) @ np.diag([flip, 1.0])

    body = _regular(48, 1.0) * BODY_AXES
    head = _head_polygon(cls.head) * HEAD_RADIUS + (HEAD_CENTRE, 0.0)
    extent = np.concatenate([body, head, TAIL]) @ linear.T
    lo, hi = extent.min(0), extent.max(0)
    margin = 0.02 * size
    shift = np.array([rng.uniform(margin - lo[i], size - margin - hi[i]) for i in (0, 1)])
    x0, y0 = np.maximum(np.floor(lo + shift).astype(int) - 1, 0)
    x1, y1 = np.minimum(np.ceil(hi + shift).astype(int) + 2, size)

    # Work at 2x inside the box [x0, x1) x [y0, y1). Pixel centres sit at integer
    # coordinates (OpenCV's convention), so 2x pixel X covers half of 1x pixel x0 + X // 2 and
    # its centre is at 1x coordinate x0 - 0.25 + X / 2.
    fine = 2 * linear
    fine_shift = 2 * (shift - (x0, y0)) + 0.5
    shape = (2 * (y1 - y0), 2 * (x1 - x0))

    def place(points: np.ndarray) -> np.ndarray:
        return points @ fine.T + fine_shift

    head_m = _raster(place(head), shape)
    body_m = _raster(place(body), shape) & ~head_m
    tail_m = _raster(place(TAIL), shape) & ~head_m & ~body_m

    patch = np.repeat(np.repeat(image[y0:y1, x0:x1].astype(np.float32), 2, 0), 2, 1)
    ys, xs = np.nonzero(tail_m)
    uv = (np.stack([xs, ys], 1) - fine_shift) @ np.linalg.inv(fine).T
    dark = _pattern_is_dark(cls.tail, uv[:, 0], uv[:, 1])
    patch[ys, xs] = np.where(dark[:, None], DARK, LIGHT)

    body_colour = np.clip(np.array(COLOURS[cls.body], np.float32) * rng.uniform(0.85, 1.1), 0, 255)
    rows = np.arange(shape[0], dtype=np.float32)[:, None]
    top, bottom = np.flatnonzero(body_m.any(1))[[0, -1]]
    shade = 1.0 + 0.12 * ((top + bottom) / 2 - rows) / max(bottom - top, 1)
    patch[body_m] = np.clip(body_colour * shade, 0, 255)[np.nonzero(body_m)[0]]
    patch[head_m] = HEAD_COLOUR
    patch[_outline(head_m) | _outline(head_m | body_m | tail_m)] = OUTLINE

    out = image.astype(np.float32)
    out[y0:y1, x0:x1] = cv2.resize(patch, (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA)
    out += rng.standard_normal(out.shape, dtype=np.float32) * 3.0
    masks = {}
    for name, m in zip(PART_NAMES, (head_m, body_m, tail_m)):
        full = np.zeros((size, size), bool)
        full[y0:y1, x0:x1] = cv2.resize(m.astype(np.float32), (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA) > 0.5
        masks[name] = full
    return np.clip(out + 0.5, 0, 255).astype(np.uint8), masks


def mask_box(masks: dict[str, np.ndarray]) -> tuple[float, float, float, float]:
    """Tight x, y, w, h box of the union of ``masks``."""
    union = np.logical_or.reduce(list(masks.values()))
    ys, xs = np.nonzero(union)
    return float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1)


# ---------------------------------------------------------------------------------- writing


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _encode(ext: str, image: np.ndarray, params: list[int]) -> bytes:
    ok, buf = cv2.imencode(ext, image, params)
    if not ok:
        raise RuntimeError(f"OpenCV could not encode a {ext} image")
    return buf.tobytes()


def make_demo_data(out: str | Path, classes: int = 20, per_class: int = 40, size: int = 128, seed: int = 0) -> Path:
    """Write the synthetic parts dataset to ``out`` (must not exist or be empty); returns ``out``.

    The files are written into a sibling temporary folder and renamed into place at the end,
    so an interrupted run leaves no half dataset at ``out``.
    """
    out = Path(out)
    if per_class < 1 or size < 32:
        raise ValueError(f"need per_class >= 1 and size >= 32, got {per_class} and {size}")
    design = class_design(classes)
    started = time.perf_counter()
    with new_folder(out) as tmp:
        _write_dataset(tmp, design, per_class, size, seed)
    log.info(
        "wrote %d images of %d classes (%d px, seed %d) to %s in %.1f s",
        classes * per_class, classes, size, seed, out.resolve(), time.perf_counter() - started,
    )
    return out


def _write_image(root: Path, design: list[DemoClass], c: int, i: int, size: int, seed: int) -> tuple[str, tuple]:
    """Render and write image ``i`` of class ``c`` with its masks; its path and box."""
    cls = design[c]
    image, masks = render_image(cls, np.random.default_rng([seed, c, i]), size)
    rel = f"{c + 1:03d}.{cls.name}/{cls.name}_{i + 1:04d}.jpg"
    bgr = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    _write(root / "images" / rel, _encode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 95]))
    target = mask_dir(root / PARTS_DIR, "images/" + rel)
    for name, m in masks.items():
        _write(target / f"{name}.png", _encode(".png", m.astype(np.uint8) * 255, [cv2.IMWRITE_PNG_BILEVEL, 1]))
    return rel, mask_box(masks)


def _write_dataset(root: Path, design: list[DemoClass], per_class: int, size: int, seed: int) -> None:
    jobs = [(c, i) for c in range(len(design)) for i in range(per_class)]
    # Images are independent (own random stream each), so threads change nothing in the output;
    # OpenCV and file writes release the GIL, which makes this about 1.5x faster on 2 cores.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        results = list(pool.map(lambda job: _write_image(root, design, *job, size, seed), jobs))
    ids = range(1, len(jobs) + 1)

    def lines(rows) -> bytes:
        return "".join(f"{r}\n" for r in rows).encode()

    _write(root / "images.txt", lines(f"{k} {rel}" for k, (rel, _) in zip(ids, results)))
    _write(root / "image_class_labels.txt", lines(f"{k} {c + 1}" for k, (c, _) in zip(ids, jobs)))
    _write(root / "classes.txt", lines(f"{c + 1} {c + 1:03d}.{cls.name}" for c, cls in enumerate(design)))
    _write(root / "train_test_split.txt", lines(f"{k} {1 - i % 2}" for k, (_, i) in zip(ids, jobs)))
    _write(root / "bounding_boxes.txt", lines(
        f"{k} {x:.1f} {y:.1f} {w:.1f} {h:.1f}" for k, (_, (x, y, w, h)) in zip(ids, results)))
    _write(root / PARTS_DIR / PART_LIST, lines(f"{k + 1} {name}" for k, name in enumerate(PART_NAMES)))
    (root / PARTS_DIR / MASKS_DIR).mkdir(parents=True, exist_ok=True)
