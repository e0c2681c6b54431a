"""Render the application icon (resources/icon_app.svg) to the PNG sizes desktops use.

    QT_QPA_PLATFORM=offscreen python packaging/make_icons.py

writes resources/icons/dmlviewer-{16,24,32,48,64,128,256,512}.png (the desktop entry, the
PyInstaller recipe and Windows/macOS icon converters take them from there).
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

ROOT = Path(__file__).resolve().parents[1]
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def main() -> int:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 - needed by QPainter
    renderer = QSvgRenderer(str(ROOT / "resources" / "icon_app.svg"))
    out = ROOT / "resources" / "icons"
    out.mkdir(exist_ok=True)
    for size in SIZES:
        image = QImage(size, size, QImage.Format_ARGB32)
        image.fill(Qt.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.Antialiasing)
        renderer.render(painter)
        painter.end()
        image.save(str(out / f"dmlviewer-{size}.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
