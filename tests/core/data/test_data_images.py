"""Image loading, bad-file reports, tensors and augmentation, the torch dataset."""

from __future__ import annotations

import logging

import cv2
import numpy as np
import pytest
import torch
from dataset_builders import textured, write_jpeg, write_png

from dmlviewer.core.data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Dataset,
    ImageError,
    ImageFolderDataset,
    check_images,
    load_image,
    open_dataset,
    probe_image,
    to_tensor,
    train_transform,
)
from dmlviewer.core.data.transforms import RandomResizedCropFlip, denormalize


def _encode(ext: str, array: np.ndarray, params=()) -> bytes:
    ok, buf = cv2.imencode(ext, array, list(params))
    assert ok
    return buf.tobytes()


# ----------------------------------------------------------------------------- load_image


def test_png_is_read_as_rgb_exactly_and_unicode_paths_work(tmp_path):
    rgb = textured(3, 17)
    path = write_png(tmp_path / "vögel 鳥" / "bild.png", rgb)
    out = load_image(path)
    assert out.dtype == np.uint8 and out.shape == (17, 17, 3)
    np.testing.assert_array_equal(out, rgb)


def test_jpeg_channel_order_is_rgb(tmp_path):
    rgb = np.zeros((16, 16, 3), np.uint8)
    rgb[..., 0] = 220  # pure-ish red
    out = load_image(write_jpeg(tmp_path / "red.jpg", rgb))
    assert abs(int(out[..., 0].mean()) - 220) < 4 and out[..., 2].mean() < 4


def test_grayscale_becomes_three_equal_channels(tmp_path):
    gray = textured(4, 12)[..., 0]
    path = tmp_path / "gray.png"
    path.write_bytes(_encode(".png", gray))
    out = load_image(path)
    assert out.shape == (12, 12, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], gray)
    jpath = tmp_path / "gray.jpg"
    jpath.write_bytes(_encode(".jpg", gray))
    assert load_image(jpath).shape == (12, 12, 3)


def test_rgba_is_composited_on_white(tmp_path):
    bgra = np.zeros((2, 3, 4), np.uint8)
    bgra[..., :3] = (255, 0, 0)  # blue in BGR
    bgra[0, 0, 3] = 255  # opaque
    bgra[0, 1, 3] = 0  # transparent
    bgra[0, 2, 3] = 128  # half
    bgra[1, :, 3] = 255
    path = tmp_path / "rgba.png"
    path.write_bytes(_encode(".png", bgra))
    out = load_image(path).astype(int)
    assert out[0, 0].tolist() == [0, 0, 255]
    assert out[0, 1].tolist() == [255, 255, 255]
    a = 128 / 255
    np.testing.assert_allclose(out[0, 2], [255 * (1 - a), 255 * (1 - a), 255], atol=1)


def test_sixteen_bit_png_is_scaled(tmp_path):
    img = np.full((4, 4, 3), 65535, np.uint16)
    img[0, 0] = (0, 32896, 65535)
    path = tmp_path / "deep.png"
    path.write_bytes(_encode(".png", img))
    out = load_image(path)
    assert out[1, 1].tolist() == [255, 255, 255]
    assert out[0, 0].tolist() == [255, 128, 0]  # BGR -> RGB


