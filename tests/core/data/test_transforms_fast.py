"""The faster preprocessing of issue 32: OpenCV's float area path gives OpenCV's uint8 values,
the device path (run here on the CPU) is within one grey level, and uint8 levels normalized
later are the host's input exactly."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from dmlviewer.core.data.transforms import (IMAGENET_STD, Preprocess, normalize, normalize_on, resize, to_tensor,
                                            to_tensor_on)

SHAPES = [((375, 500), (224, 224)), ((301, 517), (97, 211)), ((1000, 1333), (224, 224)), ((50, 60), (49, 59)),
          ((448, 448), (224, 224)), ((400, 600), (200, 200)), ((20, 20), (10, 10)), ((100, 120), (224, 224)),
          ((300, 200), (150, 400))]


@pytest.mark.parametrize("shape,target", SHAPES)
@pytest.mark.parametrize("levels", [256, 2])  # 2: many ties between grey levels
def test_resize_is_opencvs_uint8_resize(shape, target, levels):
    image = np.random.default_rng(0).integers(0, levels, (*shape, 3), dtype=np.uint8)
    th, tw = target
    interpolation = cv2.INTER_AREA if th < shape[0] and tw < shape[1] else cv2.INTER_LINEAR
    expected = cv2.resize(image, (tw, th), interpolation=interpolation)
    np.testing.assert_array_equal(resize(image, target), expected)
    np.testing.assert_array_equal(to_tensor(image, target).numpy(), normalize(expected).numpy())


@pytest.mark.parametrize("shape,target", SHAPES)
def test_preprocessing_on_a_device_is_within_one_grey_level(shape, target):
    image = np.random.default_rng(1).integers(0, 256, (*shape, 3), dtype=np.uint8)
    host = to_tensor(image, target)
    dev = to_tensor_on(image, target, torch.device("cpu"))
    assert dev.shape == host.shape and dev.dtype == torch.float32
    levels = (dev - host).abs() * torch.tensor(IMAGENET_STD)[:, None, None] * 255
    assert float(levels.max()) <= 1.0 + 1e-3
    if shape[0] % target[0] or shape[1] % target[1]:  # non-integer shrink or growth: mostly equal
        assert float((levels > 1e-3).float().mean()) < 0.2


def test_levels_normalized_later_are_the_hosts_input_and_channels_last():
    rng = np.random.default_rng(2)
    p = Preprocess(64)
    images = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in ((90, 120, 3), (64, 64, 3), (30, 40, 3))]
    batch = torch.stack([p.levels(im) for im in images])
    assert batch.dtype == torch.uint8 and batch.shape == (3, 64, 64, 3)
    x = normalize_on(batch, p.mean, p.std)
    assert x.shape == (3, 3, 64, 64) and x.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(x, torch.stack([p(im) for im in images]), rtol=0, atol=0)
