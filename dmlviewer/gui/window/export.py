"""File > Export View (issue 33 item 1): the pair view, a group attention tab or a plot as a
figure file (PNG at 1x-4x, SVG, PDF) and on the clipboard.

The pair view is exported as what is on screen (issue 39): the headless scene
(:func:`dmlviewer.core.scene.build_scene`) made from the session's display options and pinned
point and the pair view's rows' explanations (rows A and B or the difference, method, sign,
scale mode, colour map, opacity, the pinned point's partial map, matches on or off, the
orientation guides), drawn by matplotlib (:mod:`dmlviewer.core.scene.draw`): PNG, SVG and PDF,
at 1x-4x only the pixels change. The scene is made on the GUI thread (it only reads arrays
already computed: maps not yet computed are never computed here, Export View says so instead)
and drawn in the window's job queue (:func:`export_scene`), so the window stays responsive
through matplotlib's seconds of drawing. The group tab is a scene too
(:func:`dmlviewer.core.scene.group.group_scene`). The plots are still
:class:`~dmlviewer.core.figures.Figure` objects (a :class:`~dmlviewer.core.figures.Plot` from a
plot's curves and points, or
:class:`~dmlviewer.core.figures.Bars` from its bars) laid out by the core's SVG writer, which
this module turns into PNG (rendering the SVG at its size) and PDF (``QPdfWriter``). Files are
written to a temporary name and renamed. Each tool window's plot has the entry in its own right-click menu
(:func:`add_plot_entry`, through ``widgets.style_plot``).
"""

from __future__ import annotations

import atexit
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QByteArray, QMarginsF, QMimeData, QSizeF, Qt
from PySide6.QtGui import QAction, QImage, QPageLayout, QPageSize, QPainter, QPdfWriter
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import (QApplication, QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFileDialog,
                               QFormLayout, QWidget)

from dmlviewer.core.figures import Bars, Figure, Plot, figure_svg
from dmlviewer.core.figures.svg import dimensions
from dmlviewer.core.scene import Scene

log = logging.getLogger(__name__)

SCALES = (1, 2, 3, 4)
#: the entry of the views' and plots' context menus
MENU_ENTRY = "Export View…"
FORMATS = {"PNG image (*.png)": ".png", "SVG drawing (*.svg)": ".svg", "PDF document (*.pdf)": ".pdf"}


@dataclass
class Target:
    """Something that can be exported: its name in the dialog and the figure at a scale."""

    name: str
    figure: Callable[[float], Figure | Scene]
    source: object = None  # the plot's PlotItem, for a plot's own menu entry


