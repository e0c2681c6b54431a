"""Cross-view data (issue 25): CVUSA's layout, its reader, and a synthetic street/aerial set.

**Layout** (CVUSA, Workman et al. 2015, as the cross-view papers use it)::

    bingmap/19/0000001.jpg           aerial images, north up, the camera at the centre
    streetview/panos/0000001.jpg     street-view panoramas (360 degrees wide)
    splits/train-19zl.csv            one pair a line: aerial,street[,more columns ignored]
    splits/val-19zl.csv              the test pairs
    headings.csv                     optional (the synthetic set): street,heading_deg

The split files are not trusted: a listed path that is absolute or climbs out with ``..`` is
refused (:class:`DatasetError` naming the file and line). :func:`read_cvusa` reads them into one
:class:`Dataset`: pair ``k`` is images ``2k`` (street) and ``2k + 1`` (aerial), label ``k``;
test streets are ``"query"`` and test aerials ``"gallery"`` in ``roles`` (one match per query),
training images ``"train"``; ``branches`` says that a two-branch model embeds the streets with
its query branch and the aerial images with its reference branch.

**Angles**: azimuths are degrees clockwise from north (the aerial image's up). A point
``(x, y)`` of the aerial image (pixel coordinates, pixel ``i`` spanning ``[i, i + 1)``) lies at
:func:`pixel_azimuth` from the centre. Column coordinate ``x`` of a panorama of width ``W``
looks along ``heading + 360 x / W`` (:func:`column_azimuth`): the heading is the azimuth the
panorama's left edge faces, the ground-truth orientation.

**Synthetic set** (:func:`make_cross_view_data`): aerial scenes (a textured ground, roads,
coloured buildings and trees seen from above) and panoramas made from them by a polar transform
around the centre with a random heading: each panorama column is the ray at its azimuth, each
ground row a distance with a perspective-like vertical squeeze (``d = camera height /
tan(angle below the horizon)``, so far ground is compressed towards the horizon), buildings and
trees drawn above the horizon with an apparent height falling with distance, plus clutter (poles,
blobs that are not in the aerial image), a random horizon and brightness, and noise.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from dmlviewer.core.files import new_folder

from .errors import DatasetError
from .paths import path_problem
from .records import Dataset
from .splits import PROTOCOLS
from .tables import read_index_text

log = logging.getLogger(__name__)

SPLIT_FILES = {"train": "splits/train-19zl.csv", "test": "splits/val-19zl.csv"}
HEADINGS_FILE = "headings.csv"
AERIAL_FOLDER, STREET_FOLDER = "bingmap/19", "streetview/panos"
#: synthetic defaults: a 1:4 panorama (CVUSA's panoramas are 1:4 too) and a square aerial image
PANORAMA_SHAPE, AERIAL_SIZE, PAIRS = (64, 256), 128, 200
TEST_FRACTION = 0.25


# ---------------------------------------------------------------------------------- angles
def pixel_azimuth(x: float, y: float, shape: tuple[int, int]) -> float:
    """Azimuth (degrees clockwise from north, in [0, 360)) of aerial point ``(x, y)`` seen from
    the image centre (``shape`` = (height, width))."""
    h, w = shape
    return math.degrees(math.atan2(x - w / 2, h / 2 - y)) % 360.0


def column_azimuth(x: float, width: int, heading: float) -> float:
    """Azimuth a panorama of ``width`` columns with ``heading`` looks along at column coordinate ``x``."""
    return (heading + 360.0 * x / width) % 360.0


def heading_from(x: float, width: int, azimuth: float) -> float:
    """The heading that makes column coordinate ``x`` look along ``azimuth`` (inverse of :func:`column_azimuth`)."""
    return (azimuth - 360.0 * x / width) % 360.0


def angle_error(a: float | np.ndarray, b: float | np.ndarray) -> float | np.ndarray:
    """Absolute angular difference in degrees, in [0, 180]."""
    d = np.abs((np.asarray(a, dtype=np.float64) - b) % 360.0)
    out = np.minimum(d, 360.0 - d)
    return float(out) if out.ndim == 0 else out


# ---------------------------------------------------------------------------------- reading
def _read_split(root: Path, rel: str) -> list[tuple[str, str]]:
    path = root / rel
    text = read_index_text(path)
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 2 or not fields[0] or not fields[1]:
            raise DatasetError(f"{path}, line {number}: expected aerial,street paths separated by a comma",
                               path=path, line=number)
        for p in fields[:2]:
            problem = path_problem(p)
            if problem:
                raise DatasetError(f"{path}, line {number}: listed path {p[:80]!r} may not be used ({problem}); "
                                   "paths must be relative and stay inside the dataset folder", path=path, line=number)
        pairs.append((fields[0].replace("\\", "/"), fields[1].replace("\\", "/")))
    return pairs


def read_cvusa(root: Path, protocol: str = "default") -> Dataset:
    """The pairs of CVUSA's split files as one :class:`Dataset` (module docstring). The split is
    CVUSA's own (by location, one match per query) under every protocol."""
    root = Path(root)
    if protocol not in PROTOCOLS:
        raise DatasetError(f"unknown split protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    present = {s: rel for s, rel in SPLIT_FILES.items() if os.path.lexists(root / rel)}
    if not present:
        raise DatasetError(f"{root}: no CVUSA split file ({', '.join(SPLIT_FILES.values())})", path=root)
    paths, split, roles = [], [], []
    for name, rel in present.items():
        for aerial, street in _read_split(root, rel):
            paths += [street, aerial]
            split += [name, name]
            roles += ["train", "train"] if name == "train" else ["query", "gallery"]
    n = len(paths) // 2
    return Dataset(root=root, format="cvusa", paths=paths, labels=np.repeat(np.arange(n), 2),
                   class_names=[Path(paths[2 * k]).stem for k in range(n)], split=np.array(split, dtype=object),
                   boxes=None, protocol="official", roles=np.array(roles, dtype=object),
                   branches=np.array(["query", "reference"] * n, dtype=object))


@dataclass
class CrossViewPairs:
    """The pairs of a ``cvusa`` dataset: ``street``/``aerial`` image indices into the dataset,
    ``heading`` in degrees (NaN where ``headings.csv`` gives none), ``split`` per pair."""

    street: np.ndarray
    aerial: np.ndarray
    heading: np.ndarray
    split: np.ndarray

    def __len__(self) -> int:
        return len(self.street)


def cross_view_pairs(dataset: Dataset) -> CrossViewPairs:
    """The street/aerial pairs of a dataset read by :func:`read_cvusa`, with their true headings."""
    if dataset.format != "cvusa":
        raise DatasetError(f"{dataset.root}: a cross-view dataset (CVUSA layout) is needed, got {dataset.format}")
    street = np.arange(0, len(dataset), 2)
    headings = read_headings(dataset.root)
    heading = np.array([headings.get(dataset.paths[i], np.nan) for i in street], dtype=np.float64)
    return CrossViewPairs(street, street + 1, heading, dataset.split[street])


def read_headings(root: Path) -> dict[str, float]:
    """``street path -> heading`` from ``headings.csv`` (empty when the file is absent)."""
    path = Path(root) / HEADINGS_FILE
    if not path.exists():
        return {}
    out = {}
    for number, row in enumerate(csv.reader(io.StringIO(read_index_text(path))), start=1):
        if number == 1 and row[:1] == ["street"] or not row:
            continue
        try:
            heading = float(row[1])
        except (IndexError, ValueError):
            raise DatasetError(f"{path}, line {number}: expected street,heading_deg", path=path, line=number) from None
        if not math.isfinite(heading):
            raise DatasetError(f"{path}, line {number}: the heading is not a finite number", path=path, line=number)
        out[row[0].strip()] = heading % 360.0
    return out


# ---------------------------------------------------------------------------------- synthesis
@dataclass
class SceneObject:
    """A building (``kind`` "building") or tree seen from above: centre ``(x, y)`` in aerial
    pixels, ``radius``, RGB ``colour``, ``height`` (relative; its apparent height in panoramas)."""

    kind: str
    x: float
    y: float
    radius: float
    colour: tuple[int, int, int]
    height: float


def _colour(rng: np.random.Generator, saturation: tuple[float, float], value: tuple[float, float],
            hue: tuple[float, float] = (0, 180)) -> tuple[int, int, int]:
    hsv = np.uint8([[[rng.uniform(*hue), rng.uniform(*saturation) * 255, rng.uniform(*value) * 255]]])
    return tuple(int(c) for c in cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)[0, 0])


