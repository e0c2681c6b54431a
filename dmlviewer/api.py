"""The Python door into dmlviewer (issue 11): look at a model of your own from a script or a
notebook, the way napari's ``view_image`` or FiftyOne's ``launch_app`` work.

>>> import dmlviewer, torchvision
>>> net = torchvision.models.resnet18(num_classes=128)          # your trained embedding model
>>> e = dmlviewer.explain(net, "a.jpg", "b.jpg", feature_layer="layer4")
>>> e.similarity, e.point_to_point.shape, e.rule                # (0.83, (7, 7, 7, 7), 'exact')
>>> dmlviewer.view(net, feature_layer="layer4", dataset="path/to/CUB_200_2011")

``model`` is any ``torch.nn.Module`` whose output is the embedding (a tensor, or a
tuple/dict/object from which ``output`` selects it), a dmlviewer checkpoint path, or
``"imagenet:BACKBONE"``. ``feature_layer`` names the layer whose output is the feature map
(``None``: the last layer with a spatial output); ``transform`` is the preprocessing (a
torchvision transform whose ``Resize``/``CenterCrop``/``Normalize`` are read, a dict
``size``/``mean``/``std``, or ``None`` for ImageNet statistics at ``size`` or 224 px).
The decomposition is exact where the head after the feature layer is piecewise linear, first
order otherwise; ``Explanation.rule`` and the app say which.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def open_model(model: Any, *, feature_layer: str | None = None, output: Any = None, transform: Any = None,
               size: int | None = None, device: str = "cpu"):
    """``(model, info)`` with dmlviewer's model interface (see
    :func:`dmlviewer.core.models.open_model`)."""
    from dmlviewer.core.models import open_model as _open

    return _open(model, device, feature_layer=feature_layer, output=output, transform=transform, size=size)


def explain(model: Any, query: Any, reference: Any, feature_layer: str | None = None, *, output: Any = None,
            transform: Any = None, size: int | None = None, method: str = "decomposition",
            device: str = "cpu"):
    """Explain the similarity of ``query`` and ``reference`` (image paths or uint8 RGB arrays)
    under ``model``: an :class:`~dmlviewer.core.explain.Explanation` with ``similarity``,
    ``point_to_point``, ``bias_query``, ``bias_reference``, ``bias_both``, ``overall_query``,
    ``overall_reference``, ``grid_query``, ``grid_reference`` and ``rule`` (the fields of the
    ``explain`` npz; ``.save(path)`` writes one)."""
    from dmlviewer.core.explain import METHODS, Explanation, explain_pair

    if method not in METHODS or method == "grad_transfer":
        raise ValueError(f"method must be one of {', '.join(m for m in METHODS if m != 'grad_transfer')}, got {method!r}")
    m, _ = open_model(model, feature_layer=feature_layer, output=output, transform=transform, size=size,
                      device=device)
    pair = explain_pair(m, _image(query), _image(reference), device)
    return Explanation.from_pair(pair, method)


def view(model: Any = None, dataset: Any = None, feature_layer: str | None = None, *, output: Any = None,
         transform: Any = None, size: int | None = None, labels: Sequence[Any] | None = None,
         features: str | None = None, device: str = "cpu", block: bool | None = None):
    """Open the dmlviewer window on ``model`` and ``dataset``.

    ``dataset``: a dataset folder (any supported format), or a list of image paths or uint8 RGB
    arrays (with optional ``labels``; they are copied into a temporary folder dataset).
    ``block``: run the Qt event loop until the window closes (``None``: block unless a notebook
    already runs Qt's loop, e.g. after ``%gui qt``). Returns the window when not blocking, else
    the app's exit status."""
    from dmlviewer.gui.app import create_app, setup_logging
    from dmlviewer.gui.main_window import MainWindow

    app = create_app()
    setup_logging()
    window = MainWindow()
    window.show()
    if model is not None:
        m, info = open_model(model, feature_layer=feature_layer, output=output, transform=transform, size=size,
                             device=device)
        window.use_model(m, info, label=info.get("path") or type(model).__name__)
    if dataset is not None:
        window.open_dataset(_dataset_folder(dataset, labels))
    if features:
        window.open_features(features)
    if block is None:
        block = not _notebook_event_loop()
    if not block:
        return window
    status = app.exec()
    window.shutdown()
    return int(status)


def _image(image: Any):
    """Paths stay paths (read by dmlviewer's loader, with its checks); arrays stay arrays."""
    return Path(image) if isinstance(image, str) else image


def _notebook_event_loop() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return bool(shell is not None and str(getattr(shell, "active_eventloop", "") or "").startswith("qt"))


def _dataset_folder(dataset: Any, labels: Sequence[Any] | None) -> str:
    """A dataset folder: as given, or a temporary folder dataset (one sub-folder per label) of
    the given images."""
    if isinstance(dataset, (str, Path)):
        return str(dataset)
    import cv2
    import numpy as np

    from dmlviewer.core.data import load_image

    items = list(dataset)
    if not items:
        raise ValueError("dataset is an empty list of images")
    if labels is not None and len(labels) != len(items):
        raise ValueError(f"{len(labels)} labels for {len(items)} images")
    root = Path(tempfile.mkdtemp(prefix="dmlviewer-images-"))
    for i, item in enumerate(items):
        label = str(labels[i]) if labels is not None else "images"
        folder = root / label.replace("/", "_")
        folder.mkdir(exist_ok=True)
        rgb = load_image(item) if isinstance(item, (str, Path)) else np.asarray(item)
        if rgb.dtype != np.uint8 or rgb.ndim not in (2, 3):
            raise ValueError(f"image {i} is not a uint8 H x W (x 3) array")
        bgr = rgb if rgb.ndim == 2 else cv2.cvtColor(np.ascontiguousarray(rgb[..., :3]), cv2.COLOR_RGB2BGR)
        cv2.imwrite(str(folder / f"{i:06d}.png"), bgr)
    log.info("wrote %d images to the folder dataset %s", len(items), root)
    return str(root)
