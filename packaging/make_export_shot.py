"""Regenerate the README's ``docs/screenshots/export_pdf.png`` (issue 39): an exported PDF page
rendered at 300 dpi beside the screen it came from. Run it under a virtual X server::

    xvfb-run -a -s "-screen 0 1600x1000x24" python packaging/make_export_shot.py --out docs/screenshots

It opens the main window on the demo dataset and the shipped demo checkpoint (user folders in a
temporary folder, as :mod:`make_screenshots`), shows the pair of the README's ``pair_view.png``
(:func:`make_screenshots.choose_pair`) with the query point pinned on the tail, its partial map
on the reference, the *plasma* colour map and Matches on, and grabs the pair view. It then
exports the same view through File > Export View (the real action, its dialog answered by this
script: 1x, no clipboard; the save dialog answered with a PDF path), waits for the export job,
renders the PDF's page with ``pdftoppm -r 300 -png`` (poppler-utils), and puts the screen (left)
and the page (right) side by side at one height, reduced to 256 colours when large.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_screenshots as shots  # noqa: E402 - the screenshots' driver, pair choice and PNG writer

log = logging.getLogger("make_export_shot")

#: The composed picture's height in pixels (both halves), and its name.
HEIGHT = 820
NAME = "export_pdf.png"
COLORMAP = "plasma"


def scenario(window, out: Path, work: Path) -> Iterator[shots.Wait]:
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QDialog, QFileDialog

    from dmlviewer.gui.window import export
    from dmlviewer.gui.window.app import demo_paths

    dataset_dir, checkpoint = demo_paths()
    window.open_checkpoint(checkpoint)
    window.open_dataset(dataset_dir)
    window.tools.jobs_dock.hide()
    window.resizeDocks([window.browser_dock, window.retrieval_dock], [260, 300], Qt.Horizontal)
    query, reference, pin = shots.choose_pair(window.dataset, window.model)
    view, session = window.pair_view, window.session
    window.set_pair(query, reference)
    yield shots.Wait("the pair's explanation", signal=view.pair_ready, done=lambda: view.state == "ready")
    session.display.colormap = COLORMAP
    session.display.matches = True
    session.set_pinned((0, *pin))
    yield shots.Wait("the pinned point's partial map and no job running", timeout_s=900,
                     done=lambda: view.link.pinned == session.pinned and not window.runner.busy
                     and not window.loader.busy)
    yield shots.delay(400)
    screen = work / "screen.png"
    if not view.grab().save(str(screen)):
        raise OSError(f"could not write {screen}")

    pdf = work / "pair_view.pdf"

    def answer(dialog) -> int:
        dialog.what.setCurrentIndex(0)  # the pair view
        dialog.scale.setCurrentIndex(0)
        dialog.copy.setChecked(False)
        dialog.source.setChecked(False)
        return QDialog.Accepted

    export.ExportDialog.exec = answer
    QFileDialog.getSaveFileName = staticmethod(lambda *a, **k: (str(pdf), "PDF document (*.pdf)"))
    action = next(a for a in window.menuBar().actions()[0].menu().actions() if a.text() == "&Export View…")
    action.trigger()
    job = next(j for j in [*window.runner.jobs, *window.runner.history] if j.name == f"Export View to {pdf.name}")
    yield shots.wait_job(window.runner, job, "the export job", 300)
    shots.check_job(job)
    page = work / "page"
    subprocess.run(["pdftoppm", "-r", "300", "-png", "-singlefile", str(pdf), str(page)], check=True, timeout=120)
    compose(screen, page.with_suffix(".png"), out / NAME)


def compose(screen: Path, page: Path, target: Path) -> None:
    """``screen`` (left) and ``page`` (right) at :data:`HEIGHT` pixels high, on white, with a
    gap; reduced to 256 colours when larger than :data:`make_screenshots.MAX_BYTES`."""
    from PIL import Image

    halves = []
    for path in (screen, page):
        with Image.open(path) as image:
            rgb = image.convert("RGB")
        width = round(rgb.width * HEIGHT / rgb.height)
        halves.append(rgb.resize((width, HEIGHT), Image.Resampling.LANCZOS))
    gap = 24
    canvas = Image.new("RGB", (halves[0].width + gap + halves[1].width, HEIGHT), "white")
    canvas.paste(halves[0], (0, 0))
    canvas.paste(halves[1], (halves[0].width + gap, 0))
    canvas.save(target, optimize=True)
    lossless = target.stat().st_size
    if lossless > shots.MAX_BYTES:
        shots.shrink_png(target)
    log.info("wrote %s (%d x %d, %.0f KB; %.0f KB lossless)", target, canvas.width, canvas.height,
             target.stat().st_size / 1024, lossless / 1024)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "screenshots"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("fontTools").setLevel(logging.WARNING)  # matplotlib's PDF font subsetting
    if shutil.which("pdftoppm") is None:
        sys.stderr.write("pdftoppm is missing (Debian/Ubuntu: apt-get install poppler-utils)\n")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="dmlviewer-export-shot-"))
    started = time.monotonic()
    try:
        shots.isolate_user_folders(tmp)
        from dmlviewer.gui.window.app import create_app
        from dmlviewer.gui.window.main_window import MainWindow

        app = create_app()
        window = MainWindow()
        window.resize(*shots.WINDOW_SIZE)
        window.show()
        work = tmp / "work"
        work.mkdir()
        driver = shots.Driver(app, scenario(window, out, work))
        driver.start()
        app.exec()
        window.shutdown()
        log.info("done in %.0f s (status %d)", time.monotonic() - started, driver.status)
        return driver.status
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
