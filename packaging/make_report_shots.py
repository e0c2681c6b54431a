"""Regenerate the README's report screenshots (issue 33)::

    python packaging/make_report_shots.py --out docs/screenshots [--dataset data/demo]

- ``report.png``: ``dmlviewer report`` of the shipped demo checkpoint on the demo's test split
  (20 failures), as headless Chromium shows it (1280 x 1000, the top of the page: header,
  metrics and the first failure).
- ``export_pair.png``: the pair view of the report's first failure (the query and its wrong
  top-1) as File > Export View writes it at 2x with the default display options and Matches
  on: the scene of :func:`dmlviewer.core.scene.build_scene` drawn by
  :mod:`dmlviewer.core.scene.draw`.

The demo data are generated into a temporary folder unless ``--dataset`` names them. Needs
Chromium (``python3 -m dmlviewer.system_check --offscreen --install`` installs it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--hide-scrollbars"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dataset", type=Path)
    args = parser.parse_args(argv)

    from dmlviewer.cli import main as cli
    from dmlviewer.core.data import make_demo_data, open_dataset
    from dmlviewer.core.data.images import load_dataset_image
    from dmlviewer.core.explain.pair import explain_pair
    from dmlviewer.core.display import DisplayOptions
    from dmlviewer.core.scene import RowSource, build_scene
    from dmlviewer.core.scene.draw import write
    from dmlviewer.core.models import load_checkpoint
    from dmlviewer.core.report import retrieval_failures
    from dmlviewer.core.evaluate.store import read_features
    from dmlviewer.resources import resource_path
    from dmlviewer.system_check import browser_path

    work = Path(tempfile.mkdtemp(prefix="dmlviewer-report-shots-"))
    try:
        root = args.dataset or make_demo_data(work / "demo")
        checkpoint = str(resource_path("demo_checkpoint.pt"))
        html = work / "report.html"
        if cli(["report", "--checkpoint", checkpoint, "--dataset", str(root), "--out", str(html),
                "--features", str(work / "test.h5")]) != 0:
            return 1
        chromium = browser_path()
        if chromium is None:
            sys.stderr.write("no Chromium: python3 -m dmlviewer.system_check --offscreen --install\n")
            return 1
        args.out.mkdir(parents=True, exist_ok=True)
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={work / 'profile'}", "--window-size=1280,1000",
                        f"--screenshot={args.out / 'report.png'}", html.as_uri()], check=True, capture_output=True,
                       timeout=300)

        dataset = open_dataset(root)
        features = read_features(work / "test.h5", include_raw=False)
        index = {p: i for i, p in enumerate(dataset.paths)}
        rows = [index[p] for p in features.paths]
        first = retrieval_failures(features.embeddings, features.labels)[0]
        q, w = rows[first.query], rows[first.wrong]
        model, _ = load_checkpoint(checkpoint)
        image_q, image_w = load_dataset_image(dataset, q), load_dataset_image(dataset, w)
        expl = explain_pair(model.eval(), image_q, image_w)
        names = [f"{dataset.class_names[int(dataset.labels[i])]}" for i in (q, w)]
        display = DisplayOptions()
        display.matches = True
        scene = build_scene(display, (image_q, image_w), [RowSource("A", expl)],
                            (f"Query · {names[0]}", f"Wrong top-1 · {names[1]}"),
                            title="Export View of the pair view (2x)")
        write(scene, args.out / "export_pair.png", 2.0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
