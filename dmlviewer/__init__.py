"""dmlviewer: a desktop analysis tool for deep metric learning models on images.

``dmlviewer.core`` is a headless library (no Qt import anywhere beneath it);
``dmlviewer.gui`` holds the PySide6/pyqtgraph widgets that call it. From Python,
``dmlviewer.explain(model, query, reference, ...)`` and ``dmlviewer.view(model, dataset=...)``
work on any embedding ``torch.nn.Module`` (see ``dmlviewer.api``); they are imported on first
use, so ``import dmlviewer`` stays light.
"""

from typing import Any

from dmlviewer.core.limits import opencv_limit

__version__ = "0.1.0"

opencv_limit()  # before anything loads OpenCV, which reads its image-size limit once

_API = ("explain", "view", "open_model", "changes")


def __getattr__(name: str) -> Any:
    if name in _API:
        from dmlviewer import api

        return getattr(api, name)
    raise AttributeError(f"module 'dmlviewer' has no attribute {name!r}")
