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

import atexit
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: how the Python door names the fields of the core's errors (:mod:`dmlviewer.core.fields`): its
#: keyword arguments
PYTHON_NAMES = {"output": "output=", "output_forms": "an index, e.g. 1, a key or a function", "size": "size=", "transform": "transform=", "feature_layer": "feature_layer=",
                "input_shapes": "size= (a pair, one per branch)"}


@contextlib.contextmanager
def _python_words():
    """A :class:`~dmlviewer.core.fields.FieldError` raised inside says its field as this door's
    keyword argument (``output=``), the exception otherwise unchanged (type, traceback)."""
    from dmlviewer.core.fields import FieldError

    try:
        yield
    except FieldError as exc:
        exc.args = (exc.worded(PYTHON_NAMES),)
        raise


def open_model(model: Any, *, feature_layer: str | None = None, output: Any = None, transform: Any = None,
               size: int | None = None, device: str = "cpu"):
    """``(model, info)`` with dmlviewer's model interface (see
    :func:`dmlviewer.core.models.open_model`; ``info["notes"]`` says how the model is run
    differently from how it was given, e.g. eval mode for a module in training mode)."""
    from dmlviewer.core.models import open_model as _open

    with _python_words():
        return _open(model, device, feature_layer=feature_layer, output=output, transform=transform, size=size)


def explain(model: Any, query: Any, reference: Any, feature_layer: str | None = None, *, output: Any = None,
            transform: Any = None, size: int | None = None, method: str = "decomposition",
            device: str = "cpu"):
    """Explain the similarity of ``query`` and ``reference`` (image paths or uint8 RGB arrays)
    under ``model``: an :class:`~dmlviewer.core.explain.Explanation` with ``similarity``,
    ``point_to_point``, ``bias_query``, ``bias_reference``, ``bias_both``, ``overall_query``,
    ``overall_reference``, ``grid_query``, ``grid_reference`` and ``rule`` (the fields of the
    ``explain`` npz; ``.save(path)`` writes one).

    ``model`` may be a ``(query_model, reference_model)`` tuple: a two-branch (cross-view)
    model, each image through its own branch; ``feature_layer``, ``output``, ``transform`` and
    ``size`` may then be pairs too, a size a side or ``(height, width)``
    (:func:`dmlviewer.core.models.two_branch.open_two_branch`).

    A live module is explained in eval mode and handed back as it came: every submodule's
    ``training`` flag, every tensor's device and dtype, and no hook of dmlviewer's left on it,
    also when an error is raised. A module passed in training mode is said so (a log warning and
    ``rule_detail``): BatchNorm then uses its running statistics and Dropout is off."""
    import dataclasses

    from dmlviewer.core.explain import Explanation, explain_pair
    from dmlviewer.core.explain import methods as registry

    if method not in registry.methods("python"):
        raise ValueError(f"method must be one of {', '.join(registry.methods('python'))}, got {method!r}")
    with _module_restored(model), _python_words():
        m, info = open_model(model, feature_layer=feature_layer, output=output, transform=transform, size=size,
                             device=device)
        try:  # the overall maps may re-run the module: computed before its hooks go
            explanation = Explanation.from_pair(explain_pair(m, _image(query), _image(reference), device), method)
        finally:
            _release(m)
    notes = list(info.get("notes") or [])
    if notes:  # how the module was run differently from how it was given (already logged as warnings)
        explanation = dataclasses.replace(explanation, rule_detail="; ".join([explanation.rule_detail, *notes]))
    return explanation


@contextlib.contextmanager
def _module_restored(model: Any):
    """On exit, ``model`` (an ``nn.Module``) is as it was on entry, whatever happened inside:
    every submodule's ``training`` flag, every parameter's and buffer's device and dtype, and
    the hooks each submodule had (hooks added inside are removed)."""
    from torch import nn

    if isinstance(model, tuple):  # (query, reference) modules of a two-branch model: each restored
        with contextlib.ExitStack() as stack:
            for branch in model:
                stack.enter_context(_module_restored(branch))
            yield
        return
    if not isinstance(model, nn.Module):
        yield
        return
    modules = list(model.modules())
    flags = [m.training for m in modules]
    tensors = [(m, kind, name, t.device, t.dtype) for m in modules for kind in ("_parameters", "_buffers")
               for name, t in getattr(m, kind).items() if t is not None]
    hook_dicts = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                  "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs",
                  "_state_dict_hooks", "_load_state_dict_pre_hooks")
    hooks = [(m, name, dict(getattr(m, name))) for m in modules for name in hook_dicts if hasattr(m, name)]
    try:
        yield
    finally:
        for m, flag in zip(modules, flags):
            m.training = flag
        for m, kind, name, dev, dtype in tensors:
            t = getattr(m, kind).get(name)
            if t is not None and (t.device != dev or t.dtype != dtype):
                if kind == "_parameters":
                    t.data = t.data.to(device=dev, dtype=dtype)
                else:
                    m._buffers[name] = t.to(device=dev, dtype=dtype)
        for m, name, before in hooks:
            current = getattr(m, name)
            for key in [k for k in current if k not in before]:
                del current[key]


