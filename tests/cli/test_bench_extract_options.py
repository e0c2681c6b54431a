"""``bench extract --backbone/--batch-size`` (issue 43: resnet50 at batch 128 on a GPU): bad
values are one line, not a traceback; good ones reach the benchmark's result."""

from __future__ import annotations

import pytest

from dmlviewer.cli import main


def test_a_bad_batch_size_is_refused_when_parsed(capsys):
    assert main(["bench", "extract", "--batch-size", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument --batch-size" in err[0], err


def test_an_unknown_backbone_is_one_line(capsys):
    assert main(["bench", "extract", "--quick", "--backbone", "nope"]) == 1
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("INFO")]
    assert len(err) == 1 and err[0].startswith("dmlviewer bench: error: extract: --backbone: unknown backbone 'nope'")


@pytest.mark.slow
def test_the_batch_size_reaches_the_result(monkeypatch):
    import argparse

    from dmlviewer.bench import extract

    result = extract.run(argparse.Namespace(quick=True, device="cpu", decode="cpu", backbone="small_cnn",
                                            batch_size=40))
    assert result["batch_size"] == 40 and result["model"] == "small_cnn@128" and result["images"] == 200
