"""Cross-view data (issue 25): the CVUSA reader, its path policy, and the synthetic street/aerial
set's geometry (the heading it records is the one its panoramas show)."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from dmlviewer.core.data import DatasetError, detect_format, open_dataset
from dmlviewer.core.data.cross_view import (angle_error, column_azimuth, cross_view_pairs, heading_from,
                                            make_cross_view_data, pixel_azimuth, read_headings, render_panorama)

PANO = (32, 128)


def _write_jpeg(path, rgb):
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), rgb[..., ::-1])


@pytest.fixture
def cvusa(tmp_path):
    """A CVUSA-layout folder as the real dataset ships it (three columns, no headings)."""
    root = tmp_path / "CVUSA"
    rng = np.random.default_rng(0)
    rows = {"train": [1, 2, 3], "val": [4, 5]}
    for split, ids in rows.items():
        lines = []
        for i in ids:
            _write_jpeg(root / f"bingmap/19/{i:07d}.jpg", rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
            _write_jpeg(root / f"streetview/panos/{i:07d}.jpg", rng.integers(0, 256, (20, 80, 3), dtype=np.uint8))
            lines.append(f"bingmap/19/{i:07d}.jpg,streetview/panos/{i:07d}.jpg,streetview/annotations/{i:07d}.png")
        (root / "splits").mkdir(exist_ok=True)
        (root / f"splits/{split}-19zl.csv").write_text("\n".join(lines) + "\n")
    return root


def test_cvusa_layout_opens(cvusa):
    assert detect_format(cvusa) == "cvusa"
    ds = open_dataset(cvusa)
    assert ds.format == "cvusa" and len(ds) == 10
    pairs = cross_view_pairs(ds)
    assert len(pairs) == 5
    assert all(ds.paths[i].startswith("streetview/panos/") for i in pairs.street)
    assert all(ds.paths[i].startswith("bingmap/19/") for i in pairs.aerial)
    assert [ds.paths[i][-11:] for i in pairs.street] == [ds.paths[i][-11:] for i in pairs.aerial]
    np.testing.assert_array_equal(ds.labels[pairs.street], ds.labels[pairs.aerial])
    assert len(set(ds.labels)) == 5  # one class per pair: one match per query
    assert list(pairs.split) == ["train"] * 3 + ["test"] * 2
    assert list(ds.roles[ds.split == "test"]) == ["query", "gallery"] * 2
    assert np.isnan(pairs.heading).all()  # real CVUSA has no headings file


@pytest.mark.parametrize("line", ["/etc/passwd.jpg,streetview/panos/1.jpg",
                                  "bingmap/19/1.jpg,../../secret/1.jpg",
                                  "bingmap/19/1.jpg"])
def test_untrusted_split_lines_are_refused_in_one_line(cvusa, line):
    (cvusa / "splits/val-19zl.csv").write_text("bingmap/19/0000004.jpg,streetview/panos/0000004.jpg\n" + line + "\n")
    with pytest.raises(DatasetError) as info:
        open_dataset(cvusa)
    message = str(info.value)
    assert "val-19zl.csv, line 2" in message and "\n" not in message


def _disk_scene(azimuth: float, distance: float, size: int = 96) -> np.ndarray:
    aerial = np.full((size, size, 3), 128, dtype=np.uint8)
    x = size / 2 + distance * math.sin(math.radians(azimuth))
    y = size / 2 - distance * math.cos(math.radians(azimuth))
    cv2.circle(aerial, (int(round(x - 0.5)), int(round(y - 0.5))), 4, (255, 0, 0), -1)
    assert pixel_azimuth(x, y, aerial.shape[:2]) == pytest.approx(azimuth % 360, abs=1e-6)
    return aerial


@pytest.mark.parametrize("heading", [0.0, 73.0, 190.0, 333.3])
@pytest.mark.parametrize("azimuth", [0.0, 90.0, 225.0])
def test_panorama_column_looks_along_heading_plus_column_angle(heading, azimuth):
    """A red disk at a known azimuth appears in the column the heading says."""
    aerial = _disk_scene(azimuth, 20.0)
    pano = render_panorama(aerial, [], heading, PANO)
    ground = pano[PANO[0] // 2 :].astype(int)
    redness = (ground[..., 0] - ground[..., 1]).sum(0)
    x = float(np.argmax(redness)) + 0.5
    step = 360.0 / PANO[1]
    assert angle_error(column_azimuth(x, PANO[1], heading), azimuth) <= 2 * step
    assert angle_error(heading_from(x, PANO[1], azimuth), heading) <= 2 * step


def test_rotating_the_aerial_by_the_heading_aligns_column_zero_with_north():
    """pano(aerial, heading) == pano(aerial rotated so that the heading points north, 0)."""
    size, heading = 96, 57.0
    rng = np.random.default_rng(3)
    aerial = cv2.GaussianBlur(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), (0, 0), 4)
    centre = (size / 2 - 0.5, size / 2 - 0.5)
    rotated = cv2.warpAffine(aerial, cv2.getRotationMatrix2D(centre, heading, 1.0), (size, size),
                             flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
    ground = slice(PANO[0] // 2, None)
    direct = render_panorama(aerial, [], heading, PANO)[ground].astype(float)
    aligned = render_panorama(rotated, [], 0.0, PANO)[ground].astype(float)
    wrong = render_panorama(rotated, [], 20.0, PANO)[ground].astype(float)
    assert np.abs(direct - aligned).mean() < 0.2 * np.abs(direct - wrong).mean()


def test_generated_set_opens_and_its_headings_are_recoverable(tmp_path):
    out = make_cross_view_data(tmp_path / "cv", pairs=6, seed=4, aerial_size=64, panorama_shape=PANO)
    ds = open_dataset(out)
    pairs = cross_view_pairs(ds)
    assert ds.format == "cvusa" and len(pairs) == 6 and (pairs.split == "test").sum() == 2
    assert len(read_headings(out)) == 6 and np.isfinite(pairs.heading).all()
    from dmlviewer.core.data import load_dataset_image

    candidates = np.arange(0, 360, 1.0)
    for s, a, true in zip(pairs.street, pairs.aerial, pairs.heading):
        pano, aerial = load_dataset_image(ds, s), load_dataset_image(ds, a)
        assert pano.shape[:2] == PANO and aerial.shape[:2] == (64, 64)
        ground = slice(int(PANO[0] * 0.55), None)  # below every horizon, above no building
        errors = [np.abs(pano[ground].astype(float) - render_panorama(aerial, [], c, PANO)[ground]).mean()
                  for c in candidates]
        assert angle_error(candidates[int(np.argmin(errors))], true) <= 3.0


def test_output_folder_must_be_empty(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(FileExistsError):
        make_cross_view_data(tmp_path / "full", pairs=2)


def test_make_demo_data_cross_view_command(tmp_path, capsys):
    from dmlviewer.cli import main

    assert main(["make-demo-data", "--cross-view", str(tmp_path / "cv"), "--pairs", "4", "--seed", "2"]) == 0
    pairs = cross_view_pairs(open_dataset(tmp_path / "cv"))
    assert len(pairs) == 4 and np.isfinite(pairs.heading).all()
    assert main(["make-demo-data", "--cross-view", str(tmp_path / "cv")]) == 2  # not empty: one line, status 2
    assert "not empty" in capsys.readouterr().err
