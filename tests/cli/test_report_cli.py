"""``dmlviewer report`` on the demo checkpoint, read in a real headless Chromium (issue 33).

What a reader sees: the gallery's images decode (every ``img`` has its natural size once the
page has loaded), the gallery holds min(N, the split's wrong top-1 queries) entries, the
number ``evaluate``'s Recall@1 implies, and no request leaves the file (Chromium runs with
every host name unresolvable; the page's resource timing lists nothing, and the file names no
URL). Chromium is installed by the project's set-up for tests (``system_check --offscreen
--install``); without it the browser test is skipped, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import json
import re

import pytest

from dmlviewer.cli import main
from dmlviewer.resources import resource_path
from report_browser import assert_self_contained, read_in_chromium

CHECKPOINT = str(resource_path("demo_checkpoint.pt"))
FAILURES = 6


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory):
    """The demo's classes (the checkpoint's test classes are 11-20), 10 images each."""
    from dmlviewer.core.data import make_demo_data

    return make_demo_data(tmp_path_factory.mktemp("demo") / "data", classes=20, per_class=10, seed=0)


@pytest.fixture(scope="module")
def report(demo_root, tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    out, figures = folder / "report.html", folder / "figures"
    assert main(["report", "--checkpoint", CHECKPOINT, "--dataset", str(demo_root), "--failures", str(FAILURES),
                 "--out", str(out), "--figures", str(figures), "--features", str(folder / "f.h5")]) == 0
    return out, figures, folder


def _evaluate_recall(demo_root, folder, capsys) -> dict:
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", CHECKPOINT, "--dataset", str(demo_root), "--split", "test",
                 "--out", str(folder / "evaluated.h5"), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_report_reads_in_chromium_offline(report, demo_root, capsys):
    out, figures, folder = report
    assert_self_contained(out.read_text(encoding="utf-8"))

    metrics = _evaluate_recall(demo_root, folder, capsys)
    wrong = round((1 - metrics["recall@1"]) * metrics["num_queries"])
    assert wrong > 0
    expected = min(FAILURES, wrong)

    seen = read_in_chromium(out, folder)
    assert seen["fetched"] == []
    assert sum(f.startswith("failure-") for f in seen["figures"]) == expected
    maps = [i for i in seen["images"] if i["cls"] == "map"]
    # per entry one picture of its scene (wrong top-1 and best same class, each with its matches and
    # the partial map of the query's strongest point), drawn by matplotlib
    assert len(maps) == expected
    assert all(i["complete"] and i["width"] > 0 and i["height"] > 0 for i in seen["images"]), seen["images"][:3]
    # --figures: every gallery figure as SVG, its captions as text
    svgs = sorted(figures.glob("*.svg"))
    assert len(svgs) == expected
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svgs[0].read_text(encoding="utf-8"))
    assert any(t.startswith("Wrong top-1: Similarity (cosine)") for t in texts), texts


def test_the_report_names_the_file_on_stdout_and_uses_the_feature_file(report, demo_root, capsys):
    out, _, folder = report
    capsys.readouterr()
    again = folder / "again.html"
    assert main(["report", "--checkpoint", CHECKPOINT, "--dataset", str(demo_root), "--failures", "2",
                 "--out", str(again), "--features", str(folder / "f.h5")]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"report written to {again}\n"
    assert "feature file" in again.read_text(encoding="utf-8")  # the metrics table says where they came from
    assert "extracting" not in captured.err


@pytest.mark.parametrize("case", ["missing checkpoint", "no failures", "zero failures", "bad pairs",
                                  "changes of one model"])
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(case, demo_root, tmp_path, capsys):
    from dmlviewer.core.data import make_demo_data

    dataset, extra = str(demo_root), []
    checkpoint = CHECKPOINT
    if case == "missing checkpoint":
        checkpoint = str(tmp_path / "missing.pt")
    elif case == "no failures":  # the test split is one class: every nearest neighbour is right
        dataset = str(make_demo_data(tmp_path / "one", classes=2, per_class=4, size=64, seed=0))
    elif case == "zero failures":
        extra = ["--failures", "0"]
    elif case == "changes of one model":  # what changed needs two models
        extra = ["--changes", "3"]
    else:
        (tmp_path / "pairs.txt").write_text("not/an/image.jpg other.jpg\n")
        extra = ["--pairs", str(tmp_path / "pairs.txt")]
    out = tmp_path / "report.html"
    capsys.readouterr()
    assert main(["report", "--checkpoint", checkpoint, "--dataset", dataset, "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("dmlviewer report: error: "), err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".report.html")]
