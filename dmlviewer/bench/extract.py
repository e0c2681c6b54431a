"""``bench extract``: feature-extraction throughput of our pipeline against a bare forward loop.

Ours: :func:`~dmlviewer.core.evaluate.extract_features` over the synthetic demo data (JPEG
decoding and resizing in DataLoader workers, ``inference_mode``, HDF5 writing). Baseline: the
same model and batch size run over the same images already decoded, resized and stacked as
tensors in memory (on a GPU: in the GPU's memory, channels-last, so the bare loop is the
forward passes alone). ``ratio`` = our images/s over the bare loop's (target at least 0.9).
``bare_decoding_images_per_s``: the plainest loop that decodes too (the same loader and
workers, each batch normalized, embedded and brought to the host, nothing written), and
``ratio_to_bare_decoding`` ours over it: what the pipeline costs beyond decoding.
Default: resnet18 at 224 px, batch 64 (``--backbone``, ``--batch-size``) over 800 images of 128 px (on a GPU, where 800 images take a
tenth of a second and the workers' start would be most of it, the listing names each of them
five times: 4,000 images decoded; :func:`repeated`); ``--quick``: small_cnn at
128 px over 200 images. ``loader_images_per_s``: the data loader and the decode stage alone
(decoding, resizing, handing over, normalizing, with the same workers: the input the model gets,
:mod:`~dmlviewer.core.data.decode_stage`), so that when the ratio falls short the slower side
is named by its rate.

``--decode`` (``cpu``, the default, ``device`` or ``auto``): where JPEGs are decoded
(:func:`~dmlviewer.core.evaluate.extract.decodes_on_device`; ``image_decoder`` names the
result). On CUDA, where torchvision can decode on the device, the same run also times the other
decoder (``ours_device_decode_images_per_s`` and ``loader_device_decode_images_per_s`` beside the
workers' OpenCV decoding, or ``..._cpu_decode_...`` beside the device's), so one run compares
both.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from dmlviewer.bench.machine import describe


def repeated(dataset, times: int):
    """``dataset`` with its listing repeated ``times`` times (the same files read again: the
    decoding work of a listing ``times`` as long, without writing more images)."""
    import dataclasses

    import numpy as np

    if times == 1:
        return dataset
    return dataclasses.replace(dataset, paths=list(dataset.paths) * times, labels=np.tile(dataset.labels, times),
                               split=np.tile(dataset.split, times), boxes=np.tile(dataset.boxes, (times, 1)),
                               roles=None if dataset.roles is None else np.tile(dataset.roles, times),
                               branches=None if dataset.branches is None else np.tile(dataset.branches, times))


def run(args) -> dict:
    from dmlviewer.bench import BenchError
    from dmlviewer.core.data import load_image, make_demo_data, open_dataset, to_tensor
    from dmlviewer.core.data.decode_stage import decoded_batches
    from dmlviewer.core.data.device_input import device_decoding_available
    from dmlviewer.core.data.torch_dataset import start_workers
    from dmlviewer.core.data.transforms import normalize_on
    from dmlviewer.core.evaluate.extract import (DEFAULT_DECODE, decodes_on_device, default_workers, extract_features,
                                                 image_decoder, make_loader, persistent_loaders)
    from dmlviewer.core.models import build_model, default_config, resolve_device
    from dmlviewer.core.progress import run_to_end

    quick = bool(getattr(args, "quick", False))
    device = resolve_device(getattr(args, "device", "cpu") or "cpu")
    backbone, size, classes, batch = ("small_cnn", 128, 10, 50) if quick else ("resnet18", 224, 20, 64)
    backbone = getattr(args, "backbone", None) or backbone
    batch = getattr(args, "batch_size", None) or batch  # 1..4096, checked when parsed
    torch.manual_seed(0)
    try:
        model = build_model(default_config(backbone=backbone, image_size=size, dim=512), device).eval()
    except ValueError as exc:
        raise BenchError(f"--backbone: {exc}") from None
    workers = default_workers(device)
    decode = getattr(args, "decode", None) or DEFAULT_DECODE
    on_device_decode = decodes_on_device(device, decode)
    times = 5 if device.type == "cuda" and not quick else 1
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        root = make_demo_data(Path(tmp) / "data", classes=classes, per_class=20 if quick else 40, size=128)
        dataset = repeated(open_dataset(root).select_split("all"), times)
        n = len(dataset)
        # on a GPU the baseline's batches wait there, channels-last: the strictest bare loop, and
        # no gigabytes of host memory in this process while ours runs (every loader worker's
        # fork copies the page tables: 40 ms a worker with 2.4 GB of tensors held, 2026-11-27)
        on_device = device.type == "cuda"
        batches = [torch.stack([to_tensor(load_image(dataset.abspath(i)), size) for i in range(s, min(n, s + batch))])
                   for s in range(0, n, batch)]
        if on_device:
            batches = [x.to(device).contiguous(memory_format=torch.channels_last) for x in batches]

        def bare() -> float:
            start = time.perf_counter()
            with torch.inference_mode():
                for x in batches:
                    model(x.to(device, non_blocking=True))
            sync()
            return time.perf_counter() - start

        def ours(how: str) -> float:
            start = time.perf_counter()
            run_to_end(extract_features(model, dataset, Path(tmp) / "features.h5", batch, device, workers,
                                        decode=how))
            sync()
            return time.perf_counter() - start

        def loader_only(how: str) -> float:
            start = time.perf_counter()
            loader = make_loader(dataset, model.preprocess, batch, device, workers, decode=how)
            with torch.inference_mode():
                for _ in decoded_batches(start_workers(loader), loader.dataset, device):
                    pass
            sync()
            return time.perf_counter() - start

        def bare_decoding() -> float:
            """The plainest loop that decodes: the same loader, each batch normalized, embedded and
            its embeddings brought to the host; no feature file, no progress, no bad-image care."""
            start = time.perf_counter()
            loader = make_loader(dataset, model.preprocess, batch, device, workers)
            with torch.inference_mode():
                for images, _, _ in start_workers(loader):
                    x = images.to(device, non_blocking=True)
                    x = normalize_on(x, model.preprocess.mean, model.preprocess.std) if x.dtype == torch.uint8 else x
                    model(x).embedding.cpu()
            return time.perf_counter() - start

        # the other decoder in the same run (CUDA, where torchvision decodes on the device)
        other = "cpu" if on_device_decode else "device"
        compare = device.type == "cuda" and device_decoding_available()
        bare()  # warm-up (allocator, kernels)
        bare_s, ours_s, ours_other_s, bare_decoding_s = [], [], [], []
        # one process, several passes: each loader's workers are forked once (as in a training
        # run's evaluations), so that the passes time decoding, not the workers' start
        with persistent_loaders():
            for _ in range(2):  # alternate, so that load from other processes hits all alike
                ours_s.append(ours(decode))
                if compare:
                    ours_other_s.append(ours(other))
                bare_s.append(bare())
                bare_decoding_s.append(bare_decoding())
            loader_s = loader_only(decode)
            loader_other_s = loader_only(other) if compare else None
    ours_ips, bare_ips = n / min(ours_s), n / min(bare_s)
    result = {
        "benchmark": "extract",
        "model": f"{backbone}@{size}", "images": n, "batch_size": batch, "num_workers": workers,
        "device": str(device), "decode": decode, "image_decoder": image_decoder(device, decode),
        "ours_images_per_s": round(ours_ips, 2),
        "bare_images_per_s": round(bare_ips, 2),
        "loader_images_per_s": round(n / loader_s, 2),
        "bare_decoding_images_per_s": round(n / min(bare_decoding_s), 2),
        "ratio": round(ours_ips / bare_ips, 3),
        "ratio_to_bare_decoding": round(ours_ips * min(bare_decoding_s) / n, 3),
        "machine": describe(),
    }
    if compare:
        result[f"ours_{other}_decode_images_per_s"] = round(n / min(ours_other_s), 2)
        result[f"ratio_{other}_decode"] = round(n / min(ours_other_s) / bare_ips, 3)
        result[f"loader_{other}_decode_images_per_s"] = round(n / loader_other_s, 2)
    return result
