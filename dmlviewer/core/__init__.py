"""Headless core of dmlviewer: data, models, explanation, training, evaluation.

Nothing below this package may import Qt (PySide6, shiboken6) or pyqtgraph; a test walks
every module and fails on such an import.
"""
