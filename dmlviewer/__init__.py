"""dmlviewer: a desktop analysis tool for deep metric learning models on images.

``dmlviewer.core`` is a headless library (no Qt import anywhere beneath it);
``dmlviewer.gui`` holds the PySide6/pyqtgraph widgets that call it.
"""

__version__ = "0.1.0"
