"""``torchrun -m dmlviewer evaluate`` on two gloo ranks (CPU): the same feature file as one
process, and a rank killed mid-run leaves no half-written output. Real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

pytestmark = pytest.mark.slow

CHECKPOINT = Path(__file__).resolve().parents[2] / "resources" / "demo_checkpoint.pt"
BATCH = 3  # 20 images, one unreadable: 7 batches, so rank 1 has none in the last round


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """20 images of 4 classes; image 5 (in rank 1's first batch) is truncated."""
    from dmlviewer.core.data import make_demo_data, open_dataset

    root = make_demo_data(tmp_path_factory.mktemp("dist") / "data", classes=4, per_class=5, size=64, seed=3)
    bad = open_dataset(root).abspath(5)
    bad.write_bytes(bad.read_bytes()[:200])
    return root


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _evaluate_args(data: Path, out: Path, split: str = "all", batch: int = BATCH) -> list[str]:
    return ["-m", "dmlviewer", "evaluate", "--checkpoint", str(CHECKPOINT), "--dataset", str(data),
            "--split", split, "--out", str(out), "--json", "--num-workers", "0", "--batch-size", str(batch)]


def _single(data: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, *_evaluate_args(data, out)], capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _contents(path: Path) -> tuple[dict, dict]:
    with h5py.File(path, "r") as f:
        arrays = {name: f[name][()] for name in f}
        attrs = {k: v for k, v in f.attrs.items() if k != "created"}
    return arrays, attrs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_gloo_ranks_write_the_single_process_file(data, tmp_path):
    single, dist = tmp_path / "single.h5", tmp_path / "dist.h5"
    expected = _single(data, single)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
         *_evaluate_args(data, dist)],
        capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    # metrics computed and printed once (rank 0): stdout is one JSON document (two would not parse)
    assert json.loads(proc.stdout) == expected
    assert "on 2 ranks" in proc.stderr
    got, got_attrs = _contents(dist)
    want, want_attrs = _contents(single)
    assert sorted(got) == sorted(want) and "groups" in got  # the demo model has a grouping head
    assert len(got["labels"]) == 19  # the truncated image is left out by both
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        assert np.array_equal(got[name], want[name], equal_nan=got[name].dtype.kind == "f"), name
    assert got_attrs == want_attrs  # checkpoint hash, model config, dataset, metrics
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def _start_rank(rank: int, port: int, data: Path, out: Path, batch: int = BATCH) -> subprocess.Popen:
    env = _env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    return subprocess.Popen([sys.executable, *_evaluate_args(data, out, batch=batch)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_temp_file(folder: Path, name: str, procs: list[subprocess.Popen], timeout_s: float = 120) -> str:
    """Poll until rank 0's writer has opened its temporary file; returns its name."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        temp = [p.name for p in folder.iterdir() if p.name.startswith(f".{name}.tmp-")]
        if temp:
            return temp[0]
        dead = [p.returncode for p in procs if p.poll() is not None]
        assert not dead, f"a rank ended before writing started: {dead} " + procs[0].stderr.read()
        time.sleep(0.002)
    raise AssertionError("rank 0 never opened its temporary file")


@pytest.fixture(scope="module")
def long_data(tmp_path_factory):
    """160 small images: at batch size 1, 80 rounds of gathering, so the run is still going
    when the test has seen the temporary file and stopped a rank."""
    from dmlviewer.core.data import make_demo_data

    return make_demo_data(tmp_path_factory.mktemp("dist-long") / "data", classes=8, per_class=20, size=48, seed=4)


@pytest.mark.parametrize("victim", [1, 0])
def test_a_rank_killed_mid_run_leaves_no_corrupt_output(long_data, tmp_path, victim):
    """As soon as rank 0's writer has opened its temporary file, rank 1 is stopped (SIGSTOP:
    rank 0 then waits in a gather, mid-run); then one rank gets SIGKILL (the other one, if
    stopped, is continued)."""
    out = tmp_path / "features.h5"
    proc = subprocess.run([sys.executable, *_evaluate_args(long_data, out)], capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr  # an earlier, good file at the target
    before = out.read_bytes()

    port = _free_port()
    ranks = [_start_rank(r, port, long_data, out, batch=1) for r in range(2)]
    try:
        temp = _wait_for_temp_file(tmp_path, out.name, ranks)
        ranks[1].send_signal(signal.SIGSTOP)
        ranks[victim].send_signal(signal.SIGKILL)
        ranks[victim].wait(30)
        survivor = ranks[1 - victim]
        survivor.send_signal(signal.SIGCONT)
        _, err = survivor.communicate(timeout=120)
    finally:
        for p in ranks:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
    assert ranks[victim].returncode == -signal.SIGKILL
    assert survivor.returncode == 1, err
    assert f"rank {1 - victim}: the distributed run failed" in err and "Traceback" not in err
    assert out.read_bytes() == before  # the earlier file is untouched
    left = sorted(p.name for p in tmp_path.iterdir() if ".tmp-" in p.name)
    if victim == 0:
        # A killed writer cannot clean up: only its temporary file is left, which the next
        # writer for the same target removes.
        assert left == [temp]
        proc = subprocess.run([sys.executable, *_evaluate_args(long_data, out)], capture_output=True, text=True,
                              env=_env(), timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    else:
        assert left == []  # rank 0 saw the lost peer and discarded its temporary file
