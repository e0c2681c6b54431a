"""Where the time goes on a CUDA GPU (issue 32), printed as short tables (run by gpu_check.sh):

1. pair preparation (resnet50, 500x375 images): torch.profiler's host-side operators and the
   synchronising CUDA calls per prepared pair, with the bare forward's time beside;
2. extraction (resnet50 at 224 px, batch 128, 800 demo JPEGs listed five times): ours at several worker counts,
   the data loader alone at the same counts, the bare loop on preloaded tensors, and a cProfile
   of the main process during one extraction;
3. nvJPEG: batched ``torchvision.io.decode_jpeg(..., device="cuda")`` over the same files;
4. ``wall`` (issue 43): the wall time of one extraction of 100,000 images (resnet18 at 224 px,
   batch 64, the default workers; a synthetic dataset made here, ``--distinct`` demo images of
   ``--image-px`` listed again until the listing holds ``--images``), with each decoder, as JSON;
5. ``weights`` (issue 43): the pair graph's weight check (``cuda_graph._Weights.unchanged``,
   paid by every replayed pair) timed for a resnet50 on the device, beside a walk of the module
   tree reading every parameter's and buffer's address (what it replaced), as JSON.

``--device cpu`` and small ``--images`` run 4 and 5 on a machine without a GPU (a smoke run).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _ms(fn, repeat=20, warmup=3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def pair_profile() -> None:
    from torch.profiler import ProfilerActivity, profile

    from dmlviewer.core.explain import explain_pair
    from dmlviewer.core.models import build_model, default_config

    torch.manual_seed(0)
    for backbone in ("resnet50", "small_cnn"):
        model = build_model(default_config(backbone=backbone, pooling="gmp", dim=512, image_size=224), "cuda").eval()
        rng = np.random.default_rng(0)
        q, r = (rng.integers(0, 256, (375, 500, 3), dtype=np.uint8) for _ in range(2))
        x = torch.stack([model.preprocess(im) for im in (q, r)]).cuda()

        def bare():
            with torch.no_grad():
                model(x)

        def prep():
            explain_pair(model, q, r, "cuda")

        bare_ms, prep_ms = _ms(bare), _ms(prep)
        print(f"pair {backbone}: bare {bare_ms:.2f} ms, prepare {prep_ms:.2f} ms, ratio {prep_ms / bare_ms:.3f}")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                prep()
            torch.cuda.synchronize()
        events = prof.key_averages()
        syncs = {e.key: e.count / 10 for e in events
                 if any(s in e.key for s in ("Synchronize", "Memcpy", "cudaStreamWait", "item", "_local_scalar"))}
        print(f"  per pair: {syncs}")
        if backbone == "resnet50":
            print(events.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=48))


def pair_cprofile() -> None:
    """The host's time inside one prepared pair, by function (the GPU waits on the host)."""
    from dmlviewer.core.explain import explain_pair
    from dmlviewer.core.models import build_model, default_config

    for backbone in ("small_cnn", "resnet50"):
        torch.manual_seed(0)
        model = build_model(default_config(backbone=backbone, pooling="gmp", dim=512, image_size=224), "cuda").eval()
        rng = np.random.default_rng(0)
        q, r = (rng.integers(0, 256, (375, 500, 3), dtype=np.uint8) for _ in range(2))
        for _ in range(5):
            explain_pair(model, q, r, "cuda")
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(50):
            explain_pair(model, q, r, "cuda")
        torch.cuda.synchronize()
        prof.disable()
        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats(order).print_stats(22)
            print(f"cprofile {backbone} by {order} (50 pairs):")
            print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))


