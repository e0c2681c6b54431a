"""The decode stage (``core.data.decode_stage``): given the CPU decoder it yields exactly the
CPU path's tensors (PNG, grayscale, CMYK JPEG, odd sizes), extraction through it writes the
features of the model run on those tensors, it prepares the next batch while the consumer holds
the current one, and an error or an early stop ends its thread."""

from __future__ import annotations

import threading
import time

import cv2
import numpy as np
import pytest
import torch

from dmlviewer.core.progress import run_to_end


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A demo dataset whose first images are replaced by a PNG, a grayscale JPEG, a grayscale
    PNG, a CMYK JPEG and JPEGs of odd sizes (smaller and larger than the input)."""
    from PIL import Image

    from dmlviewer.core.data import make_demo_data, open_dataset

    root = make_demo_data(tmp_path_factory.mktemp("stage") / "data", classes=3, per_class=6, size=64, seed=3)
    dataset = open_dataset(root)
    source = [cv2.imread(str(dataset.abspath(i))) for i in range(8)]
    gray = cv2.cvtColor(source[1], cv2.COLOR_BGR2GRAY)
    written = {
        "as.png": lambda p: cv2.imwrite(p, source[0]),
        "gray.jpg": lambda p: cv2.imwrite(p, gray),
        "gray.png": lambda p: cv2.imwrite(p, cv2.cvtColor(source[2], cv2.COLOR_BGR2GRAY)),
        "cmyk.jpg": lambda p: Image.fromarray(source[3][:, :, ::-1]).convert("CMYK").save(p, quality=92),
        "odd_small.jpg": lambda p: cv2.imwrite(p, cv2.resize(source[4], (37, 23))),
        "odd_large.jpg": lambda p: cv2.imwrite(p, cv2.resize(source[5], (131, 77))),
        "odd_tall.png": lambda p: cv2.imwrite(p, cv2.resize(source[6], (29, 97))),
    }
    for k, (name, write) in enumerate(written.items()):
        write(str(root / name))
        dataset.paths[k] = name
    cmyk = (root / "cmyk.jpg").read_bytes()
    sof = cmyk.find(b"\xff\xc0")
    assert cmyk[sof + 9] == 4  # four components: really CMYK
    return dataset


def _model(size: int):
    from dmlviewer.core.models import build_model, default_config

    torch.manual_seed(0)
    return build_model(default_config(backbone="small_cnn", dim=16, image_size=size)).eval()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("size", [48, 64, 100])
def test_the_stage_with_the_cpu_decoder_yields_the_cpu_paths_tensors(mixed, workers, size):
    from dmlviewer.core.data.decode_stage import CPU_DECODER, decoded_batches, decoder_of
    from dmlviewer.core.data.torch_dataset import ImageFolderDataset, start_workers
    from dmlviewer.core.data.transforms import Preprocess
    from dmlviewer.core.evaluate.extract import make_loader

    preprocess, cpu = Preprocess(size), torch.device("cpu")
    expected = ImageFolderDataset(mixed, preprocess)  # the CPU path: OpenCV, then to_tensor
    loader = make_loader(mixed, preprocess, 5, cpu, workers, decode="cpu")
    assert decoder_of(loader.dataset) is CPU_DECODER
    seen = []
    for x, index in decoded_batches(start_workers(loader), loader.dataset, cpu):
        assert x.dtype == torch.float32 and x.shape[1:] == (3, size, size)
        for row, i in zip(x, index.tolist()):
            assert torch.equal(row, expected[i][0]), mixed.paths[i]
            seen.append(i)
    assert seen == list(range(len(mixed)))


def test_the_stage_normalizes_handed_over_levels_as_the_cpu_path_does(mixed):
    """The accelerator's form of the CPU decoder (uint8 levels from the workers, normalized by
    the stage) run on the CPU: the same float32 values as the host's normalization."""
    from dmlviewer.core.data.decode_stage import CPU_DECODER, decoded_batches
    from dmlviewer.core.data.torch_dataset import ImageFolderDataset
    from dmlviewer.core.data.transforms import Preprocess

    preprocess = Preprocess(48)
    levels = CPU_DECODER.images(mixed, preprocess, torch.device("cuda"))  # ImageLevels: the dataset only
    loader = torch.utils.data.DataLoader(levels, batch_size=4, num_workers=0)
    expected = ImageFolderDataset(mixed, preprocess)
    for x, index in decoded_batches(iter(loader), levels, torch.device("cpu")):
        for row, i in zip(x, index.tolist()):
            assert torch.equal(row, expected[i][0])


def test_extraction_through_the_stage_writes_the_models_features_of_the_cpu_tensors(mixed, tmp_path):
    from dmlviewer.core.data.torch_dataset import ImageFolderDataset
    from dmlviewer.core.evaluate import read_features
    from dmlviewer.core.evaluate.extract import extract_features

    model, batch = _model(48), 4
    run_to_end(extract_features(model, mixed, tmp_path / "f.h5", batch_size=batch, num_workers=2, decode="cpu"))
    stored = read_features(tmp_path / "f.h5")
    tensors = ImageFolderDataset(mixed, model.preprocess)
    with torch.inference_mode():
        outs = [model(torch.stack([tensors[i][0] for i in range(s, min(len(mixed), s + batch))]))
                for s in range(0, len(mixed), batch)]
    assert stored.paths == list(mixed.paths)
    np.testing.assert_array_equal(stored.embeddings_raw, torch.cat([o.embedding_raw for o in outs]).numpy())
    np.testing.assert_array_equal(stored.embeddings, torch.cat([o.embedding for o in outs]).numpy())


