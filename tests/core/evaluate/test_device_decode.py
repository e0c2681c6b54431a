"""JPEGs decoded in the main process by ``torchvision.io.decode_jpeg`` (``decode="device"``),
run here on the CPU: the same features as the workers' OpenCV decoding, the fallbacks (PNG,
CMYK, an image the decoder refuses) and the bad-image policy (rows consistent, paths logged)."""

from __future__ import annotations

import logging
import shutil

import cv2
import numpy as np
import pytest
import torch

from dmlviewer.core.progress import run_to_end


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from dmlviewer.core.data import make_demo_data

    return make_demo_data(tmp_path_factory.mktemp("decode") / "data", classes=4, per_class=6, size=64, seed=2)


def _model(size: int):
    from dmlviewer.core.models import build_model, default_config

    torch.manual_seed(0)
    return build_model(default_config(backbone="small_cnn", grouping="c", groups=2, dim=16, image_size=size)).eval()


def _extract(model, dataset, path, decode: str, workers: int = 0, batch_size: int = 5):
    from dmlviewer.core.evaluate import extract_features, read_features

    run_to_end(extract_features(model, dataset, path, batch_size=batch_size, num_workers=workers, decode=decode))
    return read_features(path)


def _without_dqt(data: bytes) -> bytes:
    """A JPEG whose header passes the byte checks but that no decoder reads (no quantization
    tables)."""
    out, pos = bytearray(data[:2]), 2
    while True:
        marker, length = data[pos + 1], (data[pos + 2] << 8) | data[pos + 3]
        if marker == 0xDA:
            return bytes(out + data[pos:])
        if marker != 0xDB:
            out += data[pos:pos + 2 + length]
        pos += 2 + length


def _sof(data: bytes) -> int:
    return min(i for i in (data.find(b"\xff\xc0"), data.find(b"\xff\xc2")) if i >= 0)


# size 64: the demo images are 64 px, no resize: only the decoding differs, and libjpeg-turbo
# gives OpenCV's pixels, so the features agree to float rounding (measured 1.3e-7; the device
# path's input is channels-last). Resizing on the device is to_tensor_on's arithmetic, within one
# grey level of OpenCV's resize (up to 12 % of the pixels one level apart on the demo images):
# features within 1.1e-3 measured at 32, 48 and 100 px (2026-11-27), checked against 3e-3.
@pytest.mark.parametrize("size, atol", [(64, 1e-5), (48, 3e-3), (100, 3e-3)])
def test_device_decoding_gives_the_opencv_features(root, tmp_path, size, atol):
    from dmlviewer.core.data import open_dataset

    dataset, model = open_dataset(root), _model(size)
    cpu = _extract(model, dataset, tmp_path / "cpu.h5", "cpu")
    dev = _extract(model, dataset, tmp_path / "device.h5", "device")
    assert dev.paths == cpu.paths == dataset.paths and np.array_equal(dev.labels, cpu.labels)
    np.testing.assert_allclose(dev.embeddings, cpu.embeddings, atol=atol)
    np.testing.assert_allclose(dev.embeddings_raw, cpu.embeddings_raw, atol=atol)
    np.testing.assert_allclose(dev.groups, cpu.groups, atol=atol)
    assert dev.attrs["image_decoder"] == cpu.attrs["image_decoder"] == "opencv"


def test_the_loader_hands_over_jpeg_bytes_and_packs_a_batch(root):
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.data.device_input import EncodedBatch, EncodedImages, ImageLevels
    from dmlviewer.core.evaluate.extract import make_loader

    dataset, model = open_dataset(root), _model(64)
    cpu = torch.device("cpu")
    loader = make_loader(dataset, model.preprocess, 4, cpu, num_workers=0, decode="device")
    assert isinstance(loader.dataset, EncodedImages)
    batch, labels, index = next(iter(loader))
    assert isinstance(batch, EncodedBatch) and batch.encoded.all() and len(batch.levels) == 0
    jpegs = batch.jpegs()
    assert [bytes(j.numpy()) for j in jpegs] == [dataset.abspath(i).read_bytes() for i in range(4)]
    assert index.tolist() == [0, 1, 2, 3] and labels.tolist() == dataset.labels[:4].tolist()
    for decode in ("cpu", "auto"):  # on the CPU "auto" is the workers' OpenCV decoding
        assert type(make_loader(dataset, model.preprocess, 4, cpu, 0, decode=decode).dataset).__name__ == \
            "ImageFolderDataset"
    assert type(make_loader(dataset, model.preprocess, 4, torch.device("cuda"), 0, decode="cpu").dataset) is ImageLevels


