"""Random generator states as tensors and plain values (checkpoints load with weights_only=True),
and the per-epoch reseeding that makes epoch-boundary resumption independent of history."""

from __future__ import annotations

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