def _plain(text: str) -> str:
    """A caption without the pane's HTML (``<b>Query</b> · class``)."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", text or "")).strip()


# ---------------------------------------------------------------------------------- targets
def pair_view_scene(view, session=None) -> Scene:
    """The scene of what the pair view shows: the session's display options and pinned point
    (the view's own without a session), each row whose maps of the method are computed.
    ``ValueError`` (said in a dialog) when model A's maps are still being computed or failed:
    nothing is computed here, on the GUI thread."""
    from dmlviewer.core.explain.methods import label as method_label
    from dmlviewer.core.scene import Guide, RowSource, build_scene

    method, images = view.method, view.images
    name = method_label(method)
    first = view.rows[0]
    state = view._maps_state(first)
    if state in ("missing", "absent"):
        raise ValueError(f"the {name} maps are still being computed: export again once they are shown")
    if state == "failed":
        raise ValueError(f"{name} is unavailable for this pair: {first.overall.get(method)}")
    sources, notes = [], []
    for k, row in enumerate(view.rows if view.comparing else view.rows[:1]):
        row_state = view._maps_state(row)
        if row_state == "done":
            tensor = view._hover_tensor(row)
            own = k > 0 and images.own_references  # model B's own reference (issue 41)
            reference, caption = images.row_reference(k)
            sources.append(RowSource(row.letter, row.explanation, "" if row.name == row.letter else row.name,
                                     None if tensor is row.explanation.point_to_point else tensor,
                                     reference if own else None, _plain(caption) if own else None))
        elif row.state == "ready" and method not in row.methods:
            notes.append(f"{name} is shown for model A only: row {row.letter} left out.")
        else:
            notes.append(f"Model {row.letter}: its {name} maps are not computed yet; row left out.")
    guides = {side: [Guide(*spec) for spec in getattr(pane, "guide_specs", [])]
              for side, pane in zip(("query", "reference"), first.panes)}
    pinned = session.pinned if session is not None else view.link.pinned
    scene = build_scene(view.display, (images.query, images.reference), sources,
                        (_plain(images.query_title), _plain(images.reference_title)), pinned, guides)
    scene.notes.extend(notes)
    return scene


def pair_view_target(view, session=None) -> Target | None:
    """The pair view as on screen (:func:`pair_view_scene`), when its pair is explained."""
    if getattr(view, "state", None) != "ready" or view.explanation is None or view.images is None:
        return None
    return Target("Pair view", lambda scale: pair_view_scene(view, session))


def group_target(tabs, view) -> Target | None:
    """The group attention tab shown (a grouping model's explained pair)."""
    from dmlviewer.core.scene.group import group_scene

    expl = getattr(tabs, "explanation", None)
    model = getattr(tabs, "model", None)
    if expl is None or model is None or view.images is None or len(getattr(model, "group_slices", ())) < 2:
        return None
    slices = list(model.group_slices)
    group = int(getattr(tabs, "group", 0))
    images = view.images
    return Target(f"Group attention (group {group + 1})",
                  lambda scale: group_scene(expl, (images.query, images.reference), slices, group,
                                            (_plain(images.query_title), _plain(images.reference_title))))


def _bar_items(plot_item) -> list:
    import pyqtgraph as pg

    return [item for item in plot_item.items if isinstance(item, pg.BarGraphItem)]


def plot_figure(plot_item, title: str = "", scale: float = 1.0) -> Figure:
    """A pyqtgraph ``PlotItem``'s curves as a figure (each curve with its own x, drawn by the
    core from the data; a curve drawn without a line is drawn as points); a plot of bars
    (``BarGraphItem``, no curve) as a bar chart, each bar named by its bottom axis tick."""
    import numpy as np

    label = _plain(getattr(plot_item.titleLabel, "text", "")) or title or "Plot"
    bottom, left = (_plain(plot_item.getAxis(a).labelText) for a in ("bottom", "left"))
    bar_items = _bar_items(plot_item)
    curves = [item for item in plot_item.listDataItems() if item not in bar_items]
    if bar_items and not curves:
        ticks = {float(v): _plain(str(t)) for level in (plot_item.getAxis("bottom")._tickLevels or [])
                 for v, t in level}
        xs, heights = [], []
        for item in bar_items:
            x = item.opts.get("x") if item.opts.get("x") is not None else item.opts.get("x0")
            xs.extend(np.atleast_1d(np.asarray(x, float)).tolist())
            heights.extend(np.atleast_1d(np.asarray(item.opts.get("height"), float)).tolist())
        order = sorted(range(len(xs)), key=lambda k: xs[k])
        chart = Bars(label, [ticks.get(xs[k], f"{xs[k]:g}") for k in order], [heights[k] for k in order],
                     bottom, left, width=480, height=300)
        return Figure(title if title and title != label else "", [[chart]], [], scale)
    import pyqtgraph as pg

    series: dict = {}
    dots = []
    for k, item in enumerate(curves):
        x, y = item.getData()
        if x is None or y is None or len(x) == 0:
            continue
        name = (item.name() if hasattr(item, "name") else None) or f"curve {k + 1}"
        while name in series:
            name += "'"
        series[name] = (np.asarray(x, float).tolist(), np.asarray(y, float).tolist())
        if isinstance(item, pg.ScatterPlotItem) or (isinstance(item, pg.PlotDataItem) and item.opts.get("pen") is None):
            dots.append(name)
    plot = Plot(label, [], series, bottom, left, width=480, height=300, dots=tuple(dots))
    return Figure(title if title and title != label else "", [[plot]], [], scale)


def plot_targets(window: QWidget | None = None) -> list[Target]:
    """Every visible pyqtgraph plot of the application (docks, tool windows)."""
    import pyqtgraph as pg

    found = []
    for widget in QApplication.allWidgets():
        if not isinstance(widget, pg.GraphicsView) or not widget.isVisible() or widget.scene() is None:
            continue
        owner = widget.window().windowTitle() or "window"
        dock = widget.parentWidget()
        while dock is not None and not hasattr(dock, "toggleViewAction"):
            dock = dock.parentWidget()
        place = dock.windowTitle() if dock is not None else owner
        for item in widget.scene().items():
            if isinstance(item, pg.PlotItem) and (item.listDataItems() or _bar_items(item)):
                name = _plain(getattr(item.titleLabel, "text", "")) or place
                found.append(Target(f"Plot: {name}" + (f" ({place})" if name != place else ""),
                                    lambda scale, it=item, t=place: plot_figure(it, t, scale), item))
    return found


def targets(window) -> list[Target]:
    """What the main window can export now: the pair view, the group tab, the plots (the plots
    only, without a main window)."""
    if not hasattr(window, "pair_view"):
        return plot_targets(window)
    found = [t for t in (pair_view_target(window.pair_view, getattr(window, "session", None)), group_target(window.group_tabs, window.pair_view))
             if t is not None]
    return found + plot_targets(window)


# ---------------------------------------------------------------------------------- writers
def render_image(figure: Figure) -> QImage:
    """A plot's figure as an image at its size (the figure carries its scale)."""
    svg = figure_svg(figure)
    width, height = dimensions(svg)
    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    image = QImage(width, height, QImage.Format_ARGB32)
    image.fill(Qt.white)
    painter = QPainter(image)
    painter.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing | QPainter.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image


def _write_pdf(svg: str, path: str) -> None:
    width, height = dimensions(svg)
    writer = QPdfWriter(path)
    writer.setResolution(96)  # one SVG pixel is one 1/96 inch: the page is the figure's size
    writer.setPageLayout(QPageLayout(QPageSize(QSizeF(width * 72 / 96, height * 72 / 96), QPageSize.Point),
                                     QPageLayout.Portrait, QMarginsF(0, 0, 0, 0)))
    writer.setCreator("dmlviewer")
    painter = QPainter(writer)
    QSvgRenderer(QByteArray(svg.encode("utf-8"))).render(painter)
    painter.end()


def write_figure(figure: Figure | Scene, path: str | Path, scale: float = 1.0) -> Path:
    """Write ``figure`` as PNG, SVG or PDF by ``path``'s suffix (temporary file, renamed); a
    scene by matplotlib at ``scale`` (a Figure carries its own)."""
    from dmlviewer.core.files import commit, remove, temp_path

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS.values():
        raise ValueError(f"{path.name}: export as .png, .svg or .pdf")
    if isinstance(figure, Scene):
        from dmlviewer.core.scene.draw import write

        return write(figure, path, scale)
    tmp = temp_path(path)
    try:
        if suffix == ".svg":
            tmp.write_text(figure_svg(figure), encoding="utf-8")
        elif suffix == ".png":
            if not render_image(figure).save(str(tmp), "PNG"):
                raise OSError(f"could not write {path}")
        else:
            _write_pdf(figure_svg(figure), str(tmp))
            if not tmp.exists() or tmp.stat().st_size == 0:
                raise OSError(f"could not write {path}")
        commit(tmp, path)
    except BaseException:
        remove(tmp)
        raise
    return path


#: The QMimeData :func:`copy_figure` last put on the clipboard (see :func:`_drop_copy_at_exit`).
_copied: QMimeData | None = None


def copy_figure(figure: Figure) -> None:
    """Put a plot's figure on the clipboard: the image, and the SVG for programs that take it."""
    image = render_image(figure)
    copy_drawing(image, figure_svg(figure).encode("utf-8"))


def copy_drawing(image: QImage | bytes, svg: bytes) -> None:
    """Put a drawn figure on the clipboard: ``image`` (a QImage or PNG bytes) and its SVG."""
    global _copied
    if isinstance(image, (bytes, bytearray)):
        data, image = bytes(image), QImage()
        image.loadFromData(data, "PNG")
    mime = QMimeData()
    mime.setImageData(image)
    mime.setData("image/svg+xml", QByteArray(svg))
    if _copied is None:
        atexit.register(_drop_copy_at_exit)
    _copied = mime
    QApplication.clipboard().setMimeData(mime)


def _drop_copy_at_exit() -> None:
    """Take the copied figure off a clipboard that lives only in this process, while Python runs.

    Qt's generic clipboard (the offscreen, minimal, eglfs, linuxfb platforms) keeps the data in
    a C++ static deleted by the C library's exit handlers, after Python has finalized: deleting
    a QMimeData made in Python there calls into Python and the process crashes (exit code 139).
    That clipboard never owns the system clipboard, so nothing outside the process can paste from
    it and clearing it loses nothing. A real clipboard (X11, Wayland, Windows, macOS) owns what we
    copied and frees it with the application, so it is left as it is. ``atexit`` runs the last
    registered first: this one, registered after PySide's, runs while the application exists.
    """
    app = QApplication.instance()
    if app is None or _copied is None:
        return
    clipboard = app.clipboard()
    if clipboard.mimeData() is _copied and not clipboard.ownsClipboard():
        clipboard.clear()


# ---------------------------------------------------------------------------------- dialog
class ExportDialog(QDialog):
    """What to export, at which scale, and whether to copy it to the clipboard."""

    def __init__(self, found: list[Target], parent: QWidget | None = None, preferred: str | None = None,
                 source: object = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export View")
        self.found = found
        self.what = QComboBox()
        for t in found:
            self.what.addItem(t.name)
        if source is not None or preferred:
            index = next((k for k, t in enumerate(found) if (t.source is source if source is not None
                                                              else t.name.startswith(preferred))), 0)
            self.what.setCurrentIndex(index)
        self.scale = QComboBox()
        for s in SCALES:
            self.scale.addItem(f"{s}x", s)
        self.scale.setToolTip("PNG size: the figure is drawn from the data this many times larger "
                              "(SVG and PDF keep the text as text at any scale)")
        self.copy = QCheckBox("Also copy to the clipboard")
        self.copy.setChecked(True)
        self.source = QCheckBox("Also write the figure's source (.npz and a matplotlib .py)")
        self.source.setToolTip("Beside the file: its arrays and a short script that redraws it, to restyle for a paper")
        form = QFormLayout(self)
        form.addRow("View", self.what)
        form.addRow("Scale", self.scale)
        form.addRow(self.copy)
        form.addRow(self.source)
        self.what.currentIndexChanged.connect(self._source_possible)
        self._source_possible()
        buttons = QDialogButtonBox(QDialogButtonBox.Save | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _source_possible(self) -> None:
        """A figure source is written for the scenes (pair view, group tab), not for plots."""
        self.source.setEnabled(self.found[self.what.currentIndex()].source is None if self.found else False)

    def chosen(self) -> tuple[Target, float]:
        return self.found[self.what.currentIndex()], float(self.scale.currentData())


def export_view(window, preferred: str | None = None, source: object = None):
    """File > Export View: choose, then save (and copy); a dialog says what went wrong.
    ``preferred``: the target chosen first, by the start of its name; ``source``: by its plot.

    A scene (the pair view, a group tab) is made here, on the GUI thread, from what is on
    screen (it only reads arrays), and drawn by matplotlib in the window's job queue
    (:func:`export_scene`: seconds of drawing, the window stays responsive, progress in the
    Jobs view, a failure in the window's one dialog); returns that job. A plot (small, drawn
    by Qt) is written at once; returns the path. None when nothing was started."""
    from dmlviewer.gui.common import errors

    found = targets(window)
    if not found:
        errors.show_error(window, "Export View", "Nothing to export yet: open a model and a pair, or a plot.")
        return None
    dialog = ExportDialog(found, window, preferred, source)
    if dialog.exec() != QDialog.Accepted:
        return None
    target, scale = dialog.chosen()
    start = Path(window.settings.value("paths/exports", "") or Path.home()) if hasattr(window, "settings") \
        else Path.home()
    name = re.sub(r"[^A-Za-z0-9]+", "_", target.name).strip("_").lower() or "figure"
    path, chosen = QFileDialog.getSaveFileName(window, "Export View", str(start / f"{name}.png"), ";;".join(FORMATS))
    if not path:
        return None
    if not Path(path).suffix and chosen in FORMATS:
        path += FORMATS[chosen]
    try:
        if Path(path).suffix.lower() not in FORMATS.values():
            raise ValueError(f"{Path(path).name}: export as .png, .svg or .pdf")
        figure = target.figure(scale)  # from maps already computed: nothing runs the model here
        if isinstance(figure, Scene):
            return export_scene(window, figure, path, scale, dialog.source.isEnabled() and dialog.source.isChecked(),
                                dialog.copy.isChecked())
        written = write_figure(figure, path, scale)
        if dialog.copy.isChecked():
            copy_figure(figure)
    except (OSError, ValueError) as exc:
        errors.show_error(window, "Export View", f"Could not export the view: {exc}")
        return None
    _exported(window, written)
    return written


def _exported(window, written: Path) -> None:
    if hasattr(window, "settings"):
        window.settings.setValue("paths/exports", str(Path(written).parent))
    if callable(getattr(window, "statusBar", None)):
        window.statusBar().showMessage(f"Exported to {written}", 5000)


def export_scene(window, scene: Scene, path: str | Path, scale: float, source: bool = False, copy: bool = False):
    """Draw ``scene`` to ``path`` (and its source, and the clipboard's PNG and SVG with
    ``copy``) in ``window.runner``'s job queue (:func:`dmlviewer.core.scene.draw.write_job`);
    the clipboard is filled when the job ends. Returns the job."""
    from dmlviewer.core.scene.draw import write_job

    path = Path(path)
    also = ("png", "svg") if copy else ()

    def finished(_job, result) -> None:
        if copy and isinstance(result, dict):
            copy_drawing(result["png"], result["svg"])
        _exported(window, result["path"] if isinstance(result, dict) else path)

    def failed(_job, text: str) -> None:  # the dialog is the window's, one per failed job (JobEvents)
        from dmlviewer.gui.common import errors

        first, _details = errors.split_failure(text)
        window.statusBar().showMessage(f"Could not export the view: {first}", 8000)

    waiting = window.runner.busy
    job = window.runner.submit(f"Export View to {path.name}",
                               lambda cancel: write_job(scene, path, scale, source=source, also=also, cancel=cancel),
                               failure_title=f"Could not export the view to {path.name}", finished=finished, failed=failed)
    ahead = f", after '{window.runner.current.name}'" if waiting and window.runner.current is not None else ""
    window.statusBar().showMessage(f"Drawing {path.name} in the job queue{ahead}…", 5000)
    return job


def install(window) -> QAction:
    """The File > Export View action, and an Export View entry in the context menu of the pair
    view and the group tabs; returns the action for the File menu."""
    action = QAction("&Export View…", window)
    action.setShortcut("Ctrl+E")
    action.setToolTip("Save the pair view, a group tab or a plot as PNG (1x-4x), SVG or PDF, drawn from the data")
    action.triggered.connect(lambda: export_view(window))
    for view, preferred in ((window.pair_view, "Pair view"), (window.group_tabs, "Group attention")):
        entry = QAction(MENU_ENTRY, view)
        entry.triggered.connect(lambda _=False, p=preferred: export_view(window, p))
        view.addAction(entry)
        view.setContextMenuPolicy(Qt.ActionsContextMenu)
    return action


def _main_window(widget: QWidget | None) -> QWidget | None:
    """The application's main window (the one with the pair view), else ``widget``'s window."""
    for top in QApplication.topLevelWidgets():
        if hasattr(top, "pair_view"):
            return top
    return widget.window() if widget is not None else None


def add_plot_entry(plot) -> QAction | None:
    """An "Export View…" entry at the end of the right-click menu of ``plot`` (a ``PlotWidget``
    or ``PlotItem``; pyqtgraph's ViewBox menu) that opens Export View with this plot chosen: the
    same dialog and writers as File > Export View. Called by every tool window's plot
    (``widgets.style_plot``); a second call adds nothing."""
    import pyqtgraph as pg

    item = plot.getPlotItem() if isinstance(plot, pg.PlotWidget) else plot
    menu = item.getViewBox().menu
    if menu is None:
        return None
    for action in menu.actions():
        if action.text() == MENU_ENTRY:
            return action
    action = QAction(MENU_ENTRY, menu)
    owner = plot if isinstance(plot, QWidget) else None
    action.triggered.connect(lambda _=False: export_view(_main_window(owner), source=item))
    menu.addSeparator()
    menu.addAction(action)
    return action
