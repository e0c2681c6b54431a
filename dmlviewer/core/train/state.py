"""Random generator states as tensors and plain values (checkpoints load with weights_only=True),
the per-epoch reseeding that makes epoch-boundary resumption independent of history, and the
determinism switches of a run (both trainers)."""

from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch


def rng_state() -> dict:
    """torch CPU (and CUDA) generators, numpy's and Python's global generators."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": int(version), "internal": list(internal), "gauss_next": gauss_next},
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), numpy and Python generators."""
    seed = int(seed) % (2**31)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def epoch_seed(seed: int, epoch: int, rank: int = 0) -> int:
    """A distinct, reproducible seed per (run seed, epoch, rank)."""
    return (int(seed) * 1_000_003 + int(epoch) * 7919 + int(rank) * 104_729) % (2**31)


def deterministic(enabled: bool, device: torch.device) -> contextlib.AbstractContextManager:
    """The determinism switches of a run (both trainers): with ``enabled``,
    ``torch.use_deterministic_algorithms``, cuDNN's deterministic kernels without autotuning,
    cuBLAS's fixed workspace and, on CPU, one intra-op thread, all restored after; without it,
    cuDNN autotuning on CUDA.

    Why one thread: CPU kernels split their reductions (convolution weight gradients, matrix
    products) by the number of threads, so the same run on 1 and on 2 threads differs in the
    last bits after a few steps (measured: up to 1.4e-7 in the weights after 4 steps of
    small_cnn, which 40 epochs grow into a visible MAP@R difference). The default thread count
    follows the environment (``OMP_NUM_THREADS``, the process's CPU affinity, a caller's
    ``torch.set_num_threads``), so two launches of the same run could differ; one thread does
    not depend on any of it."""
    stack = contextlib.ExitStack()
    if enabled:
        before = torch.are_deterministic_algorithms_enabled()
        cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
        threads = torch.get_num_threads()
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        if device.type == "cpu":
            torch.set_num_threads(1)

        def restore() -> None:
            torch.use_deterministic_algorithms(before)
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn
            torch.set_num_threads(threads)

        stack.callback(restore)
    elif device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    return stack
