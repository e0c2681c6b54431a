"""``bench changes``: the change table of two models (issue 41) against two bare exact top-k
searches on the same matrices, the ratio measured in one run (target <= 1.2).

Data: N = 60,000 x 512 (SOP's test size), model A's rows ``normalize(centre + SPREAD * g /
sqrt(D))`` around ``N / 5`` class centres uniform on the sphere (SOP's five images a class, the
class drawn per row), model B's rows A's plus noise (``B_NOISE``), normalized: two models that
agree on most neighbours but not all, so broken and fixed queries exist. Labels are the
classes.

Baseline: for each model, every row a query against all the others, itself excluded, the top
:data:`~dmlviewer.core.evaluate.changes.DEPTH` by a plain torch loop (chunks of queries as the
metrics use, matrix product, the diagonal set to -inf, ``topk``) and nothing else. Ours:
:func:`~dmlviewer.core.evaluate.changes.change_table` on the same two matrices (both searches,
the counts, the overlap, per class, the margins of the broken and fixed queries). Timed
baseline, ours, baseline; ``ratio`` is ours over the mean of the two baselines (a machine
shared with other work drifts). Each time is also given as CPU time of the process.
``--quick``: N = 20,000. ``--device``: where both run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dmlviewer.bench.machine import describe

N, N_QUICK, DIM = 60_000, 20_000, 512
PER_CLASS = 5
SPREAD = 2.2
B_NOISE = 0.3
SEED = 0


def matrices(n: int, dim: int = DIM, seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Model A's and model B's unit rows and the labels (module docstring)."""
    rng = np.random.default_rng(seed)
    classes = max(1, n // PER_CLASS)
    centres = rng.standard_normal((classes, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.integers(classes, size=n)
    a = centres[labels] + rng.standard_normal((n, dim), dtype=np.float32) * (SPREAD / np.sqrt(dim))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = a + rng.standard_normal((n, dim), dtype=np.float32) * (B_NOISE / np.sqrt(dim))
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    # float32 as the feature store holds them (NumPy 2 promotes a float32 array times a float64
    # scalar to float64: the baseline would search in double precision)
    return a.astype(np.float32), b.astype(np.float32), labels.astype(np.int64)


def bare_search(emb, k: int, chunk: int) -> None:
    """Every row's top ``k`` other rows: the plainest exact loop (the baseline)."""
    import torch

    for start in range(0, len(emb), chunk):
        stop = min(len(emb), start + chunk)
        sims = emb[start:stop] @ emb.T
        rows = torch.arange(stop - start, device=emb.device)
        sims[rows, rows + start] = -float("inf")
        values, indices = torch.topk(sims, k, dim=1)
        indices.cpu()


def _timed(fn) -> tuple[float, float]:
    import torch

    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu


def run(args: argparse.Namespace | None = None) -> dict:
    import torch

    from dmlviewer.core.evaluate.changes import DEPTH, change_table
    from dmlviewer.core.evaluate.metrics import CHUNK_BYTES
    from dmlviewer.core.models import resolve_device
    from dmlviewer.core.progress import run_to_end

    n = N_QUICK if getattr(args, "quick", False) else N
    device = resolve_device(getattr(args, "device", "cpu") or "cpu")
    a, b, labels = matrices(n)
    ta, tb = (torch.from_numpy(x).to(device) for x in (a, b))
    chunk = max(1, min(n, CHUNK_BYTES // (4 * n)))
    found: dict = {}

    def baseline() -> None:
        bare_search(ta, DEPTH, chunk)
        bare_search(tb, DEPTH, chunk)

    def ours() -> None:
        found.update(run_to_end(change_table(ta, tb, labels, device=device)))

    first, (ours_s, ours_cpu), second = _timed(baseline), _timed(ours), _timed(baseline)
    base_s, base_cpu = (first[0] + second[0]) / 2, (first[1] + second[1]) / 2
    return {
        "benchmark": "changes", "n": n, "dim": DIM, "k": DEPTH, "device": str(device),
        "seconds": ours_s, "cpu_s": ours_cpu, "baseline_s": base_s, "baseline_cpu_s": base_cpu,
        "baseline_runs_s": [first[0], second[0]],
        "ratio": ours_s / base_s, "cpu_ratio": ours_cpu / base_cpu if base_cpu else None,
        "num_queries": found["num_queries"], "broken": found["a_only"], "fixed": found["b_only"],
        "recall@1": found["recall@1"], "overlap": found["overlap"], "torch_threads": torch.get_num_threads(),
        "machine": describe(),
    }
