"""``train --branches 2`` resumes as one-branch ``train`` does (issue 25): a run stopped at an
epoch boundary or mid-epoch and resumed ends bit-identical to an uninterrupted one (CPU, same
process: same thread count); a real process killed mid-run leaves a loadable checkpoint and no
half-written file, and SIGTERM saves a state that ``--resume`` finishes; options and datasets
that do not apply are refused in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dmlviewer.cli import main
from dmlviewer.core.progress import CancelToken
from dmlviewer.core.train.cross_view import CrossViewConfig, train_cross_view

TINY = {"dim": 8, "batch_pairs": 3, "query_shape": (16, 64), "reference_size": 32, "device": "cpu", "seed": 3}
CLI = ["--epochs", "1", "--image-size", "32", "--dim", "8", "--classes-per-batch", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def cv(tmp_path_factory) -> Path:
    from dmlviewer.core.data.cross_view import make_cross_view_data

    return make_cross_view_data(tmp_path_factory.mktemp("cv") / "cv", pairs=12, seed=2, aerial_size=32,
                                panorama_shape=(16, 64))


def _weights(run: Path) -> dict:
    from dmlviewer.core.models import load_checkpoint

    model, info = load_checkpoint(run / "checkpoint.pt")
    return {"state": model.state_dict(), "epoch": info["epoch"], "metrics": info["metrics"],
            "lines": (run / "metrics.jsonl").read_text().splitlines()}


def _same(a: dict, b: dict) -> None:
    assert a["epoch"] == b["epoch"] and a["metrics"] == b["metrics"] and a["lines"] == b["lines"]
    assert a["state"].keys() == b["state"].keys()
    for key in a["state"]:
        assert torch.equal(a["state"][key], b["state"][key]), key


class _CancelAfter(CancelToken):
    """Cancelled once ``checks`` batches were started (the flag is read before each batch)."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self.left = checks

    @property
    def cancelled(self) -> bool:
        self.left -= 1
        return self.left < 0


@pytest.fixture(scope="module")
def uninterrupted(cv, tmp_path_factory) -> dict:
    run = tmp_path_factory.mktemp("full") / "run"
    train_cross_view(CrossViewConfig(str(cv), str(run), epochs=2, **TINY))
    return _weights(run)


def test_resume_at_an_epoch_boundary_equals_an_uninterrupted_run(cv, tmp_path, uninterrupted):
    run = tmp_path / "run"
    train_cross_view(CrossViewConfig(str(cv), str(run), epochs=1, **TINY))
    first = _weights(run)
    assert first["epoch"] == 1 and not all(torch.equal(first["state"][k], uninterrupted["state"][k])
                                           for k in first["state"])
    record = train_cross_view(CrossViewConfig(str(cv), str(run), epochs=2, resume=True, **TINY))
    assert record["epoch"] == 2 and not record["cancelled"]
    _same(_weights(run), uninterrupted)


@pytest.mark.parametrize("steps", [1, 0, 2])
def test_resume_mid_epoch_equals_an_uninterrupted_run(cv, tmp_path, uninterrupted, steps):
    run = tmp_path / "run"
    # 9 training pairs in batches of 3: 3 steps an epoch; stop after `steps` steps of epoch 2
    record = train_cross_view(CrossViewConfig(str(cv), str(run), epochs=2, **TINY), cancel=_CancelAfter(3 + steps))
    assert record["cancelled"] and record["epoch"] == 1
    from dmlviewer.core.models import load_checkpoint

    info = load_checkpoint(run / "checkpoint.pt")[1]
    assert info["epoch"] == 1 and info["extra"]["cross_view"]["step_in_epoch"] == steps
    train_cross_view(CrossViewConfig(str(cv), str(run), epochs=2, resume=True, **TINY))
    _same(_weights(run), uninterrupted)


