"""PySide6 + pyqtgraph widgets over dmlviewer.core."""
