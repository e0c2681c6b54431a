"""View > OpenGL Viewport: the image panes drawn through OpenGL instead of Qt's raster painter
(issue 40's switch, ``gui/pair/gl_viewport.py``), remembered in the settings
(``options/opengl_viewport``) and off by default.

Toggling it applies at once to the panes on screen (and to a model B row made later). Where
OpenGL cannot be used (the ``offscreen`` platform, a machine without a driver) the entry turns
itself off again, its tooltip and the status bar say why in one line, and the panes stay raster.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction

from dmlviewer.gui.pair import gl_viewport

log = logging.getLogger(__name__)

#: The entry's tooltip while OpenGL is not known to be unavailable: what it does, when it
#: applies, and what was measured (issue 40: keep it only where it measures faster).
TOOLTIP = ("Draw the image panes through OpenGL instead of Qt's raster painter; applies to the "
           "open panes at once. Off by default: on software OpenGL (Mesa llvmpipe under Xvfb) a "
           "hover measured 8-16 times slower than raster; `dmlviewer bench hover` (its opengl row) "
           "measures this machine.")


class ViewportChoice(QObject):
    """The checkable ``action`` for the View menu; ``message`` is the last line it showed
    (why OpenGL is unavailable), or empty."""

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window = window
        self.message = ""
        self.action = QAction("&OpenGL Viewport (Image Panes)", window)
        self.action.setObjectName("openglViewportAction")
        self.action.setCheckable(True)
        self.action.setToolTip(TOOLTIP)
        self.action.setStatusTip(TOOLTIP)
        if _truthy(window.settings.value(gl_viewport.SETTING, False)):
            self.choose(True)
        self.action.toggled.connect(self.choose)

    def choose(self, on: bool) -> bool:
        """OpenGL viewports for the pair view's panes (``on``) or raster ones; returns whether
        they use OpenGL now. The settings keep what is in use."""
        used = self.window.pair_view.set_opengl(on)
        if on and not used:
            problem = gl_viewport.opengl_problem() or "the view kept its raster viewport"
            self.message = f"OpenGL viewport unavailable: {problem}; the image panes stay raster."
            self.action.setToolTip(self.message)
            self.action.setStatusTip(self.message)
            self.window.statusBar().showMessage(self.message, 10000)
        self.action.blockSignals(True)
        self.action.setChecked(used)
        self.action.blockSignals(False)
        self.window.settings.setValue(gl_viewport.SETTING, used)
        log.info("image panes: %s viewport", "OpenGL" if used else "raster")
        return used


def _truthy(value: Any) -> bool:
    """A settings value (INI text: "true"/"false", or a bool) as a bool."""
    return value is True or str(value).strip().lower() in ("true", "1", "yes")
