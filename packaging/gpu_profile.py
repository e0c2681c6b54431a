"""Where the time goes on a CUDA GPU (issue 32), printed as short tables (run by gpu_check.sh):

1. pair preparation (resnet50, 500x375 images): torch.profiler's host-side operators and the
   synchronising CUDA calls per prepared pair, with the bare forward's time beside;
2. extraction (resnet50 at 224 px, batch 128, 800 demo JPEGs listed five times): ours at several worker counts,
   the data loader alone at the same counts, the bare loop on preloaded tensors, and a cProfile
   of the main process during one extraction;
3. nvJPEG: batched ``torchvision.io.decode_jpeg(..., device="cuda")`` over the same files.
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


if __name__ == "__main__":
    import sys

    parts = sys.argv[1:] or ["pairs", "extract"]
    print(torch.cuda.get_device_name(0), time.strftime("%Y-%m-%d"), parts)
    if "pairs" in parts:
        pair_profile()
    if "cprofile" in parts:
        pair_cprofile()
    if "extract" in parts:
        extraction_profile()