def render_aerial(rng: np.random.Generator, size: int = AERIAL_SIZE) -> tuple[np.ndarray, list[SceneObject]]:
    """A top-down scene (uint8 RGB, ``size x size``, north up) and its buildings and trees."""
    base = np.array(_colour(rng, (0.2, 0.5), (0.35, 0.6), (20, 70)), dtype=np.float32)
    coarse = cv2.resize(rng.normal(0, 18, (8, 8, 3)).astype(np.float32), (size, size), interpolation=cv2.INTER_CUBIC)
    image = np.clip(base + coarse + rng.normal(0, 6, (size, size, 3)), 0, 255).astype(np.uint8)
    scale = size / 128
    for _ in range(int(rng.integers(1, 4))):  # roads: long grey strips through the scene
        angle, point = rng.uniform(0, math.pi), rng.uniform(0.2, 0.8, 2) * size
        d = np.array([math.cos(angle), math.sin(angle)]) * size * 2
        grey = int(rng.integers(90, 150))
        cv2.line(image, tuple(int(v) for v in point - d), tuple(int(v) for v in point + d), (grey,) * 3,
                 max(2, int(rng.integers(4, 9) * scale)), cv2.LINE_AA)
    objects = []
    for _ in range(int(rng.integers(6, 13))):
        x, y = rng.uniform(0.08, 0.92, 2) * size
        if math.hypot(x - size / 2, y - size / 2) < 10 * scale:
            continue  # the camera stands on open ground
        if rng.random() < 0.5:
            obj = SceneObject("building", x, y, rng.uniform(5, 12) * scale, _colour(rng, (0.5, 1.0), (0.5, 1.0)),
                              rng.uniform(1.0, 2.0))
            half = obj.radius / math.sqrt(2)
            box = cv2.boxPoints(((x, y), (2 * half, 2 * half * rng.uniform(0.6, 1.0)), rng.uniform(0, 90)))
            cv2.fillPoly(image, [np.round(box).astype(np.int32)], obj.colour, cv2.LINE_AA)
        else:
            obj = SceneObject("tree", x, y, rng.uniform(4, 9) * scale, _colour(rng, (0.5, 0.9), (0.25, 0.6), (35, 85)),
                              rng.uniform(0.5, 1.0))
            cv2.circle(image, (int(round(x)), int(round(y))), int(round(obj.radius)), obj.colour, -1, cv2.LINE_AA)
        objects.append(obj)
    return image, objects


