"""Images and listings from elsewhere: header sizes against OpenCV, the pixel limit, the path
and link policy, index files that are not regular files."""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest
from dataset_builders import make_cub, make_sop, textured, write_png
from hostile_bytes import jpeg_header_only, png_header_only

from dmlviewer.core.data import DatasetError, ImageError, load_image, open_dataset
from dmlviewer.core.data.images import header_size, load_dataset_image, pixel_problem
from dmlviewer.core.data.paths import path_problem
from dmlviewer.core.limits import set_limit

FORMATS = (".png", ".jpg", ".bmp", ".webp", ".tiff", ".ppm", ".pgm", ".gif")


@pytest.mark.parametrize("ext", FORMATS)
@pytest.mark.parametrize("width, height", [(37, 23), (1, 300), (301, 2)])
def test_header_size_agrees_with_what_opencv_decodes(ext, width, height):
    image = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    ok, buf = cv2.imencode(ext, image[..., 0] if ext == ".pgm" else image)
    assert ok
    data = buf.tobytes()
    decoded = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    assert header_size(data) == (width, height) == (decoded.shape[1], decoded.shape[0])


def test_pixel_limit_refuses_a_bomb_before_decoding(tmp_path, monkeypatch):
    (tmp_path / "bomb.png").write_bytes(png_header_only(30_000, 30_000))  # 900 Mpx in about 1 KB
    (tmp_path / "bomb.jpg").write_bytes(jpeg_header_only(65_000, 65_000))
    decoded = []
    monkeypatch.setattr(cv2, "imdecode", lambda *a: decoded.append(a) or None)
    for name in ("bomb.png", "bomb.jpg"):
        with pytest.raises(ImageError, match="pixels, over the limit of 178,956,970"):
            load_image(tmp_path / name)
    assert decoded == []  # refused from the header alone
    assert pixel_problem(png_header_only(13_000, 13_000)) is None  # 169 Mpx: under the limit


def test_pixel_limit_is_a_setting(tmp_path):
    path = write_png(tmp_path / "a.png", textured(0, 32))
    set_limit("max_image_pixels", 32 * 32 - 1)
    try:
        with pytest.raises(ImageError, match="32 x 32 = 1,024 pixels"):
            load_image(path)
    finally:
        set_limit("max_image_pixels", None)
    assert load_image(path).shape == (32, 32, 3)


def test_unreadable_images_are_described_without_their_content(tmp_path):
    (tmp_path / "secret.png").write_text("password=hunter2\n")
    os.mkfifo(tmp_path / "fifo.png")
    with pytest.raises(ImageError) as info:
        load_image(tmp_path / "secret.png")
    assert "hunter2" not in str(info.value) and "text file" in str(info.value)
    with pytest.raises(ImageError, match="FIFO"):
        load_image(tmp_path / "fifo.png")


@pytest.mark.parametrize("rel, problem", [
    ("images/a.jpg", None), ("a/../b.jpg", None), ("./a.jpg", None), ("img:2.jpg", None), ("d:x.jpg", "absolute"),
    ("../x.jpg", "outside"), ("a/../../x.jpg", "outside"), ("/etc/passwd", "absolute"),
    ("C:\\\\x.jpg", "absolute"), ("", "empty"), ("a\x00b", "NUL"),
])
def test_path_policy(rel, problem):
    found = path_problem(rel)
    assert (found is None) if problem is None else (problem in found)


def test_listings_leaving_the_folder_are_refused_in_every_reader(tmp_path):
    cub = tmp_path / "cub"
    make_cub(cub)
    lines = (cub / "images.txt").read_text().splitlines()
    lines[0] = lines[0].split()[0] + " ../../outside.jpg"
    (cub / "images.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"images\.txt: 1 listed image path\(s\) may not be used"):
        open_dataset(cub)
    sop = tmp_path / "sop"
    make_sop(sop)
    text = (sop / "Ebay_test.txt").read_text().splitlines()
    text[1] = " ".join(text[1].split()[:3] + ["/etc/passwd"])
    (sop / "Ebay_test.txt").write_text("\n".join(text) + "\n")
    with pytest.raises(DatasetError, match="absolute path"):
        open_dataset(sop)


def test_links_out_of_the_dataset_folder_are_refused_per_image(tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    outside = write_png(tmp_path / "outside.png", textured(1))
    write_png(root / "a" / "1.png", textured(2))
    os.symlink(outside, root / "a" / "2.png")
    os.symlink(root / "a" / "1.png", root / "b" / "inside_link.png")  # a link within the folder is fine
    write_png(root / "b" / "2.png", textured(3))
    dataset = open_dataset(root, "folder")
    index = {p: i for i, p in enumerate(dataset.paths)}
    with pytest.raises(ImageError, match="outside the dataset folder"):
        load_dataset_image(dataset, index["a/2.png"])
    assert load_dataset_image(dataset, index["b/inside_link.png"]).shape == (32, 32, 3)
    monkeypatch.setenv("DMLVIEWER_FOLLOW_EXTERNAL_LINKS", "1")
    assert load_dataset_image(dataset, index["a/2.png"]).shape == (32, 32, 3)


def test_a_cub_folder_without_images_txt_is_not_read_as_a_folder_dataset(tmp_path):
    root = tmp_path / "cub"
    make_cub(root, with_images=True)
    (root / "images.txt").unlink()
    with pytest.raises(DatasetError, match="missing index file: .*images.txt"):
        open_dataset(root)
    (root / "images.txt").mkdir()
    with pytest.raises(DatasetError, match="images.txt: it is a folder"):
        open_dataset(root)
    (root / "images.txt").rmdir()
    os.mkfifo(root / "images.txt")
    with pytest.raises(DatasetError, match="FIFO"):
        open_dataset(root)
