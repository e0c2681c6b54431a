"""An OpenGL viewport for the image panes, behind a setting (issue 40: "try an OpenGL viewport
behind a setting, and keep it only where it measures faster").

A pane's view is a pyqtgraph ``GraphicsView``; :func:`set_viewport` switches it between a
plain widget (raster, Qt's software painter) and pyqtgraph's ``QOpenGLWidget`` viewport
(``GraphicsView.useOpenGL``). Whether OpenGL can be used here is probed once per process by
creating a context and making it current on an offscreen surface (:func:`opengl_problem`):
the ``offscreen`` platform (tests, ``bench`` without a display) has none, and then the panes
stay raster and the caller says why in one line, never a crash. Nothing touches OpenGL while
the setting is off.

The GL viewport keeps the panes' minimal repaints (the crosshair's strips, the overlay's
rectangle, issue 24): its framebuffer is kept between paints (``PartialUpdate``), so the
regions QGraphicsView repaints land on the previous frame instead of an undefined one.
"""

from __future__ import annotations

import functools
import logging

from PySide6.QtWidgets import QGraphicsView

log = logging.getLogger(__name__)

#: QSettings key of the switch (``true``: the image panes draw through OpenGL).
SETTING = "options/opengl_viewport"


def _llvm_users_first() -> None:
    """Load triton, when installed, before any OpenGL driver. Mesa's software OpenGL (llvmpipe,
    what Xvfb and machines without a GPU driver give) links LLVM; triton (installed with CUDA
    builds of torch, imported by ``torch._dynamo`` on the first model built) carries its own
    LLVM, whose static initializers crash the process (a double free in LLVM's option
    registry) when it is loaded after Mesa's. The other order works (measured under Xvfb)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return
    try:
        import triton  # noqa: F401 - only loaded
    except Exception:  # noqa: BLE001 - a broken triton is torch's concern, not the viewport's
        log.debug("triton could not be imported before OpenGL", exc_info=True)


#: Qt platforms whose windows cannot show a ``QOpenGLWidget`` ("QOpenGLWidget is not supported
#: on this platform"): ``offscreen`` makes GL contexts when a display is near (GLX) but never
#: composes them into its windows.
NO_OPENGL_WIDGETS = frozenset({"offscreen", "minimal", "vnc", "linuxfb"})


@functools.lru_cache(maxsize=1)
def _probe() -> str | None:
    from PySide6.QtGui import QGuiApplication, QOffscreenSurface, QOpenGLContext

    app = QGuiApplication.instance()
    if app is None:
        return "no Qt application yet"
    try:
        from PySide6.QtOpenGLWidgets import QOpenGLWidget  # noqa: F401 - only whether it exists
    except ImportError as exc:
        return f"Qt's OpenGL widgets are missing ({exc})"
    if app.platformName() in NO_OPENGL_WIDGETS:
        return f"Qt's '{app.platformName()}' platform composes no OpenGL widgets"
    _llvm_users_first()
    context = QOpenGLContext()
    if not context.create():
        return f"no OpenGL on Qt's '{app.platformName()}' platform"
    surface = QOffscreenSurface()
    surface.setFormat(context.format())
    surface.create()
    if not surface.isValid() or not context.makeCurrent(surface):
        return f"an OpenGL context could not be used on Qt's '{app.platformName()}' platform"
    functions = context.functions()
    log.info("OpenGL for the image panes: %s (%s)", functions.glGetString(0x1F01),  # GL_RENDERER
             functions.glGetString(0x1F02))  # GL_VERSION
    context.doneCurrent()
    surface.destroy()
    return None


def opengl_problem() -> str | None:
    """Why the panes cannot have an OpenGL viewport here (one line), or None when they can.
    Probed once per process (a context made current on an offscreen surface)."""
    problem = _probe()
    if problem is not None:
        log.info("OpenGL viewport unavailable: %s", problem)
    return problem


def is_opengl(view: QGraphicsView) -> bool:
    """Whether ``view`` draws through an OpenGL viewport."""
    try:
        from PySide6.QtOpenGLWidgets import QOpenGLWidget
    except ImportError:
        return False
    return isinstance(view.viewport(), QOpenGLWidget)


def set_viewport(view, opengl: bool) -> bool:
    """Give the pyqtgraph ``GraphicsView`` ``view`` an OpenGL viewport (``opengl``) or a raster
    one; raster when OpenGL is unavailable (:func:`opengl_problem`). Returns whether the view
    now draws through OpenGL. The old viewport is deleted by Qt: whoever watched its events
    must watch the new one (``PaneColumn.set_opengl``)."""
    if opengl and opengl_problem() is not None:
        opengl = False
    if is_opengl(view) == opengl:
        return opengl
    view.useOpenGL(opengl)
    viewport = view.viewport()
    if opengl:
        from PySide6.QtOpenGLWidgets import QOpenGLWidget

        viewport.setUpdateBehavior(QOpenGLWidget.PartialUpdate)
    # A new viewport is the view's newest child, stacked over the labels drawn on the view
    # (read-out, message): it goes back under them, where the first viewport was.
    viewport.lower()
    return is_opengl(view)
