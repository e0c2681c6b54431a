"""The CUDA paths (issue 32): training with and without mixed precision, evaluation, pair
preparation on the device (completeness, hover data, preprocessing), the out-of-memory message
and torchrun with NCCL. Marked ``gpu`` and skipped without CUDA, so CI on a CPU skips them;
``packaging/gpu_check.sh`` runs them on a GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from dmlviewer.core.data import make_demo_data

    return make_demo_data(tmp_path_factory.mktemp("gpu") / "data", classes=6, per_class=8, size=64, seed=1)


def _train_args(data, out, *extra: str) -> list[str]:
    return ["train", "--dataset", str(data), "--out", str(out), "--epochs", "1", "--steps-per-epoch", "4",
            "--image-size", "64", "--dim", "32", "--classes-per-batch", "3", "--images-per-class", "4",
            "--lr", "1e-3", "--num-workers", "0", "--device", "cuda", "--log-every", "1", "--seed", "0", *extra]


@pytest.mark.parametrize("amp", ["on", "off"])
def test_training_steps_on_cuda(data, tmp_path, amp):
    from dmlviewer.cli import main
    from dmlviewer.core.models import load_checkpoint

    assert main(_train_args(data, tmp_path / "run", "--amp", amp)) == 0
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in lines if x["kind"] == "step"]
    assert len(losses) == 4 and all(np.isfinite(losses))
    model = load_checkpoint(tmp_path / "run" / "checkpoint.pt", "cpu")[0]
    assert all(torch.isfinite(p).all() for p in model.parameters())


def _model(device: str, backbone: str = "small_cnn", **kw):
    from dmlviewer.core.models import build_model, default_config

    torch.manual_seed(0)
    return build_model(default_config(backbone=backbone, image_size=64, dim=32, **kw), device).eval()


@pytest.mark.parametrize("workers", [0, 2])
def test_evaluation_on_cuda_matches_the_cpu(data, tmp_path, workers):
    """Features extracted on the GPU (uint8 images handed over, normalized there, results copied
    back one batch late) are the CPU's rows, within cuDNN's TF32 convolutions. (The workers'
    OpenCV decoding: nvJPEG's is the next test.)"""
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.evaluate import read_features
    from dmlviewer.core.evaluate.extract import extract_features
    from dmlviewer.core.progress import run_to_end

    dataset = open_dataset(data).select_split("all")
    files = {}
    for device in ("cpu", "cuda"):
        files[device] = tmp_path / f"{device}.h5"
        run_to_end(extract_features(_model(device), dataset, files[device], batch_size=10, device=device,
                                    num_workers=workers if device == "cuda" else 0, decode="cpu"))
    cpu, gpu = read_features(files["cpu"]), read_features(files["cuda"])
    assert list(gpu.paths) == list(cpu.paths) and np.array_equal(gpu.labels, cpu.labels)
    np.testing.assert_allclose(gpu.embeddings, cpu.embeddings, atol=2e-3)
    np.testing.assert_allclose(gpu.embeddings_raw, cpu.embeddings_raw, rtol=2e-3, atol=2e-3)
    assert gpu.attrs["image_decoder"] == cpu.attrs["image_decoder"] == "opencv"


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("size", [64, 48])
def test_nvjpeg_features_are_the_opencv_ones(data, tmp_path, workers, size):
    """JPEGs decoded by batched nvJPEG and resized on the GPU (``decode="device"``, through the
    decode stage's thread and stream: ``core.data.decode_stage``) give the workers' OpenCV features up to the decoders' grey-level differences
    (:func:`test_nvjpeg_levels_are_the_opencv_ones_within_a_few_grey_levels`): each row's cosine
    with OpenCV's at least 0.999 (an untrained 32-d small_cnn at 48-64 px, the most sensitive
    case: on an H100, 2026-11-28, 4 of 1,504 values differed by 0.011-0.016); a PNG goes through
    the workers, a truncated JPEG is left out, and two runs agree exactly (the decoder's outputs
    are not overwritten by the previous batch's queued work: device_input._decoder_stream)."""
    import shutil

    import cv2

    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.evaluate import read_features
    from dmlviewer.core.evaluate.extract import extract_features, image_decoder
    from dmlviewer.core.models import build_model, default_config
    from dmlviewer.core.progress import run_to_end

    copy = shutil.copytree(data, tmp_path / "data")
    dataset = open_dataset(copy).select_split("all")
    cv2.imwrite(str(copy / "as.png"), cv2.imread(str(dataset.abspath(1))))
    (copy / "truncated.jpg").write_bytes(dataset.abspath(4).read_bytes()[:-100])
    dataset.paths[1], dataset.paths[4] = "as.png", "truncated.jpg"
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", image_size=size, dim=32), "cuda").eval()
    cpu, nv, again = (read_features(run_to_end(extract_features(
        model, dataset, tmp_path / f"{k}.h5", batch_size=16, device="cuda", num_workers=workers,
        decode=decode))["path"]) for k, decode in enumerate(("cpu", "device", "device")))
    assert nv.paths == cpu.paths == again.paths and "truncated.jpg" not in nv.paths and "as.png" in nv.paths
    assert len(nv.paths) == len(dataset) - 1
    assert np.isfinite(nv.embeddings).all()
    cosine = (nv.embeddings * cpu.embeddings).sum(1)  # both L2-normalized
    assert cosine.min() >= 0.999, (cosine.min(), np.abs(nv.embeddings - cpu.embeddings).max())
    np.testing.assert_allclose(nv.embeddings, again.embeddings, atol=1e-5)
    assert nv.attrs["image_decoder"] == again.attrs["image_decoder"] == "nvjpeg"
    assert cpu.attrs["image_decoder"] == "opencv" and image_decoder("cuda", "auto") == "nvjpeg"


@pytest.mark.parametrize("size", [64, 48])
def test_nvjpeg_levels_are_the_opencv_ones_within_a_few_grey_levels(data, size):
    """The network input made by the decode stage from JPEGs decoded by nvJPEG and resized on
    the GPU, against the one it makes from the workers' OpenCV decoding and resizing, value by
    value in grey levels: on average within 2.5, and fewer than 5 % of the values more than 8
    levels apart. The two decoders' IDCT and chroma upsampling differ, most at the demo images'
    saturated colour edges: on an H100 (2026-11-28, before the stage) the mean was 1.67 levels
    at 64 px (decoding alone), 2.9 % of the values over 8 levels apart, at most 64; at 48 px
    0.97, 1.1 %, 41. A swapped red and blue (17 levels, 49 %) or a one-row shift (10 levels,
    33 %) of these images fails it."""
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.data.decode_stage import decoded_batches
    from dmlviewer.core.data.torch_dataset import start_workers
    from dmlviewer.core.data.transforms import Preprocess
    from dmlviewer.core.evaluate.extract import make_loader

    dataset = open_dataset(data).select_split("all")
    preprocess = Preprocess(size)
    dev = torch.device("cuda")
    inputs = {}
    for decode in ("cpu", "device"):
        loader = make_loader(dataset, preprocess, 16, dev, 2, decode=decode)
        batches = list(decoded_batches(start_workers(loader), loader.dataset, dev))
        assert all((index >= 0).all() for _, index in batches)
        inputs[decode] = (torch.cat([x.cpu() for x, _ in batches]), torch.cat([i for _, i in batches]))
    assert torch.equal(inputs["cpu"][1], inputs["device"][1])
    std = torch.tensor(preprocess.std)[None, :, None, None]
    diff = ((inputs["device"][0] - inputs["cpu"][0]).abs() * std * 255).round().flatten()
    stats = {"mean": float(diff.mean()), "over 8": float((diff > 8).float().mean()), "max": float(diff.max())}
    assert stats["mean"] <= 2.5 and stats["over 8"] < 0.05, stats


def test_evaluate_command_on_cuda(data, tmp_path, capsys):
    from dmlviewer.cli import main

    assert main(_train_args(data, tmp_path / "run", "--amp", "off")) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run" / "checkpoint.pt"), "--dataset", str(data),
                 "--out", str(tmp_path / "f.h5"), "--json", "--num-workers", "2", "--device", "cuda"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert 0.0 <= metrics["recall@1"] <= 1.0 and metrics["num_queries"] > 0


@pytest.mark.parametrize("backbone,kw", [("small_cnn", {}), ("small_cnn", {"pooling": "gmp", "grouping": "a", "groups": 4}),
                                         ("resnet18", {})])
def test_pair_prepared_on_the_device_is_complete_and_matches_the_cpu(backbone, kw):
    from dmlviewer.core.explain import explain_pair

    rng = np.random.default_rng(0)
    q, r = (rng.integers(0, 256, (75, 100, 3), dtype=np.uint8) for _ in range(2))
    gpu = explain_pair(_model("cuda", backbone, **kw), q, r, "cuda")
    cpu = explain_pair(_model("cpu", backbone, **kw), q, r, "cpu")
    total = float(gpu.point_to_point.sum(dtype=np.float64)) + gpu.bias_query + gpu.bias_reference + gpu.bias_both
    assert total == pytest.approx(gpu.similarity, abs=1e-5)  # Eq. 3 on the device
    assert gpu.similarity == pytest.approx(cpu.similarity, abs=2e-3)
    np.testing.assert_allclose(gpu.point_to_point, cpu.point_to_point, atol=2e-3)
    for method in ("decomposition", "decomposition_bias"):
        for side in ("query", "reference"):
            np.testing.assert_allclose(gpu.overall(method, side), cpu.overall(method, side), atol=2e-3)


def test_hover_data_prepared_on_the_device():
    """The hover rows (the tensor and its transpose) arrive on the host in one transfer, as the
    renderer needs them: float32, C-contiguous, read-only, the transpose of each other."""
    from dmlviewer.core.explain import explain_pair

    rng = np.random.default_rng(1)
    q, r = rng.integers(0, 256, (90, 120, 3), dtype=np.uint8), rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    e = explain_pair(_model("cuda"), q, r, "cuda")
    rows_q, rows_r = e._rows["query"], e._rows["reference"]
    assert rows_q.dtype == rows_r.dtype == np.float32
    assert rows_q.flags.c_contiguous and rows_r.flags.c_contiguous and not rows_q.flags.writeable
    np.testing.assert_array_equal(rows_r, rows_q.T)
    partial = e.partial_map("reference", 30.0, 20.0)
    assert partial.shape == e.grid_query and np.isfinite(partial).all()
    rgba = e.hover_renderer("reference").render(30.0, 20.0)
    assert rgba.shape[:2] == e.image_shape_query


@pytest.mark.parametrize("shape,size", [((375, 500), 224), ((448, 448), 224), ((50, 70), 96), ((120, 80), (64, 160))])
def test_preprocessing_on_the_device_is_the_hosts(shape, size):
    from dmlviewer.core.data.transforms import IMAGENET_STD, to_tensor

    image = np.random.default_rng(2).integers(0, 256, (*shape, 3), dtype=np.uint8)
    host, dev = to_tensor(image, size), to_tensor(image, size, device="cuda").cpu()
    assert dev.shape == host.shape
    levels = (dev - host).abs() * torch.tensor(IMAGENET_STD)[:, None, None] * 255
    assert float(levels.max()) <= 1.0 + 1e-3  # within one grey level (ties, OpenCV's fixed point)
    assert float((levels > 1e-3).float().mean()) < 0.5


def test_out_of_memory_is_one_clear_line(data, tmp_path, capsys):
    """A real CUDA out-of-memory (the GPU's memory taken first) ends training with one line."""
    from dmlviewer.cli import main

    free, _ = torch.cuda.mem_get_info()
    hog = []
    try:
        while free > 64 << 20:
            try:
                hog.append(torch.empty(free - (32 << 20), dtype=torch.uint8, device="cuda"))
            except torch.cuda.OutOfMemoryError:
                hog.append(torch.empty(free // 2, dtype=torch.uint8, device="cuda"))
            free, _ = torch.cuda.mem_get_info()
        capsys.readouterr()
        code = main(_train_args(data, tmp_path / "run", "--amp", "off", "--image-size", "256"))
    finally:
        del hog
        torch.cuda.empty_cache()
    err = capsys.readouterr().err
    assert code != 0
    assert "out of memory" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "out of memory" in line]) == 1


def test_torchrun_with_nccl_on_the_gpus_present(data, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    n = torch.cuda.device_count()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(n),
                           "--master_port", str(port), "-m", "dmlviewer", *_train_args(data, tmp_path / "run", "--amp", "on")],
                          capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "checkpoint.pt").exists()
    assert "nccl" in proc.stderr.lower() or n == 1
