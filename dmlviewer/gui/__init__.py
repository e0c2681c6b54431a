"""PySide6 + pyqtgraph widgets over dmlviewer.core."""

from dmlviewer.gui.qt_compat import guard_bool_refcount

guard_bool_refcount()