def test_resume_refuses_other_options_and_other_pairs(cv, tmp_path):
    from dmlviewer.core.data.cross_view import make_cross_view_data
    from dmlviewer.core.train.loop import TrainingError

    run = tmp_path / "run"
    train_cross_view(CrossViewConfig(str(cv), str(run), epochs=1, **TINY))
    before = (run / "checkpoint.pt").read_bytes()
    with pytest.raises(TrainingError, match="different options: dim 8 -> 16"):
        train_cross_view(CrossViewConfig(str(cv), str(run), epochs=2, resume=True, **{**TINY, "dim": 16}))
    other = make_cross_view_data(tmp_path / "other", pairs=12, seed=9, aerial_size=32, panorama_shape=(16, 64))
    (other / "splits" / "train-19zl.csv").write_text("\n".join(
        (other / "splits" / "train-19zl.csv").read_text().splitlines()[:-1]) + "\n")  # one pair fewer
    with pytest.raises(TrainingError, match="other pairs"):
        train_cross_view(CrossViewConfig(str(other), str(run), epochs=2, resume=True, **TINY))
    with pytest.raises(ValueError, match="already holds a run"):
        train_cross_view(CrossViewConfig(str(cv), str(run), epochs=2, **TINY))
    assert (run / "checkpoint.pt").read_bytes() == before


def _run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


