"""``bench metrics``: our retrieval metrics against pytorch-metric-learning's AccuracyCalculator.

Data: N x 512 float32 embeddings, 100 random class centres plus Gaussian noise four times the
centres' scale (default N = 60,000; ``--quick`` 5,000): clustered but far from separable, and
without exact ties. Both compute Recall@1 (=
precision_at_1), R-precision and MAP@R; AccuracyCalculator uses its chunked cosine k-NN
(``CustomKNN(CosineSimilarity(), batch_size=...)``; faiss is not installed) with
``k="max_bin_count"``, ours its chunked ``matmul + topk`` (which also gives Recall@2/4/8 and
the kNN accuracy in the same pass). Each side runs in a fresh process, so ``peak_rss_mb``
(``ru_maxrss``) is its own. ``ratio`` = our time / theirs; ``identical`` says whether the three
values agree to 1e-9 (``max_abs_diff`` gives the difference: the two compute similarities with
different float rounding, so two neighbours at nearly equal similarity can swap ranks, which
moves MAP@R by 1 / (N R)). k-means NMI/F1 are timed on our side only (``clustering_s``; the
calculator's clustering needs faiss).
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


def make_embeddings(n: int, classes: int = CLASSES, dim: int = DIM, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    centres = rng.normal(size=(classes, dim)).astype(np.float32)
    emb = centres[labels] + 4.0 * rng.normal(size=(n, dim)).astype(np.float32)
    return emb / np.linalg.norm(emb, axis=1, keepdims=True), labels


def _ours(n: int, device: str, queue) -> None:
    from dmlviewer.core.evaluate.metrics import clustering_metrics, retrieval_metrics

    emb, labels = make_embeddings(n)
    start = time.perf_counter()
    values = retrieval_metrics(emb, labels, device=device)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    cluster = clustering_metrics(emb, labels)
    clustering_s = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"seconds": seconds, "values": {k: values[k] for k in ("recall@1", "r_precision", "map@r")},
               "clustering_s": clustering_s, "nmi": cluster["nmi"], "f1": cluster["f1"], "peak_rss_mb": peak})


def _theirs(n: int, device: str, queue) -> None:
    import torch
    from pytorch_metric_learning.distances import CosineSimilarity
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    emb, labels = make_embeddings(n)
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


def _in_child(fn, n: int, device: str) -> dict:
    """Run ``fn`` in a fresh process and return what it puts on the queue; a child that dies
    first (a bad device, out of memory) ends the wait with an error naming its exit code."""
    import queue as queues

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=fn, args=(n, device, queue))
    proc.start()
    try:
        while True:
            try:
                result = queue.get(timeout=0.5)
                break
            except queues.Empty:
                if not proc.is_alive():
                    raise BenchError(f"the benchmark process {fn.__name__} ended (exit code {proc.exitcode}) "
                                       "without a result; its error is above") from None
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
    return result


def run(args) -> dict:
    n = int(getattr(args, "size", None) or (5_000 if getattr(args, "quick", False) else 60_000))
    device = getattr(args, "device", "cpu") or "cpu"
    ours = _in_child(_ours, n, device)
    theirs = _in_child(_theirs, n, device)
    diff = max(abs(ours["values"][k] - theirs["values"][k]) for k in ours["values"])
    return {
        "benchmark": "metrics",
        "n": n, "dim": DIM, "classes": CLASSES, "device": device,
        "ours_s": round(ours["seconds"], 3),
        "theirs_s": round(theirs["seconds"], 3),
        "ratio": round(ours["seconds"] / theirs["seconds"], 3),
        "identical": diff <= 1e-9,
        "max_abs_diff": diff,
        "values": ours["values"],
        "clustering_s": round(ours["clustering_s"], 3),
        "nmi": ours["nmi"], "f1": ours["f1"],
        "peak_rss_mb_ours": round(ours["peak_rss_mb"], 1),
        "peak_rss_mb_theirs": round(theirs["peak_rss_mb"], 1),
        "machine": describe(),
    }
