"""``bench metrics``: our retrieval metrics against pytorch-metric-learning's AccuracyCalculator,
and against the floor of the work itself.

Data: N x 512 float32 embeddings, random class centres plus Gaussian noise four times the
centres' scale: clustered but far from separable, and without exact ties. Default N =
120,053 (Stanford Online Products, train and test) with SOP's proportions, 22,634 classes of
5.3 images (so R, and the neighbour depth the metrics need, are SOP's); ``--quick``: N = 5,000
in 100 classes.

The pytorch-metric-learning comparison runs up to N = 60,000 (``--size 60000``: the
README's comparison); at SOP scale only our side and the floor are measured.

Floor: every metric needs each item's similarity to every other, N x N x D multiply-adds; at
the rate this machine multiplies matrices (measured in the same child, one ``torch.mm`` of the
shape our chunked search uses, the best of four before and four after our run) that takes
``floor_s``, and ``floor_ratio`` = our time / ``floor_s`` (1 would be the matrix products
alone, with the top-k and the metrics free). The same in CPU time (``floor_ratio_cpu``: our
process's CPU seconds over the CPU seconds the products take at the best measured rate) is
the figure to trust on a machine shared with other work, where the wall-clock rate changes
from minute to minute. Both compute Recall@1 (=
precision_at_1), R-precision and MAP@R; AccuracyCalculator uses its chunked cosine k-NN
(``CustomKNN(CosineSimilarity(), batch_size=...)``; faiss is not installed) with
``k="max_bin_count"``, ours its chunked ``matmul + topk`` (which also gives Recall@2/4/8 and
the kNN accuracy in the same pass). Each side runs in a fresh process, so ``peak_rss_mb``
(``ru_maxrss``) is its own. ``ratio`` = our time / theirs; ``identical`` says whether the three
values agree to 1e-9 (``max_abs_diff`` gives the difference: the two compute similarities with
different float rounding, so two neighbours at nearly equal similarity can swap ranks, which
moves MAP@R by 1 / (N R)). k-means NMI/F1 are timed on our side only (``clustering_s``; the
calculator's clustering needs faiss). Above 1,000 classes k-means (k-means++ seeding and
Lloyd iterations over 22,634 centres) takes much longer than the retrieval metrics and is not
timed (``clustering_s`` is null).
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import time

import numpy as np

from dmlviewer.bench import BenchError
from dmlviewer.bench.machine import describe

CLASSES = 100
DIM = 512
#: the default size: Stanford Online Products (train and test) and its number of products
SOP_N, SOP_CLASSES = 120_053, 22_634
CLUSTERING_MAX_CLASSES = 1000
#: above this N the pytorch-metric-learning baseline is not run (its time grows as N^2 like
#: ours; the README keeps its comparison at 60,000)
BASELINE_MAX_N = 60_000


def make_embeddings(n: int, classes: int = CLASSES, dim: int = DIM, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """N x dim unit rows, class ``i % classes`` each, and their labels (module docstring)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    centres = rng.normal(size=(classes, dim)).astype(np.float32)
    emb = centres[labels] + 4.0 * rng.normal(size=(n, dim)).astype(np.float32)
    return emb / np.linalg.norm(emb, axis=1, keepdims=True), labels


def matmul_rate(n: int, dim: int = DIM, device: str = "cpu") -> tuple[float, float]:
    """Multiply-adds per wall second and per CPU second (all threads) of one ``chunk x D`` by
    ``D x n`` float32 product, the shape of one step of our chunked neighbour search over
    ``n`` items (best of four)."""
    import torch

    from dmlviewer.core.evaluate.metrics import CHUNK_BYTES

    chunk = max(1, min(n, CHUNK_BYTES // max(1, 4 * n)))
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(chunk, dim, generator=gen).to(device)
    b = torch.randn(n, dim, generator=gen).to(device)
    wall, cpu = float("inf"), float("inf")
    for _ in range(4):
        if device != "cpu":
            torch.cuda.synchronize()
        start, start_cpu = time.perf_counter(), time.process_time()
        (a @ b.T).sum().item()
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    macs = chunk * n * dim
    return macs / wall, macs / max(cpu, 1e-9)


def _ours(n: int, classes: int, device: str, queue) -> None:
    from dmlviewer.core.evaluate.metrics import clustering_metrics, retrieval_metrics

    emb, labels = make_embeddings(n, classes)
    before = matmul_rate(n, emb.shape[1], device)
    start, start_cpu = time.perf_counter(), time.process_time()
    values = retrieval_metrics(emb, labels, device=device)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    after = matmul_rate(n, emb.shape[1], device)
    cluster, clustering_s = {"nmi": None, "f1": None}, None
    if classes <= CLUSTERING_MAX_CLASSES:
        start = time.perf_counter()
        cluster = clustering_metrics(emb, labels)
        clustering_s = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"seconds": seconds, "cpu_seconds": cpu_seconds,
               "values": {k: values[k] for k in ("recall@1", "r_precision", "map@r")},
               "clustering_s": clustering_s, "nmi": cluster["nmi"], "f1": cluster["f1"], "peak_rss_mb": peak,
               # the best rate seen before and after: the floor is then a lower bound
               "matmul_macs_per_s": max(before[0], after[0]), "matmul_macs_per_cpu_s": max(before[1], after[1])})


