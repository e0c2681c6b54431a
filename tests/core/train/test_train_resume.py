"""A run killed (SIGKILL) or cancelled and then resumed ends exactly like an uninterrupted run;
how far a saved run got is read without loading (or unpickling) it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from dmlviewer.core.progress import CancelToken, run_to_end
from dmlviewer.core.train import train
from dmlviewer.core.train.saved_run import saved_progress

pytestmark = pytest.mark.slow


def _final(run):
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    return ckpt["state_dict"], ckpt["metrics"], (run / "metrics.jsonl").read_text()


def _assert_same_run(a, b):
    state_a, metrics_a, log_a = _final(a)
    state_b, metrics_b, log_b = _final(b)
    assert metrics_a == metrics_b and metrics_a["num_queries"] > 0
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        assert torch.equal(state_a[key], state_b[key]), key
    assert log_a == log_b  # the resumed log has no lines from the lost steps


@pytest.fixture(scope="module")
def uninterrupted(tiny_config, tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    result = run_to_end(train(tiny_config(out)))
    assert result["epochs"] == 3 and not result["cancelled"]
    return out


def test_sigkill_after_first_checkpoint_then_resume_matches(tiny_config, tmp_path, uninterrupted):
    out = tmp_path / "run"
    config = tiny_config(out)
    # the child trains, announces the first step of epoch 2 (epoch 1's checkpoint is on disk,
    # and a step whose state is not) and waits there to be killed
    code = textwrap.dedent(f"""
        import sys, time
        from dmlviewer.core.train import TrainConfig, train
        config = TrainConfig.from_dict({config.to_dict()!r})
        for event in train(config):
            if event.kind == "step" and event.data["epoch"] == 2:
                print("ready", flush=True)
                time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    assert saved["epoch"] == 1
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["epoch"] == 2  # a line of the lost step, to be cut on resumption

    config.resume = True
    result = run_to_end(train(config))
    assert result["epochs"] == 3
    _assert_same_run(uninterrupted, out)


def test_cancel_mid_epoch_then_resume_matches(tiny_config, tmp_path, uninterrupted):
    out = tmp_path / "run"
    cancel = CancelToken()
    events = []
    for event in train(tiny_config(out), cancel):
        events.append(event)
        if event.kind == "step" and event.data["step"] == 3:  # first step of epoch 2
            cancel.cancel()
    assert [e.kind for e in events[-2:]] == ["checkpoint", "done"]
    assert events[-1].data["result"]["cancelled"]
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    assert saved["epoch"] == 1 and saved["extra"]["sampler"]["start"] == 1
    assert saved_progress(out / "checkpoint.pt") == (1, True)  # what the training dialog reads

    result = run_to_end(train(tiny_config(out, resume=True)))
    assert result["steps"] == 6
    _assert_same_run(uninterrupted, out)
    assert saved_progress(out / "checkpoint.pt") == (3, False)


class _RunsCode:
    def __reduce__(self):
        return (os.mkdir, (self.target,))


def test_saved_progress_reads_nothing_it_would_have_to_unpickle(tmp_path):
    """The dialog reads run folders it did not write: a pickle that would run code is not run."""
    bad = _RunsCode()
    bad.target = str(tmp_path / "ran")
    torch.save({"epoch": 3, "payload": bad}, tmp_path / "checkpoint.pt")
    assert saved_progress(tmp_path / "checkpoint.pt") is None and not (tmp_path / "ran").exists()
    (tmp_path / "empty.pt").write_bytes(b"")
    assert saved_progress(tmp_path / "empty.pt") is None and saved_progress(tmp_path / "missing.pt") is None