@pytest.fixture()
def mixed(root, tmp_path):
    """The first 10 images, among them a PNG, a CMYK JPEG, a truncated JPEG and a JPEG no
    decoder reads; returns ``(dataset, {kind: position})``."""
    from dmlviewer.core.data import open_dataset

    copy = shutil.copytree(root, tmp_path / "data")  # the files must be inside the dataset folder
    dataset = open_dataset(copy).subset(np.arange(10))
    source = [dataset.abspath(i) for i in range(10)]
    kinds = {"png": 1, "cmyk": 3, "truncated": 5, "undecodable": 6}
    cv2.imwrite(str(copy / "as.png"), cv2.imread(str(source[1])))
    (copy / "truncated.jpg").write_bytes(source[5].read_bytes()[:-200])
    (copy / "undecodable.jpg").write_bytes(_without_dqt(source[6].read_bytes()))
    try:
        from PIL import Image

        Image.open(source[3]).convert("CMYK").save(copy / "cmyk.jpg", quality=95)
    except ImportError:  # PIL writes CMYK JPEGs; without it the copy stays an RGB JPEG
        shutil.copy(source[3], copy / "cmyk.jpg")
    for kind, i in kinds.items():
        dataset.paths[i] = {"png": "as.png"}.get(kind, f"{kind}.jpg")
    return dataset, kinds


def test_device_decodable_jpeg_reads_the_start_of_frame(root, mixed):
    from dmlviewer.core.data.images import device_decodable_jpeg

    image = cv2.imread(str(mixed[0].abspath(0)))
    baseline = cv2.imencode(".jpg", image)[1].tobytes()
    progressive = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()
    gray = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_BGR2GRAY))[1].tobytes()
    assert all(device_decodable_jpeg(d) for d in (baseline, progressive, gray))
    sof = _sof(baseline)
    four = bytearray(baseline)
    four[sof + 9] = 4  # components
    twelve = bytearray(baseline)
    twelve[sof + 4] = 12  # precision
    lossless = bytearray(baseline)
    lossless[sof + 1] = 0xC3
    png = cv2.imencode(".png", image)[1].tobytes()
    assert not any(device_decodable_jpeg(bytes(d)) for d in (four, twelve, lossless, png, b"\xff\xd8\xff"))
    cmyk = mixed[0].abspath(mixed[1]["cmyk"]).read_bytes()
    if cmyk[_sof(cmyk) + 9] == 4:
        assert not device_decodable_jpeg(cmyk)


@pytest.mark.parametrize("workers", [0, 1])
def test_fallbacks_and_bad_images_keep_the_rows_consistent(mixed, tmp_path, caplog, workers):
    from dmlviewer.core.data.device_input import EncodedImages

    dataset, kinds = mixed
    model = _model(48)
    images = EncodedImages(dataset, model.preprocess)
    assert [images[i][0].dim() for i in (0, kinds["png"], kinds["cmyk"], kinds["undecodable"])] == [1, 3, 3, 1]
    with caplog.at_level(logging.WARNING):
        dev = _extract(model, dataset, tmp_path / "device.h5", "device", workers, batch_size=4)
    messages = [r.getMessage() for r in caplog.records if "skipping bad image" in r.getMessage()]
    cpu = _extract(model, dataset, tmp_path / "cpu.h5", "cpu", 0, batch_size=4)
    bad = [kinds["truncated"], kinds["undecodable"]]
    keep = [i for i in range(len(dataset)) if i not in bad]
    assert dev.paths == cpu.paths == [dataset.paths[i] for i in keep]
    np.testing.assert_array_equal(dev.labels, dataset.labels[keep])
    np.testing.assert_allclose(dev.embeddings, cpu.embeddings, atol=3e-3)
    # the PNG and the CMYK JPEG come from the workers' OpenCV path in both runs: the same input
    for kind in ("png", "cmyk"):
        row = keep.index(kinds[kind])
        np.testing.assert_allclose(dev.embeddings_raw[row], cpu.embeddings_raw[row], atol=1e-5)
    # the JPEG no decoder reads is refused in the main process (whatever the workers), the
    # truncated one by the byte check in a worker (logged in that process)
    logged = [dataset.paths[i] for i in (bad if workers == 0 else bad[1:])]
    # once each, although the truncated image's successor (the undecodable one) stands in its place too
    assert sorted(p for m in messages for p in logged if p in m) == sorted(logged), messages