def test_truncated_jpeg_is_reported_as_truncated(tmp_path):
    data = _encode(".jpg", textured(5, 64), [cv2.IMWRITE_JPEG_QUALITY, 95])
    cut = data[: len(data) // 2]
    path = tmp_path / "cut.jpg"
    path.write_bytes(cut)
    with pytest.raises(ImageError, match="truncated JPEG") as info:
        load_image(path)
    assert info.value.path == str(path) and "truncated" in info.value.reason
    # cut inside the header, and only the last two bytes (end-of-image marker) missing
    path.write_bytes(data[:40])
    with pytest.raises(ImageError, match="truncated JPEG"):
        load_image(path)
    path.write_bytes(data[:-2])
    with pytest.raises(ImageError, match="no end-of-image marker"):
        load_image(path)
    path.write_bytes(data + b"\x00" * 16)  # trailing padding after EOI is harmless
    assert load_image(path).shape == (64, 64, 3)


def test_truncated_png_is_reported(tmp_path):
    data = _encode(".png", textured(6, 64))
    path = tmp_path / "cut.png"
    path.write_bytes(data[: len(data) - 20])
    with pytest.raises(ImageError, match="truncated PNG"):
        load_image(path)


@pytest.mark.parametrize(
    "content, reason",
    [(None, "file not found"), (b"", "empty file"), (b"just some notes\n" * 4, "not a decodable image")],
)
def test_missing_empty_and_text_files(tmp_path, content, reason):
    path = tmp_path / "photo.jpg"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ImageError, match=reason) as info:
        load_image(path)
    assert info.value.reason.startswith(reason)
    with pytest.raises(ImageError, match=reason):
        probe_image(path)


# ------------------------------------------------------------------ datasets with bad files