def _theirs(n: int, classes: int, device: str, queue) -> None:
    import torch
    from pytorch_metric_learning.distances import CosineSimilarity
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    emb, labels = make_embeddings(n, classes)
    calc = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"), k="max_bin_count",
        device=torch.device(device), knn_func=CustomKNN(CosineSimilarity(), batch_size=1024),
    )
    start = time.perf_counter()
    values = calc.get_accuracy(emb, labels)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"seconds": seconds, "peak_rss_mb": peak, "values": {
        "recall@1": values["precision_at_1"], "r_precision": values["r_precision"],
        "map@r": values["mean_average_precision_at_r"]}})


def _in_child(fn, n: int, classes: int, device: str) -> dict:
    """Run ``fn`` in a fresh process and return what it puts on the queue; a child that dies
    first (a bad device, out of memory) ends the wait with an error naming its exit code."""
    import queue as queues

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=fn, args=(n, classes, device, queue))
    proc.start()
    try:
        while True:
            try:
                result = queue.get(timeout=0.5)
                break
            except queues.Empty:
                if not proc.is_alive():
                    try:  # it may have put its result and ended between our wait and this check
                        result = queue.get(timeout=2.0)
                        break
                    except queues.Empty:
                        pass
                    raise BenchError(f"the benchmark process {fn.__name__} ended (exit code {proc.exitcode}) "
                                       "without a result; its error is above") from None
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
    return result


def run(args) -> dict:
    quick = getattr(args, "quick", False)
    n = int(getattr(args, "size", None) or (5_000 if quick else SOP_N))
    classes = CLASSES if quick else max(1, round(n * SOP_CLASSES / SOP_N))
    device = getattr(args, "device", "cpu") or "cpu"
    ours = _in_child(_ours, n, classes, device)
    theirs = _in_child(_theirs, n, classes, device) if n <= BASELINE_MAX_N else None
    diff = None if theirs is None else max(abs(ours["values"][k] - theirs["values"][k]) for k in ours["values"])
    floor_s = n * n * DIM / ours["matmul_macs_per_s"]
    floor_cpu_s = n * n * DIM / ours["matmul_macs_per_cpu_s"]
    return {
        "benchmark": "metrics",
        "n": n, "dim": DIM, "classes": classes, "device": device,
        "ours_s": round(ours["seconds"], 3),
        "theirs_s": None if theirs is None else round(theirs["seconds"], 3),
        "ratio": None if theirs is None else round(ours["seconds"] / theirs["seconds"], 3),
        "floor_s": round(floor_s, 3),
        "floor_ratio": round(ours["seconds"] / floor_s, 3),
        "ours_cpu_s": round(ours["cpu_seconds"], 3),
        "floor_cpu_s": round(floor_cpu_s, 3),
        "floor_ratio_cpu": round(ours["cpu_seconds"] / floor_cpu_s, 3),
        "matmul_gmacs": round(ours["matmul_macs_per_s"] / 1e9, 2),
        "matmul_gmacs_per_cpu_s": round(ours["matmul_macs_per_cpu_s"] / 1e9, 2),
        "identical": None if diff is None else diff <= 1e-9,
        "max_abs_diff": diff,
        "values": ours["values"],
        "clustering_s": None if ours["clustering_s"] is None else round(ours["clustering_s"], 3),
        "nmi": ours["nmi"], "f1": ours["f1"],
        "peak_rss_mb_ours": round(ours["peak_rss_mb"], 1),
        "peak_rss_mb_theirs": None if theirs is None else round(theirs["peak_rss_mb"], 1),
        "machine": describe(),
    }
