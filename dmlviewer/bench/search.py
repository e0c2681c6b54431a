"""``bench search``: the approximate faiss index against exact search at N = 1,000,000 x 512.

Data: synthetic clustered unit vectors, ``CLUSTERS`` centres uniform on the sphere and each
vector ``normalize(centre + SPREAD * g / sqrt(D))`` with ``g`` standard normal (so a vector's
cosine with its centre is about ``1 / sqrt(1 + SPREAD^2)``), a cluster drawn uniformly per
vector. Chunks of rows are generated deterministically from their position, so the index is
built exactly as from a feature file (``search.build_ivf``: a sampling pass, then an adding
pass, ``nprobe`` tuned to recall@10 >= 0.95 on 200 of the rows), without the data ever being
in memory at once.

Everything runs in one fresh child process (``python -c``), so ``peak_rss_mb`` (VmHWM) is the
build's own peak: the index (it holds the vectors: N x D float32), the training sample and a
chunk. Then ``query_ms`` is the median time of one query (one row of the set, itself
excluded, top 10) through the index, over ``QUERIES`` other rows than those the tuning used,
and ``recall@10`` the mean share of their exact top 10 that the index returns. Last, the data
is materialized and ``exact_query_ms`` is the median time of one exact query over all N rows
in memory (``search.exact_search``: chunked matrix product and top-k) over the first
``EXACT_TIMED`` queries, the reference the index is compared with (the same search streamed
from a feature file is measured by ``bench memory``, ``large_exact_retrieval_s``).

Each latency is also given as CPU time (``*_cpu_ms``: all threads of the process, so up to
the number of cores times the wall time on an idle machine, and much less inflated than the
wall time when other work shares the cores). Without faiss (the ``search`` extra), only the
exact figures are given. ``--quick``: N = 100,000.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dmlviewer.bench.machine import describe

N, N_QUICK, DIM = 1_000_000, 100_000, 512
CLUSTERS = 10_000
SPREAD = 0.75
CHUNK = 50_000
QUERIES = 200
#: exact single queries timed (each scans all N rows; the recall uses all QUERIES)
EXACT_TIMED = 30
K = 10
SEED = 0


def centres(dim: int = DIM, clusters: int = CLUSTERS, seed: int = SEED) -> np.ndarray:
    c = np.random.default_rng([seed, 0]).standard_normal((clusters, dim), dtype=np.float32)
    return c / np.linalg.norm(c, axis=1, keepdims=True)


def chunk(start: int, stop: int, centre: np.ndarray, seed: int = SEED) -> np.ndarray:
    """Rows ``start..stop`` of the synthetic set (``start`` a multiple of ``CHUNK``)."""
    rng = np.random.default_rng([seed, 1, start])
    labels = rng.integers(len(centre), size=stop - start)
    x = centre[labels] + rng.standard_normal((stop - start, centre.shape[1]), dtype=np.float32) * (
        SPREAD / np.sqrt(centre.shape[1]))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def chunks(n: int, centre: np.ndarray):
    for start in range(0, n, CHUNK):
        yield start, chunk(start, min(n, start + CHUNK), centre)


def _median_ms(fn, items) -> tuple[float, float]:
    """Median wall and median CPU milliseconds (all threads of the process) of ``fn(item)``."""
    wall, cpu = [], []
    for item in items:
        t, c = time.perf_counter(), time.process_time()
        fn(item)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return float(np.median(wall) * 1000), float(np.median(cpu) * 1000)


def _child(spec: dict) -> None:
    import json
    import sys

    from dmlviewer.bench.child import peak_rss_mb
    from dmlviewer.core.evaluate import search as S
    from dmlviewer.core.progress import run_to_end

    n = int(spec["n"])
    centre = centres()
    rng = np.random.default_rng([SEED, 2])
    rows = np.sort(rng.choice(n, QUERIES, replace=False))
    queries = np.concatenate([c[(rows[(rows >= s) & (rows < s + len(c))] - s)] for s, c in chunks(n, centre)])
    report: dict = {"n": n, "dim": DIM}
    faiss = S.faiss_module()
    if faiss is not None:
        start = time.perf_counter()
        built = run_to_end(S.build_ivf(lambda: chunks(n, centre), n, DIM))
        report["build_s"] = time.perf_counter() - start
        report["peak_rss_mb"] = peak_rss_mb()
        index = S.ApproximateIndex(built["index"], {"nprobe": built["nprobe"]})
        report.update(kind=built["kind"], nlist=built["nlist"], nprobe=built["nprobe"],
                      tuned_recall=built["recall"], train_s=built["train_s"], add_s=built["add_s"],
                      tune_s=built["tune_s"], faiss=faiss.__version__, faiss_threads=faiss.omp_get_max_threads())
        found = {}

        def approx(q: int) -> None:
            found[q] = index.search(queries[q], K, exclude=rows[q:q + 1])[1][0]

        report["query_ms"], report["query_cpu_ms"] = _median_ms(approx, range(QUERIES))
    data = np.concatenate([c for _, c in chunks(n, centre)])
    exact = S.exact_search(data, queries, K, exclude=rows, chunk_rows=CHUNK)[1]  # all queries at once

    def exhaustive(q: int) -> None:
        S.exact_search(data, queries[q], K, exclude=rows[q:q + 1], chunk_rows=CHUNK)

    report["exact_query_ms"], report["exact_query_cpu_ms"] = _median_ms(exhaustive, range(EXACT_TIMED))
    if faiss is not None:
        report["recall@10"] = float(np.mean([len(set(found[q]) & set(exact[q])) / K for q in range(QUERIES)]))
    else:
        report.update({"query_ms": None, "recall@10": None, "build_s": None, "peak_rss_mb": peak_rss_mb(),
                       "note": "faiss is not installed (pip install 'dmlviewer[search]'): exact search only"})
    sys.stdout.write(json.dumps(report) + "\n")


def run(args: argparse.Namespace | None = None) -> dict:
    from dmlviewer.bench.child import run_child

    n = N_QUICK if getattr(args, "quick", False) else N
    report = run_child("dmlviewer.bench.search", "_child", {"n": n}, timeout_s=3600)
    return {
        "benchmark": "search",
        **report,
        "clusters": CLUSTERS, "spread": SPREAD, "queries": QUERIES, "k": K,
        "ratio": None if report.get("query_ms") is None else report["query_ms"] / report["exact_query_ms"],
        "machine": describe(),
    }
