"""Read a report in a real headless Chromium, offline (issues 33 and 41): every host name is
unresolvable, and a probe appended to a copy of the page (the report itself holds no script)
says, after the load event, what the page decoded and fetched."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from dmlviewer.system_check import browser_path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--host-resolver-rules=MAP * ~NOTFOUND"]
#: the probe: each image (with the id of the figure it belongs to), each figure's id, and every
#: resource fetched that is not a data: URI, as JSON in a <pre>
PROBE = """<script>
window.addEventListener("load", () => {
  const images = [...document.images].map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth,
                                                height: i.naturalHeight, cls: i.className,
                                                figure: (i.closest("div.figure") || {}).id || ""}));
  const fetched = performance.getEntriesByType("resource").map(e => e.name).filter(n => !n.startsWith("data:"));
  const figures = [...document.querySelectorAll("div.figure")].map(d => d.id);
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify({images, fetched, figures});
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str:
    """Chromium's path; the test is skipped without one, except in CI (``CI=true``), where it fails."""
    found = browser_path()
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("Chromium is missing in CI: the set-up (python3 -m dmlviewer.system_check --offscreen "
                        "--install) installs it")
        pytest.skip("no Chromium on this machine (python3 -m dmlviewer.system_check --offscreen --install "
                    "installs it); the report is not checked in a browser")
    return found


def assert_self_contained(text: str) -> None:
    """No script, no URL anywhere (images are data: URIs, no web font, no link)."""
    assert "<script" not in text.lower()
    readable = re.sub(r'"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]*"', '""', text)  # the embedded images
    assert not re.search(r"https?:|//[a-z]|url\(|@import|<link|<iframe|data:", readable, re.I)
    assert all(src.startswith("data:image/") for src in re.findall(r'src="([^"]*)"', text))


def read_in_chromium(report: Path, folder: Path) -> dict:
    """``{"images", "fetched", "figures"}`` of the report at ``report`` as Chromium loaded it."""
    browser = chromium()
    probe = folder / f"probe-{report.stem}.html"
    probe.write_text(report.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    profile = tempfile.mkdtemp(prefix="dmlviewer-chromium-")
    try:
        done = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                               "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=180)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"Chromium did not load the page: {done.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))