def test_an_image_the_device_refuses_is_decoded_by_opencv(root, tmp_path, monkeypatch):
    """The batched call fails, then the single call for one image: that image is decoded on the
    host, the others one by one; nothing is left out."""
    import torchvision.io

    from dmlviewer.core.data import open_dataset

    dataset, model = open_dataset(root).subset(np.arange(8)), _model(48)
    refused = len(dataset.abspath(2).read_bytes())
    real = torchvision.io.decode_jpeg
    calls = {"list": 0, "single": 0}

    def picky(data, *args, **kwargs):
        if isinstance(data, list):
            calls["list"] += 1
            raise RuntimeError("batched decoding unavailable")
        calls["single"] += 1
        if len(data) == refused:
            raise RuntimeError("unsupported JPEG")
        return real(data, *args, **kwargs)

    monkeypatch.setattr(torchvision.io, "decode_jpeg", picky)
    dev = _extract(model, dataset, tmp_path / "device.h5", "device", batch_size=4)
    monkeypatch.undo()
    cpu = _extract(model, dataset, tmp_path / "cpu.h5", "cpu", batch_size=4)
    assert calls == {"list": 2, "single": 8}
    assert dev.paths == cpu.paths == dataset.paths
    np.testing.assert_allclose(dev.embeddings, cpu.embeddings, atol=3e-3)


def test_decode_choice_and_the_recorded_decoder():
    from dmlviewer.core.data.device_input import device_decoding_available
    from dmlviewer.core.evaluate.extract import decodes_on_device, image_decoder

    assert not decodes_on_device("cpu") and not decodes_on_device("cpu", "cpu") and decodes_on_device("cpu", "device")
    assert not decodes_on_device("cuda") and not decodes_on_device("cuda", "cpu")  # the default: the workers
    assert decodes_on_device("cuda", "auto") is device_decoding_available()
    with pytest.raises(ValueError, match="decode must be one of"):
        decodes_on_device("cpu", "gpu")
    assert image_decoder("cpu", "device") == image_decoder("cuda", "cpu") == "opencv"
    if device_decoding_available():
        assert image_decoder("cuda", "auto") == image_decoder("cuda", "device") == "nvjpeg"
        assert image_decoder("cuda") == "opencv"
        assert image_decoder("cuda", "device", np.array(["query", "reference"], dtype=object)) == "opencv"


def test_levels_on_a_batch_is_levels_on_each_image(root):
    from dmlviewer.core.data import load_image, open_dataset
    from dmlviewer.core.data.transforms import levels_on, resize

    dataset = open_dataset(root)
    images = np.stack([load_image(dataset.abspath(i)) for i in range(4)])
    for size in (48, 32, 100, (40, 56), None):
        batch = levels_on(torch.from_numpy(images), size)
        assert batch.dtype == torch.uint8
        for k, image in enumerate(images):
            one = levels_on(image, size)
            assert torch.equal(batch[k], one)
            if size is not None:  # to_tensor_on's arithmetic: within a grey level of OpenCV's resize
                assert np.abs(one.numpy().astype(int) - resize(image, size)).max() <= 1