def test_the_jpeg_decoder_through_the_stage_falls_back_per_file(mixed):
    """``decode="device"`` on the CPU (torchvision's libjpeg-turbo): JPEGs come as bytes and are
    decoded by the stage, PNG and CMYK by OpenCV in the workers (exactly the CPU path's levels),
    the RGB and grayscale JPEGs within a grey level of it (the resizing's arithmetic)."""
    from dmlviewer.core.data.decode_stage import JPEG_DECODER, decoded_batches, decoder_of
    from dmlviewer.core.data.torch_dataset import ImageFolderDataset
    from dmlviewer.core.evaluate.extract import make_loader

    model, cpu = _model(48), torch.device("cpu")
    loader = make_loader(mixed, model.preprocess, 4, cpu, 0, decode="device")
    assert decoder_of(loader.dataset) is JPEG_DECODER
    expected = ImageFolderDataset(mixed, model.preprocess)
    step = 1.0 / 255 / min(model.preprocess.std) * 1.0001  # one grey level, normalized
    for x, index in decoded_batches(iter(loader), loader.dataset, cpu):
        for row, i in zip(x, index.tolist()):
            want = expected[i][0]
            if mixed.paths[i].endswith(".png") or mixed.paths[i] == "cmyk.jpg":
                assert torch.equal(row, want), mixed.paths[i]
            else:
                assert (row - want).abs().max() <= step, mixed.paths[i]


def test_the_stage_prepares_the_next_batch_while_the_consumer_holds_one(mixed):
    from dmlviewer.core.data.decode_stage import CPU_DECODER, DEPTH, decoded_batches

    images = CPU_DECODER.images(mixed, 32, torch.device("cpu"))
    pulled = []
    second = threading.Event()

    def source():
        for k in range(10):
            pulled.append(k)
            if k == 1:
                second.set()
            yield torch.stack([images[k][0]]), torch.tensor([0]), torch.tensor([k])

    stage = decoded_batches(source(), images, torch.device("cpu"))
    x, index = next(stage)
    assert index.tolist() == [0]
    assert second.wait(30), "the stage did not prepare batch 1 while batch 0 was held"
    time.sleep(0.2)
    # the one held, DEPTH ready, one waiting to be queued: bounded, not the whole source
    assert len(pulled) <= 2 + DEPTH
    assert [int(i) for _, i in stage] == list(range(1, 10))


def test_an_error_in_the_stage_reaches_the_consumer_and_an_early_stop_ends_its_thread(mixed):
    from dmlviewer.core.data.decode_stage import CPU_DECODER, decoded_batches

    images = CPU_DECODER.images(mixed, 32, torch.device("cpu"))

    def failing():
        yield torch.stack([images[0][0]]), torch.tensor([0]), torch.tensor([0])
        raise OSError("disk gone")

    stage = decoded_batches(failing(), images, torch.device("cpu"))
    next(stage)
    with pytest.raises(OSError, match="disk gone"):
        next(stage)

    def endless():
        k = 0
        while True:
            yield torch.stack([images[0][0]]), torch.tensor([0]), torch.tensor([k])
            k += 1

    stage = decoded_batches(endless(), images, torch.device("cpu"))
    next(stage)
    stage.close()
    assert not [t for t in threading.enumerate() if t.name == "decode-stage"]


def test_a_cancelled_extraction_stops_the_stage(mixed, tmp_path):
    from dmlviewer.core.evaluate.extract import extract_features
    from dmlviewer.core.progress import CancelToken, Cancelled

    token = CancelToken()
    events = extract_features(_model(32), mixed, tmp_path / "f.h5", batch_size=2, num_workers=0, cancel=token)
    next(events)
    token.cancel()
    with pytest.raises(Cancelled):
        run_to_end(events)
    assert not (tmp_path / "f.h5").exists()
    assert not [t for t in threading.enumerate() if t.name == "decode-stage"]


def test_persistent_loaders_fork_the_workers_once_for_several_passes(mixed, tmp_path):
    from dmlviewer.core.evaluate import read_features
    from dmlviewer.core.evaluate.extract import extract_features, make_loader, persistent_loaders

    model, cpu = _model(32), torch.device("cpu")

    def workers(loader) -> list[int]:
        return [w.pid for w in loader._iterator._workers]

    with persistent_loaders():
        run_to_end(extract_features(model, mixed, tmp_path / "a.h5", batch_size=4, num_workers=2))
        loader = make_loader(mixed, model.preprocess, 4, cpu, 2)  # the one the extraction used
        first = workers(loader)
        run_to_end(extract_features(model, mixed, tmp_path / "b.h5", batch_size=4, num_workers=2))
        assert make_loader(mixed, model.preprocess, 4, cpu, 2) is loader and workers(loader) == first
        assert make_loader(mixed, model.preprocess, 5, cpu, 2) is not loader  # other settings: its own
        processes = list(loader._iterator._workers)
    assert all(not p.is_alive() for p in processes)  # ended with the block
    a, b = read_features(tmp_path / "a.h5"), read_features(tmp_path / "b.h5")
    np.testing.assert_array_equal(a.embeddings_raw, b.embeddings_raw)
    assert a.paths == b.paths == list(mixed.paths)
    outside = make_loader(mixed, model.preprocess, 4, cpu, 2)
    assert outside is not loader and not outside.persistent_workers
