"""Where the main window's docks go: the default layout, View > Reset Layout, the layout saved
with the window, and the pair view before the docks when the window is resized (issue 23
item 7) or the Jobs dock opens (issue 42 item 4: a tab beside Retrieval where its bottom strip
would shrink the photographs below :data:`MIN_IMAGE_PX`).

The pair view has priority: the side docks get the width they need and, below
:data:`NARROW_WIDTH`, share one column (the Retrieval dock a tab beside the Dataset dock); the
bottom docks (problems, jobs) share one short strip. QMainWindow gives a change of width to the
central widget and lets the docks keep theirs, so a window made narrow squeezed the pair view's
images to a few pixels: :class:`DockLayout` watches the window's resizes and lays the docks out
again when the width crosses :data:`NARROW_WIDTH`.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QEvent, QObject, QSettings, Qt, QTimer

from dmlviewer.gui.common.widgets import clamp_to_screen

#: Below this window width the Retrieval dock shares the Dataset dock's column (as a tab),
#: so that the pair view keeps at least about half of the width (issue 23 item 7).
NARROW_WIDTH = 1100
#: Least side (pixels) of a photograph of the pair view that the Jobs dock's strip at the bottom
#: may leave; where it would leave less (two models' rows on a 768-px screen: about 160 px), the
#: Jobs dock opens as a tab beside the Retrieval dock instead (issue 42 item 4).
MIN_IMAGE_PX = 250
#: ``QMainWindow.saveState``'s version of the saved dock layout: bumped when the layout changes
#: incompatibly (old saved states are then ignored)
STATE_VERSION = 1


class DockLayout(QObject):
    """The dock layout of a main window (module docstring); an event filter on it once the
    saved layout is restored (:meth:`restore`)."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        #: Whether the docks were last laid out for a narrow window (None: not yet, or a
        #: restored layout, taken as made for the width it has).
        self.narrow: bool | None = None
        self._watching = False
        # Once the window has laid out a change (the Jobs dock opened, a second model's row
        # added, the docks rearranged), the Jobs dock's strip must still leave the photographs
        # their room (issue 42 item 4).
        self._room_check = QTimer(self, singleShot=True, interval=50)
        self._room_check.timeout.connect(self._make_room_for_images)
        jobs = self._jobs_dock()
        if jobs is not None:
            jobs.visibilityChanged.connect(self._jobs_shown)
        for view in (getattr(window, "pair_view", None), getattr(window, "group_tabs", None)):
            if view is not None:  # a pane shrinks when a row is added or a dock grows
                view.panes[0].view.sigResized.connect(self._pane_resized)

    def _jobs_dock(self):
        return getattr(getattr(self.window, "tools", None), "jobs_dock", None)

    def restore(self, settings: QSettings) -> None:
        """The window's geometry and docks as saved (untrusted values: kept only when they are
        what Qt wrote), moved onto this screen; then the docks give way on resizes."""
        w = self.window
        geometry, state = settings.value("window/geometry"), settings.value("window/state")
        if isinstance(geometry, QByteArray):
            w.restoreGeometry(geometry)
            clamp_to_screen(w)  # saved on a larger monitor: shrink and move it onto this one
        if isinstance(state, QByteArray):
            w.restoreState(state, STATE_VERSION)
            if w.width() < NARROW_WIDTH:  # restored onto a smaller screen: the pair view first
                QTimer.singleShot(0, self.default_sizes)
        if not self._watching:
            self._watching = True
            w.installEventFilter(self)

    def save(self, settings: QSettings) -> None:
        settings.setValue("window/geometry", self.window.saveGeometry())
        settings.setValue("window/state", self.window.saveState(STATE_VERSION))

    def first_shown(self, settings: QSettings) -> None:
        """The window is on screen with its size: without a saved layout, the default one."""
        if not isinstance(settings.value("window/state"), QByteArray):
            QTimer.singleShot(0, self.default_sizes)

    def reset(self) -> None:
        """View > Reset Layout: every dock back in its area, the problems and jobs docks hidden
        (shown when there is something to list, or on demand), the default sizes."""
        w = self.window
        for dock, area in ((w.browser_dock, Qt.LeftDockWidgetArea), (w.retrieval_dock, Qt.RightDockWidgetArea),
                           (w.problems_dock, Qt.BottomDockWidgetArea)):
            dock.setFloating(False)
            w.addDockWidget(area, dock)
            dock.show()
        w.problems_dock.hide()
        jobs = self._jobs_dock()
        if jobs is not None:  # the status bar shows the running job; the dock opens on demand
            jobs.setFloating(False)
            w.addDockWidget(Qt.BottomDockWidgetArea, jobs)
            jobs.hide()
        self.default_sizes()

    def default_sizes(self) -> None:
        """Side docks at the width they need (one side column on a narrow window), bottom docks
        in one short strip."""
        w = self.window
        jobs = self._jobs_dock()
        if jobs is not None and not jobs.isFloating():
            w.tabifyDockWidget(w.problems_dock, jobs)  # hidden until asked for (status bar, View)
            if jobs.isVisible():
                w.resizeDocks([jobs], [min(170, w.height() // 5)], Qt.Vertical)
        compact = w.width() < 1500  # side docks at what they need, the pair view the rest
        browser = w.browser.minimumWidth() if compact else 400
        docked = [d for d in (w.browser_dock, w.retrieval_dock) if not d.isFloating()]
        self.narrow = w.width() < NARROW_WIDTH
        if self.narrow and len(docked) == 2:
            # One column for both: the Retrieval dock becomes a tab beside the Dataset dock.
            w.tabifyDockWidget(w.browser_dock, w.retrieval_dock)
            w.browser_dock.raise_()
            w.resizeDocks([w.browser_dock], [browser], Qt.Horizontal)
            return
        if w.retrieval_dock in w.tabifiedDockWidgets(w.browser_dock):  # wide again: its own side
            w.addDockWidget(Qt.RightDockWidgetArea, w.retrieval_dock)
        w.resizeDocks([w.browser_dock, w.retrieval_dock], [browser, 250 if compact else 300], Qt.Horizontal)

    def _jobs_shown(self, visible: bool) -> None:
        """The Jobs dock was opened: once the window has laid it out, it leaves the bottom for a
        tab beside the Retrieval dock where its strip squeezes a photograph below
        :data:`MIN_IMAGE_PX`."""
        if visible:
            self._room_check.start()

    def _make_room_for_images(self) -> None:
        w, jobs = self.window, self._jobs_dock()
        if (jobs is None or not jobs.isVisible() or jobs.isFloating()
                or w.dockWidgetArea(jobs) != Qt.BottomDockWidgetArea or w.retrieval_dock.isFloating()):
            return
        if smallest_image(self._shown_panes()) >= MIN_IMAGE_PX:
            return
        w.tabifyDockWidget(w.retrieval_dock, jobs)  # the Retrieval dock's column (or its tab group)
        jobs.raise_()

    def _shown_panes(self) -> list:
        """The image panes of the window's current tab (the pair view's rows or the group tab's)."""
        current = getattr(getattr(self.window, "tabs", None), "currentWidget", lambda: None)()
        panes = getattr(current, "all_panes", None) or getattr(current, "panes", None) or ()
        return [p for p in panes if p.isVisible()]

    def _pane_resized(self, *_args) -> None:
        jobs = self._jobs_dock()
        if jobs is not None and jobs.isVisible() and not jobs.isFloating():
            self._room_check.start()

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt API
        if obj is self.window and event.type() == QEvent.Resize and self.window.isVisible():
            narrow = self.window.width() < NARROW_WIDTH
            if self.narrow is None:  # a restored layout: taken as made for this width
                self.narrow = narrow
            elif narrow != self.narrow:
                self.narrow = narrow
                QTimer.singleShot(0, self.default_sizes)
        return False


def smallest_image(panes) -> float:
    """The smallest side (pixels) of the photographs of ``panes`` when fitted to their views
    (what Fit shows: the view's size over the photograph's aspect, whatever the zoom); infinite
    without a photograph."""
    sides = []
    for pane in panes:
        if pane.shape is None:
            continue
        (height, width), box = pane.shape, pane.view.sceneBoundingRect()
        scale = min(box.width() / width, box.height() / height)
        sides.append(scale * min(height, width))
    return min(sides, default=float("inf"))