def render_panorama(aerial: np.ndarray, objects: list[SceneObject], heading: float,
                    shape: tuple[int, int] = PANORAMA_SHAPE, rng: np.random.Generator | None = None,
                    horizon: float = 0.4, clutter: bool = True) -> np.ndarray:
    """The street panorama (uint8 RGB, ``shape``) seen from the aerial image's centre with
    ``heading`` (module docstring): ``horizon`` is the horizon's height as a fraction of the
    panorama; ``rng`` (``None``: no noise) adds clutter, brightness change and noise."""
    h, w = shape
    size = aerial.shape[0]
    radius = size / 2 - 1
    hz = int(round(h * horizon))
    azimuth = np.radians(heading + 360.0 * (np.arange(w) + 0.5) / w)
    t = (np.arange(hz, h) + 0.5 - hz) / (h - hz)  # 0 at the horizon, 1 at the bottom
    camera = 0.12 * size
    distance = np.minimum(camera / np.tan(np.radians(75.0) * t), radius)  # the perspective-like squeeze
    map_x = (size / 2 + distance[:, None] * np.sin(azimuth)[None, :] - 0.5).astype(np.float32)
    map_y = (size / 2 - distance[:, None] * np.cos(azimuth)[None, :] - 0.5).astype(np.float32)
    pano = np.empty((h, w, 3), dtype=np.uint8)
    pano[hz:] = cv2.remap(aerial, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
    sky = np.linspace(0, 1, max(hz, 1))[:, None]
    pano[:hz] = (np.array([110, 160, 230]) * (1 - sky) + np.array([200, 220, 240]) * sky)[:, None, :].astype(np.uint8)
    for obj in sorted(objects, key=lambda o: -math.hypot(o.x - size / 2, o.y - size / 2)):  # far ones first
        d = math.hypot(obj.x - size / 2, obj.y - size / 2)
        if d >= radius:
            continue
        centre = (pixel_azimuth(obj.x, obj.y, aerial.shape[:2]) - heading) % 360.0 / 360.0 * w
        half = math.degrees(math.atan2(obj.radius, d)) / 360.0 * w
        top = hz - obj.height * camera / d * h * 0.5
        shade = tuple(int(c * 0.8) for c in obj.colour)
        for shift in (-w, 0, w):
            x0, x1 = int(round(centre - half + shift)), int(round(centre + half + shift))
            if obj.kind == "building":
                cv2.rectangle(pano, (x0, int(round(top))), (x1, hz), shade, -1)
            else:
                cv2.ellipse(pano, (int(round(centre + shift)), int(round((top + hz) / 2))),
                            (max(1, (x1 - x0) // 2), max(1, int((hz - top) / 2))), 0, 0, 360, shade, -1)
    if rng is not None:
        if clutter:
            for _ in range(int(rng.integers(2, 6))):  # poles and blobs that the aerial view does not show
                x = int(rng.integers(0, w))
                cv2.line(pano, (x, int(rng.integers(0, hz + 1))), (x, h - 1), (int(rng.integers(30, 80)),) * 3, 1)
            for _ in range(int(rng.integers(0, 3))):
                cv2.circle(pano, (int(rng.integers(0, w)), int(rng.integers(hz, h))), int(rng.integers(2, 6)),
                           _colour(rng, (0.3, 1.0), (0.3, 1.0)), -1)
        gain = rng.uniform(0.8, 1.2)
        pano = np.clip(pano.astype(np.float32) * gain + rng.normal(0, 6, pano.shape), 0, 255).astype(np.uint8)
    return pano


def _write_jpeg(path: Path, rgb: np.ndarray) -> None:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 92])
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG image")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.tobytes())


def make_cross_view_data(out: str | Path, pairs: int = PAIRS, seed: int = 0, aerial_size: int = AERIAL_SIZE,
                         panorama_shape: tuple[int, int] = PANORAMA_SHAPE,
                         test_fraction: float = TEST_FRACTION) -> Path:
    """Write ``pairs`` synthetic street/aerial pairs in CVUSA's layout to ``out`` (must not exist
    or be empty), with ``headings.csv``; the last ``test_fraction`` of the pairs are the test
    (``val-19zl``) split. Written into a sibling temporary folder renamed into place at the end."""
    out = Path(out)
    if pairs < 2 or aerial_size < 32:
        raise ValueError(f"need at least 2 pairs and an aerial size of 32 px, got {pairs} and {aerial_size}")
    started = time.perf_counter()
    n_test = min(pairs - 1, max(1, int(round(pairs * test_fraction))))
    with new_folder(out) as tmp:
        lines = {"train": [], "test": []}
        headings = ["street,heading_deg"]
        for k in range(pairs):
            rng = np.random.default_rng([seed, k])
            aerial, objects = render_aerial(rng, aerial_size)
            heading = float(rng.uniform(0, 360))
            pano = render_panorama(aerial, objects, heading, panorama_shape, rng, horizon=rng.uniform(0.35, 0.45))
            name = f"{k + 1:07d}.jpg"
            a_rel, s_rel = f"{AERIAL_FOLDER}/{name}", f"{STREET_FOLDER}/{name}"
            _write_jpeg(tmp / a_rel, aerial)
            _write_jpeg(tmp / s_rel, pano)
            lines["test" if k >= pairs - n_test else "train"].append(f"{a_rel},{s_rel}")
            headings.append(f"{s_rel},{heading:.3f}")
        for split, rel in SPLIT_FILES.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text("\n".join(lines[split]) + "\n")
        (tmp / HEADINGS_FILE).write_text("\n".join(headings) + "\n")
    log.info("wrote %d cross-view pairs (%d test; panoramas %dx%d, aerial %d px, seed %d) to %s in %.1f s", pairs,
             n_test, *panorama_shape, aerial_size, seed, out.resolve(), time.perf_counter() - started)
    return out