def test_cli_resume_keeps_the_runs_options(cv, tmp_path, capsys):
    run = tmp_path / "run"
    code, err = _run_cli(["train", "--branches", "2", "--dataset", str(cv), "--out", str(run), *CLI], capsys)
    assert code == 0, err
    code, err = _run_cli(["train", "--branches", "2", "--dataset", str(cv), "--out", str(run), "--resume",
                          "--epochs", "2"], capsys)
    assert code == 0, err
    config = json.loads((run / "config.json").read_text())
    assert config["dim"] == 8 and config["reference_size"] == 32 and config["epochs"] == 2
    assert [json.loads(x)["epoch"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]


@pytest.mark.parametrize("extra, has", [
    (["--loss", "triplet"], "does not take --loss"),
    (["--recipe", "default"], "does not take --recipe"),
    (["--grouping", "m"], "does not take --grouping"),
    (["--image-size", "4000"], "--image-size must be from 32 to 2048"),
    (["--classes-per-batch", "2", "--lr", "nan"], "--lr"),
])
def test_cli_refuses_what_does_not_apply(cv, tmp_path, capsys, extra, has):
    code, err = _run_cli(["train", "--branches", "2", "--dataset", str(cv), "--out", str(tmp_path / "run"), *CLI,
                          *extra], capsys)
    assert code == 2 and has in err and "Traceback" not in err
    assert len([x for x in err.splitlines() if "error" in x]) == 1
    assert not (tmp_path / "run").exists()


def test_cli_refuses_a_one_branch_dataset_and_one_without_test_pairs(cv, tmp_path, capsys):
    from dmlviewer.core.data.demo import make_demo_data

    demo = make_demo_data(tmp_path / "demo", classes=3, per_class=2, size=32, seed=0)
    code, err = _run_cli(["train", "--branches", "2", "--dataset", str(demo), "--out", str(tmp_path / "r1"), *CLI],
                         capsys)
    assert code == 2 and "CVUSA" in err and not (tmp_path / "r1").exists()
    no_test = tmp_path / "no_test"
    import shutil

    shutil.copytree(cv, no_test)
    (no_test / "splits" / "val-19zl.csv").write_text("")
    code, err = _run_cli(["train", "--branches", "2", "--dataset", str(no_test), "--out", str(tmp_path / "r2"),
                          *CLI], capsys)
    assert code == 2 and "1 test pair" in err and "Traceback" not in err


def test_ignored_options_warn_and_change_nothing(cv, tmp_path, capsys, caplog):
    base = ["train", "--branches", "2", "--dataset", str(cv), *CLI]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    assert main([*base, "--out", str(tmp_path / "b"), "--num-workers", "2", "--log-every", "5"]) == 0
    assert "ignores --log-every, --num-workers" in caplog.text
    _same(_weights(tmp_path / "a"), _weights(tmp_path / "b"))


# ------------------------------------------------------------------ real processes


def _start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dmlviewer", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True, text=True)


def _temps(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp" in p.name] if folder.exists() else []


def _wait(predicate, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.002)
    return False


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL/SIGTERM of a process group")
def test_a_killed_run_leaves_a_loadable_checkpoint_and_resume_finishes(cv, tmp_path, capsys):
    from dmlviewer.core.models import load_checkpoint

    run = tmp_path / "run"
    argv = ["train", "--branches", "2", "--dataset", str(cv), "--out", str(run), *CLI[2:], "--epochs", "40"]
    proc = _start(argv)
    # kill while a file is being written (a temporary file of ours exists), a checkpoint already saved
    caught = _wait(lambda: (run / "checkpoint.pt").exists() and bool(_temps(run)))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert caught or (run / "checkpoint.pt").exists()
    _model, info = load_checkpoint(run / "checkpoint.pt")  # whole: loads
    epoch = info["epoch"]
    assert 1 <= epoch < 40
    resume = ["train", "--branches", "2", "--dataset", str(cv), "--out", str(run), "--resume",
              "--epochs", str(epoch + 1)]
    code, err = _run_cli(resume, capsys)
    assert code == 0, err
    assert not _temps(run), "the next run removes what the killed one left"
    assert load_checkpoint(run / "checkpoint.pt")[1]["epoch"] == epoch + 1
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == list(range(epoch + 2))


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM")
def test_sigterm_saves_a_state_that_resume_finishes(cv, tmp_path, capsys):
    from dmlviewer.core.models import load_checkpoint

    run = tmp_path / "run"
    proc = _start(["train", "--branches", "2", "--dataset", str(cv), "--out", str(run), *CLI[2:],
                   "--epochs", "100000"])
    assert _wait(lambda: (run / "checkpoint.pt").exists())
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "cancelled: state saved" in err and "Traceback" not in err
    info = load_checkpoint(run / "checkpoint.pt")[1]
    epoch, step = info["epoch"], info["extra"]["cross_view"]["step_in_epoch"]
    assert not _temps(run)
    code, err = _run_cli(["train", "--branches", "2", "--dataset", str(cv), "--out", str(run), "--resume",
                          "--epochs", str(epoch + 1)], capsys)
    assert code == 0, err
    assert load_checkpoint(run / "checkpoint.pt")[1]["extra"]["cross_view"]["step_in_epoch"] == 0
    assert step >= 0


def test_a_job_runner_throwing_cancelled_at_a_step_gets_a_saved_state(cv, tmp_path, uninterrupted):
    """The app's job runner throws ``Cancelled`` into a job that runs another step after a
    cancel request: the run saves where it is and ends with ``cancelled``."""
    from dmlviewer.core.progress import Cancelled
    from dmlviewer.core.train.cross_view import train_cross_view_events

    run = tmp_path / "run"
    job = train_cross_view_events(CrossViewConfig(str(cv), str(run), epochs=2, **TINY))
    steps, event = 0, next(job)
    while True:
        if event.kind == "step":
            steps += 1
            if steps == 5:  # the second step of epoch 2
                event = job.throw(Cancelled())
                continue
        if event.kind == "done":
            break
        event = next(job)
    assert event.data["result"]["cancelled"]
    assert next(job, None) is None  # the generator ends (and lets go of the run folder)
    from dmlviewer.core.models import load_checkpoint

    assert load_checkpoint(run / "checkpoint.pt")[1]["extra"]["cross_view"]["step_in_epoch"] == 2
    train_cross_view(CrossViewConfig(str(cv), str(run), epochs=2, resume=True, **TINY))
    _same(_weights(run), uninterrupted)
