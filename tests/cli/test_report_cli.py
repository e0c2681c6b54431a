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
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from dmlviewer.cli import main
from dmlviewer.resources import resource_path
from dmlviewer.system_check import browser_path

CHECKPOINT = str(resource_path("demo_checkpoint.pt"))
FAILURES = 6
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--host-resolver-rules=MAP * ~NOTFOUND"]
#: appended to a copy of the report for the check only (the report itself holds no script):
#: after the load event, what the page decoded and fetched, as JSON in a <pre>
PROBE = """<script>
window.addEventListener("load", () => {
  const images = [...document.images].map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth,
                                                height: i.naturalHeight, cls: i.className}));
  const fetched = performance.getEntriesByType("resource").map(e => e.name).filter(n => !n.startsWith("data:"));
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify({images, fetched, gallery: document.querySelectorAll("div.figure[id^=failure-]").length});
  document.body.appendChild(pre);
});
</script>"""


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


def _chromium() -> str:
    found = browser_path()
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("Chromium is missing in CI: the set-up (python3 -m dmlviewer.system_check --offscreen "
                        "--install) installs it")
        pytest.skip("no Chromium on this machine (python3 -m dmlviewer.system_check --offscreen --install "
                    "installs it); the report is not checked in a browser")
    return found


def test_the_report_reads_in_chromium_offline(report, demo_root, capsys):
    out, figures, folder = report
    text = out.read_text(encoding="utf-8")
    # self-contained: no script, no URL anywhere (images are data: URIs, no web font, no link)
    assert "<script" not in text.lower()
    readable = re.sub(r'"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]*"', '""', text)  # the embedded images
    assert not re.search(r"https?:|//[a-z]|url\(|@import|<link|<iframe|data:", readable, re.I)
    assert all(src.startswith("data:image/") for src in re.findall(r'src="([^"]*)"', text))

    metrics = _evaluate_recall(demo_root, folder, capsys)
    wrong = round((1 - metrics["recall@1"]) * metrics["num_queries"])
    assert wrong > 0
    expected = min(FAILURES, wrong)

    chromium = _chromium()
    probe = folder / "probe.html"
    probe.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    profile = tempfile.mkdtemp(prefix="dmlviewer-chromium-")
    try:
        done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                               "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=180)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"Chromium did not load the page: {done.stderr[-2000:]}"
    seen = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))
    assert seen["fetched"] == []
    assert seen["gallery"] == expected
    maps = [i for i in seen["images"] if i["cls"] == "map"]
    # per entry two rows (wrong top-1, best same class): 2 overall maps, the matches, the query's
    # points and 3 partial maps
    assert len(maps) == expected * 2 * 7
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


@pytest.mark.parametrize("case", ["missing checkpoint", "no failures", "zero failures", "bad pairs"])
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
    else:
        (tmp_path / "pairs.txt").write_text("not/an/image.jpg other.jpg\n")
        extra = ["--pairs", str(tmp_path / "pairs.txt")]
    out = tmp_path / "report.html"
    capsys.readouterr()
    assert main(["report", "--checkpoint", checkpoint, "--dataset", dataset, "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("dmlviewer report: error: "), err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".report.html")]
