"""``bench faithfulness``: the whole ``dmlviewer faithfulness`` run on the demo (the shipped demo
checkpoint on the synthetic parts data, 20 classes x 40 images at 128 px, 10 test classes),
every method (the six overall maps, occlusion, point-to-point, the four group maps, random,
and the greedy oracle on a twentieth of the pairs, the command's 10 of 200), blur baseline, 16
steps, at two pair counts.

- ``whole_run_s``: the run over 200 pairs (100 same-class, 100 different-class) including the
  grad-weight bank of ``grad_transfer`` (Grad-CAM weights of the 400 training images), the
  number to hold against the 5-minute target (``ratio`` = whole_run_s / 300 s, below 1
  meets it).
- ``scaling``: seconds of the runs over 100 and 200 pairs (the bank computed once beforehand and
  shared) and their quotient (2.0 = linear in the pairs).
- ``load_average``: the machine's 1-minute load before and after (on a shared machine the
  times stretch with it); ``cpu_seconds``, ``whole_run_cpu_s`` and ``cpu_scaling`` give the
  process's CPU time (all threads), which load from other processes stretches much less.
- ``auc``: per method, the deletion and insertion AUCs of the larger run over same-class and
  different-class pairs and the number of same-class pairs.

``--quick``: 20 and 40 pairs. Torch uses its default threads, as the command does.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from dmlviewer.bench.machine import describe

TARGET_S = 300.0
PAIRS = (100, 200)
QUICK_PAIRS = (20, 40)  # the oracle on 1 and 2 pairs: still proportional


def _timed_run(model, dataset, pairs: int, bank, device: str) -> tuple[float, float, int, list[dict]]:
    from dmlviewer.core.explain.faithfulness import faithfulness
    from dmlviewer.core.progress import run_to_end

    calls = []  # images through the model or its folded copy (perturb.embed_kept), same class
    hook = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, out: calls.append(args[0].shape[0]) if type(module) is type(model) else None)
    try:
        start, cpu = time.perf_counter(), time.process_time()
        results = run_to_end(faithfulness(model, dataset, pairs=pairs, oracle_pairs=pairs // 20, device=device,
                                          grad_bank=bank))
        return time.perf_counter() - start, time.process_time() - cpu, int(sum(calls)), results
    finally:
        hook.remove()


def run(args: argparse.Namespace) -> dict:
    from dmlviewer.core.data import make_demo_data, open_dataset
    from dmlviewer.core.explain.grad_transfer import bank_from_train_split
    from dmlviewer.core.models import load_checkpoint
    from dmlviewer.resources import resource_path

    device = getattr(args, "device", "cpu") or "cpu"
    counts = QUICK_PAIRS if getattr(args, "quick", False) else PAIRS
    load_before = os.getloadavg()[0]
    model, _ = load_checkpoint(resource_path("demo_checkpoint.pt"), device)
    model.eval()
    with tempfile.TemporaryDirectory(prefix="bench-faithfulness-") as tmp:
        root = make_demo_data(Path(tmp) / "demo", classes=20, per_class=40, size=128, seed=0)
        dataset = open_dataset(root)
        start, cpu = time.perf_counter(), time.process_time()
        job = bank_from_train_split(model, dataset, 1, device)
        while True:  # a generator that returns the bank
            try:
                next(job)
            except StopIteration as stop:
                bank = stop.value
                break
        bank_s, bank_cpu = time.perf_counter() - start, time.process_time() - cpu
        seconds, cpu_s, images = {}, {}, {}
        for n in counts:
            seconds[n], cpu_s[n], images[n], results = _timed_run(model, dataset, n, bank, device)
    small, large = counts
    whole = bank_s + seconds[large]
    return {
        "benchmark": "faithfulness",
        "pairs": list(counts),
        "seconds": [round(seconds[n], 2) for n in counts],
        "cpu_seconds": [round(cpu_s[n], 2) for n in counts],
        "images_embedded": [images[n] for n in counts],
        "scaling": round(seconds[large] / seconds[small], 3),
        "per_pair_s": round(seconds[large] / large, 4),
        "cpu_scaling": round(cpu_s[large] / cpu_s[small], 3),
        "grad_bank_s": round(bank_s, 2),
        "whole_run_s": round(whole, 2),
        "whole_run_cpu_s": round(bank_cpu + cpu_s[large], 2),
        "torch_threads": torch.get_num_threads(),
        "target_s": TARGET_S,
        "ratio": round(whole / TARGET_S, 3),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        # the AUCs of the larger run: same-class deletion, insertion; different-class the same
        "auc": {r["method"]: [r["deletion_auc"], r["insertion_auc"], r["different_class"]["deletion_auc"],
                              r["different_class"]["insertion_auc"], r["num_pairs"]] for r in results},
        "machine": describe(),
    }
