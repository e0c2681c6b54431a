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


def _evaluate_args(data: Path, out: Path, split: str = "all") -> list[str]:
    return ["-m", "dmlviewer", "evaluate", "--checkpoint", str(CHECKPOINT), "--dataset", str(data),
            "--split", split, "--out", str(out), "--json", "--num-workers", "0", "--batch-size", str(BATCH)]


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
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout  # metrics computed and printed once (rank 0)
    assert json.loads(lines[0]) == expected
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


def _start_rank(rank: int, port: int, data: Path, out: Path) -> subprocess.Popen:
    env = _env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    return subprocess.Popen([sys.executable, *_evaluate_args(data, out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_reader(fifo: Path, procs: list[subprocess.Popen], timeout_s: float = 120) -> int:
    """Block until a process opens ``fifo`` for reading; returns our writing end."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            dead = [p.returncode for p in procs if p.poll() is not None]
            assert not dead, f"a rank ended before reaching the held image: {dead} " + procs[0].stderr.read()
            time.sleep(0.02)
    raise AssertionError("no rank opened the held image")


@pytest.mark.parametrize("victim", [1, 0])
def test_a_rank_killed_mid_run_leaves_no_corrupt_output(data, tmp_path, victim):
    """Image 9 (batch 3, rank 1's second batch) is a FIFO: rank 1 blocks reading it after the
    first round was written, rank 0 waits in the next gather. Then one rank gets SIGKILL."""
    import shutil

    data_copy = tmp_path / "data"
    shutil.copytree(data, data_copy)
    from dmlviewer.core.data import open_dataset

    held = open_dataset(data_copy).abspath(9)
    held.unlink()
    os.mkfifo(held)
    out = tmp_path / "features.h5"
    _single(data, out)  # an earlier, good file at the target
    before = out.read_bytes()

    port = _free_port()
    ranks = [_start_rank(r, port, data_copy, out) for r in range(2)]
    writer_end = None
    try:
        writer_end = _wait_for_reader(held, ranks)
        temp = [p.name for p in tmp_path.iterdir() if p.name.startswith(".features.h5.tmp-")]
        assert len(temp) == 1  # rank 0 is writing
        ranks[victim].send_signal(signal.SIGKILL)
        ranks[victim].wait(30)
        os.close(writer_end)  # the survivor (if rank 1) reads an empty file and goes on
        writer_end = None
        survivor = ranks[1 - victim]
        _, err = survivor.communicate(timeout=120)
    finally:
        if writer_end is not None:
            os.close(writer_end)
        for p in ranks:
            if p.poll() is None:
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
        assert left == temp
        _single(data, out)
        assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    else:
        assert left == []  # rank 0 saw the lost peer and discarded its temporary file