def extraction_profile() -> None:
    from dmlviewer.bench.extract import repeated
    from dmlviewer.core.data import load_image, make_demo_data, open_dataset, to_tensor, torch_dataset
    from dmlviewer.core.evaluate.extract import extract_features, make_loader
    from dmlviewer.core.models import build_model, default_config
    from dmlviewer.core.progress import run_to_end

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model(default_config(backbone="resnet50", image_size=224, dim=512), dev).eval()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        root = make_demo_data(Path(tmp) / "data", classes=20, per_class=40, size=128)
        dataset = repeated(open_dataset(root).select_split("all"), 5)
        n = len(dataset)
        print(f"extraction: {n} images made in {time.perf_counter() - t0:.1f} s")
        # the baseline's batches wait on the GPU: the strictest bare loop, and no gigabytes of
        # host memory in this process (each loader worker's fork copies its page tables)
        batches = [torch.stack([to_tensor(load_image(dataset.abspath(i)), 224) for i in range(s, min(n, s + 128))])
                   .to(dev).contiguous(memory_format=torch.channels_last) for s in range(0, n, 128)]
        model_cl = model.to(memory_format=torch.channels_last)

        def bare() -> float:
            start = time.perf_counter()
            with torch.inference_mode():
                for b in batches:
                    model_cl(b)
            torch.cuda.synchronize()
            return time.perf_counter() - start

        bare()
        print(f"  bare loop (preloaded on the GPU, channels-last): {n / min(bare(), bare()):.0f} images/s")

        def ours(workers: int) -> float:
            start = time.perf_counter()
            run_to_end(extract_features(model, dataset, Path(tmp) / "f.h5", 128, dev, workers))
            torch.cuda.synchronize()
            return time.perf_counter() - start

        def loader(workers: int, start_workers=iter) -> float:
            start = time.perf_counter()
            for _ in start_workers(make_loader(dataset, model.preprocess, 128, dev, workers)):
                pass
            return time.perf_counter() - start

        ours(8)  # warm-up
        for workers in (4, 6, 8, 15):
            print(f"  workers {workers:2d}: ours {n / ours(workers):.0f} images/s, loader alone "
                  f"{n / loader(workers, torch_dataset.start_workers):.0f} images/s (workers' OpenCV on one "
                  f"thread), {n / loader(workers):.0f} images/s (on the machine's threads)")
        prof = cProfile.Profile()
        prof.enable()
        ours(15)
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
        print("  main process during one extraction (15 workers), by own time:")
        print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))

        try:
            from torchvision.io import decode_jpeg
        except ImportError:
            return
        data = [torch.frombuffer(bytearray(Path(dataset.abspath(i)).read_bytes()), dtype=torch.uint8) for i in range(n)]
        decode_jpeg(data[:128], device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(0, n, 128):
            decode_jpeg(data[i:i + 128], device="cuda")
        torch.cuda.synchronize()
        print(f"  nvJPEG batched decode (bytes already read): {n / (time.perf_counter() - start):.0f} images/s")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def extraction_wall(dev: torch.device, images: int, distinct: int, image_px: int,
                    backbone: str = "resnet18") -> list[dict]:
    """One extraction of ``images`` listed images per decoder (``cpu``, then ``device`` where
    torchvision decodes there), timed from the call to the file in place: worker start,
    decoding, forward passes, writing."""
    from dmlviewer.bench.extract import repeated
    from dmlviewer.core.data import make_demo_data, open_dataset
    from dmlviewer.core.data.device_input import device_decoding_available
    from dmlviewer.core.evaluate.extract import default_workers, extract_features
    from dmlviewer.core.models import build_model, default_config
    from dmlviewer.core.progress import run_to_end

    torch.manual_seed(0)
    model = build_model(default_config(backbone=backbone, image_size=224, dim=512), dev).eval()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        per_class = 50
        root = make_demo_data(Path(tmp) / "data", classes=max(1, -(-distinct // per_class)), per_class=per_class,
                              size=image_px)
        made_s = time.perf_counter() - t0
        base = open_dataset(root).select_split("all")
        dataset = repeated(base, -(-images // len(base))).subset(np.arange(images))
        decodes = ["cpu"] + (["device"] if dev.type == "cuda" and device_decoding_available() else [])
        for decode in decodes:
            out = Path(tmp) / f"{decode}.h5"
            start = time.perf_counter()
            result = run_to_end(extract_features(model, dataset, out, 64, dev, default_workers(dev), decode=decode))
            _sync(dev)
            wall = time.perf_counter() - start
            rows.append({"benchmark": "extract-wall", "model": f"{backbone}@224", "batch_size": 64,
                         "num_workers": default_workers(dev), "device": str(dev), "decode": decode,
                         "images": images, "distinct_images": len(base), "image_px": image_px,
                         "dataset_made_s": round(made_s, 1), "written": result["num_images"],
                         "wall_s": round(wall, 2), "images_per_s": round(images / wall, 1),
                         "file_mb": round(out.stat().st_size / 2**20, 1)})
            out.unlink()
    return rows


def weights_check(dev: torch.device) -> dict:
    """Median time of ``_Weights.unchanged()`` (2,000 calls) for a resnet50 on ``dev``, beside
    the module-tree walk reading each parameter's and buffer's address."""
    from dmlviewer.core.explain.cuda_graph import _Weights
    from dmlviewer.core.models import build_model, default_config

    model = build_model(default_config(backbone="resnet50", image_size=224, dim=512), dev).eval()
    weights = _Weights(model)

    def walk() -> bool:
        return all(t.data_ptr() for m in model.modules() for t in (*m._parameters.values(), *m._buffers.values())
                   if t is not None)

    def median_ms(fn, repeat: int = 2000) -> float:
        for _ in range(50):
            fn()
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return round(float(np.median(times)) * 1e3, 4)

    assert weights.unchanged()
    return {"benchmark": "weights-check", "model": "resnet50", "device": str(dev), "tensors": len(weights.recorded),
            "slots": len(weights.slots), "unchanged_ms": median_ms(weights.unchanged),
            "module_walk_ms": median_ms(walk)}


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=["pairs", "extract"],
                        choices=["pairs", "cprofile", "extract", "wall", "weights"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--distinct", type=int, default=1_000)
    parser.add_argument("--image-px", type=int, default=256)
    parser.add_argument("--backbone", default="resnet18", help="wall: the model's backbone")
    args = parser.parse_args()
    parts, dev = args.parts, torch.device(args.device)
    if "wall" in parts:
        for row in extraction_wall(dev, args.images, args.distinct, args.image_px, args.backbone):
            print(json.dumps(row), flush=True)
    if "weights" in parts:
        print(json.dumps(weights_check(dev)), flush=True)
    parts = [p for p in parts if p not in ("wall", "weights")]
    if not parts:
        raise SystemExit(0)
    print(torch.cuda.get_device_name(0), time.strftime("%Y-%m-%d"), parts)
    if "pairs" in parts:
        pair_profile()
    if "cprofile" in parts:
        pair_cprofile()
    if "extract" in parts:
        extraction_profile()
