"""The synthetic parts dataset: layout, masks against pixels and boxes, class design, determinism."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest

from dmlviewer.cli import main
from dmlviewer.core.data import load_image, load_part_masks, make_demo_data, open_dataset
from dmlviewer.core.data.demo import COLOURS, PART_NAMES, class_design


def test_opens_as_cub_with_boxes_and_parts(tiny_demo_root):
    d = open_dataset(tiny_demo_root)
    assert d.format == "cub" and len(d) == 24 and d.num_classes == 6
    assert d.part_names == list(PART_NAMES)
    assert d.parts_root == Path(tiny_demo_root) / "parts"
    assert np.isfinite(d.boxes).all()
    assert (d.split == "train").sum() == 12  # classes 1-3 of 6
    official = open_dataset(tiny_demo_root, protocol="official")
    assert ((official.split == "train") == (np.arange(24) % 4 % 2 == 0)).all()  # every other image per class
    assert load_image(d.abspath(0)).shape == (64, 64, 3)


def test_masks_are_disjoint_nonempty_and_fill_the_box(tiny_demo_root):
    d = open_dataset(tiny_demo_root)
    centres = []
    for i in range(len(d)):
        masks = load_part_masks(d, i)
        assert list(masks) == list(PART_NAMES)
        stack = np.stack(list(masks.values()))
        assert stack.shape == (3, 64, 64) and stack.dtype == bool
        assert stack.sum(axis=(1, 2)).min() > 0, f"image {i} has an empty part mask"
        assert stack.sum(0).max() == 1, "parts overlap"
        ys, xs = np.nonzero(stack.any(0))
        x, y, w, h = d.boxes[i]
        # the box is the tight box of the union: every mask pixel inside, every side touched
        assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (x, y, x + w, y + h)
        centres.append((x + w / 2, y + h / 2, w))
    centres = np.array(centres)
    assert centres[:, 0].std() > 3 and centres[:, 1].std() > 3  # objects placed at random


def _saturation(rgb: np.ndarray) -> np.ndarray:
    rgb = rgb.astype(float)
    return rgb.max(-1) - rgb.min(-1)


def test_masks_lie_on_the_drawn_parts(tiny_demo_root):
    """Body pixels have the class's body colour, head pixels are white-ish, tail pixels grey
    (dark/light pattern) and each differs from the background around the object."""
    d = open_dataset(tiny_demo_root)
    design = {f"{c + 1:03d}.{k.name}": k for c, k in enumerate(class_design(6))}
    palette = np.array(list(COLOURS.values()), float)
    for i in range(len(d)):
        image = load_image(d.abspath(i))
        masks = load_part_masks(d, i)
        cls = design[d.class_names[d.labels[i]]]
        inner = {n: cv2.erode(m.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool) for n, m in masks.items()}
        body = np.median(image[inner["body"]], axis=0)
        assert list(COLOURS)[np.argmin(((palette - body) ** 2).sum(1))] == cls.body
        head = image[inner["head"] if inner["head"].any() else masks["head"]]
        assert np.median(head.mean(1)) > 170 and np.median(_saturation(head)) < 50
        tail = image[masks["tail"]]
        assert np.median(_saturation(tail)) < 60
        if cls.tail == "solid":
            assert np.median(tail.mean(1)) < 90
        x, y, w, h = d.boxes[i].astype(int)
        outside = np.ones((64, 64), bool)
        outside[max(y - 2, 0): y + h + 2, max(x - 2, 0): x + w + 2] = False
        if outside.any():
            background = np.median(image[outside], axis=0)
            assert np.abs(background - body).max() > 20 or _saturation(body[None])[0] > 100


def test_class_design_needs_every_part():
    design = class_design(20)
    combos = [(c.head, c.body, c.tail) for c in design]
    assert len(set(combos)) == 20
    for part in range(3):  # no single part value identifies a class
        assert min(Counter(c[part] for c in combos).values()) >= 2
    for a in combos:  # every class has a neighbour differing in one part only
        assert any(sum(x != y for x, y in zip(a, b)) == 1 for b in combos)
    assert class_design(20) == design  # independent of any seed
    with pytest.raises(ValueError):
        class_design(0)


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_same_seed_gives_identical_files_and_other_seeds_differ(tmp_path):
    a = make_demo_data(tmp_path / "a", classes=3, per_class=2, size=48, seed=7)
    b = make_demo_data(tmp_path / "b", classes=3, per_class=2, size=48, seed=7)
    c = make_demo_data(tmp_path / "c", classes=3, per_class=2, size=48, seed=8)
    da, db, dc = _digest(a), _digest(b), _digest(c)
    assert len(da) == 1 + 4 + 1 + 6 + 6 * 3  # images.txt and co., parts.txt, images, masks
    assert da == db
    images = [k for k in da if k.endswith(".jpg")]
    assert all(da[k] != dc[k] for k in images)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temp folder left


def test_refuses_a_non_empty_output_folder(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        make_demo_data(tmp_path / "out", classes=2, per_class=1, size=32)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


def test_make_demo_data_command(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["make-demo-data", str(out), "--classes", "2", "--per-class", "2", "--size", "40", "--seed", "1"]) == 0
    d = open_dataset(out)
    assert len(d) == 4 and load_image(d.abspath(3)).shape == (40, 40, 3)
    assert main(["make-demo-data", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["make-demo-data", str(tmp_path / "x"), "--classes", "0"]) == 2
