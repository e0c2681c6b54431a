"""The command line's contract: every option described with its default, ranges refused when
the arguments are parsed, one JSON style, one line and a status for each kind of failure."""

from __future__ import annotations

import argparse
import errno
import json
import subprocess
import sys

import pytest

from dmlviewer.cli import build_parser, main
from dmlviewer.commands.common import print_json


def _subparsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_every_option_is_described_with_its_default():
    for name, parser in _subparsers().items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help is argparse.SUPPRESS:
                continue
            assert action.help, f"{name} {action.option_strings or action.dest} has no description"
            shown = formatter._get_help_string(action)
            if action.option_strings and not (action.default is None or action.default is False
                                              or action.default is argparse.SUPPRESS):  # 0 is stated
                assert "default" in shown.lower(), f"{name} {action.option_strings}: {shown!r} hides its default"
        parser.format_help()  # every help string formats (no stray %)


def test_a_default_of_zero_is_stated():
    """Issue 42 item 10: ``make-demo-data --help`` names ``--seed``'s default 0 (0 == False hid it)."""
    done = subprocess.run([sys.executable, "-m", "dmlviewer", "make-demo-data", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "random seed (default: 0)" in " ".join(done.stdout.split())


def test_region_help_says_order_and_units():
    text = _subparsers()["retrieve"].format_help()
    assert "y0,x0,y1,x1" in text and "pixels" in text and "top y0, left x0" in text


@pytest.mark.parametrize("argv, option", [
    (["localize", "--checkpoint", "c", "--dataset", "d", "--method", "decomposition", "--thresholds", "0:1:1e-12"],
     "--thresholds"),
    (["make-demo-data", "out", "--size", "1000000"], "--size"),
    (["train", "--dataset", "d", "--out", "r", "--image-size", "100000"], "--image-size"),
    (["train", "--dataset", "d", "--out", "r", "--seed", str(2**70)], "--seed"),
    (["train", "--dataset", "d", "--out", "r", "--lr", "nan"], "--lr"),
    (["train", "--dataset", "d", "--out", "r", "--diversity", "nan"], "--diversity"),
    (["train", "--dataset", "d", "--out", "r", "--device", ""], "--device"),
    (["explain", "--checkpoint", "c", "--query", "q", "--reference", "r", "--out", "o", "--size", "100000"], "--size"),
    (["bench", "metrics", "--device", "tpu"], "--device"),
])
def test_ranges_are_refused_when_parsed(argv, option, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"argument {option}" in err[0], err


def test_json_is_indented_and_strict(capsys):
    print_json({"recall@1": 0.5, "nmi": float("nan"), "values": [float("inf"), 1]})
    out = capsys.readouterr().out
    assert out.startswith("{\n  \"recall@1\": 0.5") and out.endswith("}\n")
    assert json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")) == {
        "recall@1": 0.5, "nmi": None, "values": [None, 1]}


def test_system_errors_are_one_line_with_status_1(monkeypatch, capsys, tmp_path):
    import dmlviewer.commands.make_demo_data as command

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("dmlviewer.core.data.demo.make_demo_data", full)
    assert main(["make-demo-data", str(tmp_path / "demo")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"dmlviewer make-demo-data: error: no space left on {tmp_path} (writing {tmp_path / 'demo'})"]
    assert command.MAX_CLASSES == __import__("dmlviewer.core.data.demo", fromlist=["x"]).MAX_CLASSES
