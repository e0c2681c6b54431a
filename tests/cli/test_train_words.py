"""Issue 42 item 10: ``dmlviewer train``'s words, through real processes. Each warning is said
once on stderr; a batch larger than two tiny classes says what it holds (their images, not a
thousand draws of each); a ``--pretrained`` file that is no weights file is refused before any
data is read; ``--resume`` of a finished run with another ``--dim`` names the option."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dmlviewer.core.data import make_demo_data

COMMON = ["--epochs", "1", "--steps-per-epoch", "1", "--image-size", "64", "--dim", "32", "--num-workers", "0",
          "--device", "cpu", "--seed", "0"]


def _train(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dmlviewer", "train", *map(str, argv)], capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Four classes of four images: two training classes."""
    root = tmp_path_factory.mktemp("tiny") / "data"
    make_demo_data(root, classes=4, per_class=4, size=64, seed=0)
    return root


def test_a_huge_batch_of_two_tiny_classes_says_what_it_holds_once(tiny, tmp_path):
    done = _train("--dataset", tiny, "--out", tmp_path / "run", *COMMON, "--classes-per-batch", "1000")
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "training classes with at least two images" in line]
    assert len(said) == 1, done.stderr  # the log record only, not echoed again
    assert "(4 images each): batches of 2 classes x 4 images instead of 1000 x 4" in said[0]


def test_a_text_file_as_pretrained_weights_is_refused_before_the_data_is_read(tiny, tmp_path):
    notes = tmp_path / "notes.pt"
    notes.write_text("not weights\n" * 10)
    done = _train("--dataset", tiny, "--out", tmp_path / "run", *COMMON, "--pretrained", notes)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"--pretrained {notes} is not a weights file, it looks like" in done.stderr
    assert "recipe" not in done.stderr and not (tmp_path / "run").exists()  # nothing started


def test_resuming_a_finished_run_with_another_dim_names_the_option(tiny, tmp_path):
    run = tmp_path / "run"
    assert _train("--dataset", tiny, "--out", run, *COMMON).returncode == 0
    done = _train("--dataset", tiny, "--out", run, *COMMON[:-8], "--dim", "16", *COMMON[-6:], "--resume")
    assert done.returncode != 0
    assert "cannot resume with different options: --dim 32 -> 16" in done.stderr, done.stderr
    assert "nothing to resume" not in done.stderr