def _release(model: Any) -> None:
    """Remove the hooks a dmlviewer model put on the user's module (``ModuleModel.release``)."""
    release = getattr(model, "release", None)
    if callable(release):
        release()


def view(model: Any = None, dataset: Any = None, feature_layer: str | None = None, *, output: Any = None,
         transform: Any = None, size: int | None = None, labels: Sequence[Any] | None = None,
         features: str | None = None, device: str = "cpu", block: bool | None = None):
    """Open the dmlviewer window on ``model`` and ``dataset``.

    ``dataset``: a dataset folder (any supported format), or a list of image paths or uint8 RGB
    arrays (with optional ``labels``; they are copied into a temporary folder dataset).
    ``block``: run the Qt event loop until the window closes. ``None``: block in a script; in
    IPython or a notebook never block the kernel: Qt's event loop is started there as ``%gui qt``
    does when it is not running yet, and when it cannot be started ``view`` returns ``None`` at
    once with one line saying what to run. Returns, when not blocking, the session
    (:class:`dmlviewer.core.session.Session`, evented, as napari's ``view_image`` returns its
    viewer): ``session.window`` is the window, and setting the pair (``session.set_pair(q, r)``)
    or a display option (``session.display.sign = "signed"``) updates it; when blocking, the
    app's exit status."""
    if block is None:
        shell = _ipython_shell()
        block = shell is None
        if shell is not None and not _qt_loop_running(shell) and not _start_qt_loop(shell):
            return None
    from dmlviewer.gui.window.app import create_app, setup_logging
    from dmlviewer.gui.window.main_window import MainWindow

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
    if not block:
        window.session.window = window
        return window.session
    status = app.exec()
    window.shutdown()
    return int(status)


def changes(a: Any, b: Any, dataset: Any = None, *, split: str = "test",
            features: Sequence[str | None] = (None, None), feature_layer: str | None = None,
            device: str = "cpu") -> dict:
    """What changed from model ``a`` to model ``b`` on one split (issue 41): the ``changes``
    document of ``dmlviewer compare --changes --json`` (``both_right``, ``a_only``, ``b_only``,
    ``both_wrong``, ``overlap``, ``classes``, ``broken``, ``fixed``, ...; see
    :func:`dmlviewer.core.evaluate.changes.change_table`).

    Without ``dataset``, ``a`` and ``b`` are two feature files of the same images (``evaluate
    --out``), every image of ``split`` (``None``: all) a query against the others. With a
    dataset folder, ``a`` and ``b`` are models (a module, a checkpoint path or
    ``"imagenet:NAME"``), each embedding the split unless its feature file in ``features``
    (A's, B's) matches it. Mismatched feature files raise one ``ValueError`` line naming which."""
    from dmlviewer.core.evaluate.changes import compare_feature_files, compare_models_changes
    from dmlviewer.core.progress import run_to_end

    if dataset is None:
        return run_to_end(compare_feature_files(a, b, split, device))
    from dmlviewer.core.data import open_dataset

    opened = []
    for name, model, file in zip("AB", (a, b), features):
        m, info = open_model(model, feature_layer=feature_layer, device=device)
        opened.append((name, m, str(info.get("sha256") or ""), file))
    return run_to_end(compare_models_changes(opened, open_dataset(str(dataset)), split, device))


def _image(image: Any):
    """Paths stay paths (read by dmlviewer's loader, with its checks); arrays stay arrays."""
    return Path(image) if isinstance(image, str) else image


def _ipython_shell() -> Any:
    """The running IPython shell (a notebook's kernel or the terminal), or ``None``."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _qt_loop_running(shell: Any) -> bool:
    """Whether ``shell`` already runs Qt's event loop (``%gui qt``, ``%matplotlib qt``)."""
    return str(getattr(shell, "active_eventloop", "") or "").startswith("qt")


def _start_qt_loop(shell: Any) -> bool:
    """Start Qt's event loop in ``shell`` as ``%gui qt`` does; ``False`` (and one line saying what
    to run) when it cannot be started, so that the caller returns instead of blocking the kernel."""
    try:
        shell.enable_gui("qt")
    except Exception as exc:  # noqa: BLE001 - any failure means: do not block, say what to run
        log.warning("view() needs Qt's event loop in this notebook and could not start it (%s): run %%gui qt "
                    "in a cell, then call view() again", str(exc).strip().splitlines()[0] if str(exc).strip()
                    else type(exc).__name__)
        return False
    log.info("started Qt's event loop in IPython (as %%gui qt): the window runs beside the kernel")
    return True


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
    # The viewer reads the images while it is open; the folder goes when the process ends.
    atexit.register(shutil.rmtree, root, ignore_errors=True)
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