@pytest.fixture
def mixed_folder(tmp_path):
    """Folder dataset: class a has good images and three bad ones; class b is good."""
    write_png(tmp_path / "a" / "0_good.png", textured(1, 20))
    (tmp_path / "a" / "1_text.jpg").write_text("this is not an image")
    cut = _encode(".jpg", textured(2, 40))
    (tmp_path / "a" / "2_cut.jpg").write_bytes(cut[: len(cut) // 2])
    write_png(tmp_path / "a" / "3_good.png", textured(3, 20))
    write_png(tmp_path / "a" / "4_missing.png", textured(4, 20))
    write_png(tmp_path / "b" / "0_good.png", textured(5, 24))
    d = open_dataset(tmp_path)
    (tmp_path / "a" / "4_missing.png").unlink()  # listed, then deleted
    return d


@pytest.mark.parametrize("decode", [True, False])
def test_check_images_reports_each_bad_file(mixed_folder, decode, caplog):
    with caplog.at_level(logging.WARNING):
        problems = check_images(mixed_folder, decode=decode)
    found = {(p.index, p.path.rsplit("/", 1)[1]): p.reason for p in problems}
    assert set(found) == {(1, "1_text.jpg"), (2, "2_cut.jpg"), (4, "4_missing.png")}
    assert found[(2, "2_cut.jpg")].startswith("truncated JPEG")
    assert found[(4, "4_missing.png")] == "file not found"
    assert all(p.path in caplog.text for p in problems)
    assert check_images(mixed_folder, indices=[0, 3, 5]) == []


def test_image_folder_dataset_skips_and_records_bad_images(mixed_folder, caplog):
    ds = ImageFolderDataset(mixed_folder, 16, skip_bad=True)
    with caplog.at_level(logging.WARNING):
        x, label, index = ds[1]  # text file -> truncated jpeg -> next good image (index 3)
    assert index == 3 and label == mixed_folder.labels[3]
    expected = to_tensor(load_image(mixed_folder.abspath(3)), 16)
    torch.testing.assert_close(x, expected)
    assert [(p.index, p.reason.split(" ")[0]) for p in ds.problems] == [(1, "not"), (2, "truncated")]
    assert "1_text.jpg" in caplog.text and "2_cut.jpg" in caplog.text
    _, _, index = ds[4]  # missing -> wraps to class b
    assert index == 5 and len(ds.problems) == 3
    ds[1]
    assert len(ds.problems) == 3  # each bad file reported once
    loader = torch.utils.data.DataLoader(ds, batch_size=6)
    xb, yb, ib = next(iter(loader))
    assert xb.shape == (6, 3, 16, 16) and ib.tolist() == [0, 3, 3, 3, 5, 5]
    assert yb.tolist() == [int(mixed_folder.labels[i]) for i in ib]


def test_image_folder_dataset_raises_without_skip_and_when_nothing_is_readable(mixed_folder, tmp_path):
    strict = ImageFolderDataset(mixed_folder, 16, skip_bad=False)
    assert strict[0][2] == 0
    with pytest.raises(ImageError, match="1_text.jpg"):
        strict[1]
    bad = mixed_folder.subset([1, 2, 4])
    with pytest.raises(ImageError, match="none of the 3 listed images"):
        ImageFolderDataset(bad, 16)[0]


# ---------------------------------------------------------------------- tensors and crops


def test_to_tensor_normalizes_with_imagenet_statistics():
    image = np.empty((10, 30, 3), np.uint8)
    image[:] = (255, 128, 0)
    x = to_tensor(image, 8)
    assert x.shape == (3, 8, 8) and x.dtype == torch.float32
    expected = [(v / 255 - m) / s for v, m, s in zip((255, 128, 0), IMAGENET_MEAN, IMAGENET_STD)]
    torch.testing.assert_close(x.mean(dim=(1, 2)), torch.tensor(expected, dtype=torch.float32))
    rgb = textured(9, 12)
    np.testing.assert_array_equal(denormalize(to_tensor(rgb, None)), rgb)


def test_train_transform_is_deterministic_under_manual_seed():
    image = textured(10, 48)
    t = train_transform(24)
    torch.manual_seed(3)
    a = [t(image) for _ in range(4)]
    torch.manual_seed(3)
    b = [t(image) for _ in range(4)]
    for x, y in zip(a, b):
        assert x.shape == (3, 24, 24)
        torch.testing.assert_close(x, y)
    assert not all(torch.equal(a[0], x) for x in a[1:])


def test_random_crops_stay_in_range_and_flips_happen():
    aug = RandomResizedCropFlip(32)
    torch.manual_seed(0)
    h, w = 60, 90
    areas, aspects = [], []
    for _ in range(400):
        top, left, ch, cw = aug.crop_box(h, w)
        assert 0 <= top and top + ch <= h and 0 <= left and left + cw <= w
        areas.append(ch * cw / (h * w))
        aspects.append(cw / ch)
    assert min(areas) >= 0.3 - 0.03 and max(areas) <= 1.0
    assert np.percentile(areas, 90) - np.percentile(areas, 10) > 0.3  # spread over the range
    assert min(aspects) >= 0.75 - 0.05 and max(aspects) <= 4 / 3 + 0.05
    # flips: a left-right ramp comes out increasing or decreasing, both happen
    ramp = np.tile(np.linspace(0, 255, 90).astype(np.uint8)[None, :, None], (60, 1, 3))
    slopes = {bool((aug(ramp)[0, :, -1] - aug(ramp)[0, :, 0]).mean() > 0) for _ in range(20)}
    assert slopes == {True, False}


def test_dataset_record_checks_lengths():
    with pytest.raises(ValueError, match="inconsistent dataset listing"):
        Dataset(root=".", format="folder", paths=["a", "b"], labels=[0], class_names=["x"],
                split=["train", "train"], boxes=None)


def test_normalize_equals_the_direct_arithmetic():
    """The table look-up gives exactly ``(x / 255 - mean) / std`` for every uint8 value."""
    from dmlviewer.core.data.transforms import IMAGENET_MEAN, IMAGENET_STD, normalize

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(7, 5, 3), dtype=np.uint8)
    image[0, :3, :] = [[0, 0, 0], [255, 255, 255], [128, 1, 254]]
    mean = np.array(IMAGENET_MEAN, dtype=np.float32)
    inv_std = 1.0 / np.array(IMAGENET_STD, dtype=np.float32)
    expected = ((image.astype(np.float32) * np.float32(1.0 / 255.0) - mean) * inv_std).transpose(2, 0, 1)
    got = normalize(image)
    assert got.dtype == torch.float32 and got.shape == (3, 7, 5) and got.is_contiguous()
    np.testing.assert_array_equal(got.numpy(), expected)
