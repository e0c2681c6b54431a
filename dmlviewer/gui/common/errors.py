"""Every error reaches the user as a dialog with details; the window stays usable.

:func:`show_error` is the one place dialogs are made (tests replace it to record calls).
The dialog is opened without blocking (``QMessageBox.open``) so that an error raised inside
an event handler never nests event loops, and the same message is not stacked twice while
its dialog is still open. :func:`install_excepthook` routes uncaught exceptions of the GUI
thread (Qt calls ``sys.excepthook`` for exceptions escaping slots) to that dialog instead of
letting them end the app. Everything is also written to the log: an expected refusal (bad
input, a missing file: :func:`expected`) as one line, a bug with its traceback (issue 42 item 2).
"""

from __future__ import annotations

import html
import logging
import sys
import traceback
from types import TracebackType
from typing import Callable

from PySide6.QtWidgets import QApplication, QLabel, QMessageBox, QWidget

log = logging.getLogger(__name__)

#: Open dialogs by message (keeps parentless boxes alive; suppresses storms of one error).
_open_boxes: dict[str, QMessageBox] = {}


def show_error(parent: QWidget | None, title: str, message: str, details: str | None = None, *,
               log_details: bool = True) -> None:
    """Show ``message`` in a warning dialog; ``details`` (a traceback, or what to do) behind
    "Show Details". ``log_details=False``: the log gets the one line without them."""
    log.error("%s: %s%s", title, message, f"\n{details}" if details and log_details else "")
    if QApplication.instance() is None or message in _open_boxes:
        return
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Warning)
    box.setWindowTitle(title)
    box.setText(message)
    if details:
        box.setDetailedText(details)
    box.setStandardButtons(QMessageBox.Ok)
    _open_boxes[message] = box
    box.finished.connect(lambda _=0, m=message: _open_boxes.pop(m, None))
    box.open()


#: How the app names the fields of the core's errors (:class:`dmlviewer.core.fields.FieldError`):
#: each by the Open Model from Code dialog's label (``output`` and ``size`` have no field there:
#: the doors that set them).
FIELD_LABELS = {
    "model_args": "“Keyword arguments”", "weights": "“Weights file”", "feature_layer": "“Feature layer”",
    "reference_weights": "“Reference weights”", "input_shapes": "“Input shapes”",
    "output": "output= in Python or --model-output on the command line",
    "output_forms": "an index, e.g. 1, or a key; in Python also a function",
    "size": "the pair view's “Resolution”",
}

#: errors whose message says everything (bad input, a busy run folder): shown as they are,
#: without their type's name; each with what the user can do about it
_EXPLAINED = {
    "CheckpointError": "Open a checkpoint written by dmlviewer (its training, or File ▸ Import Model, which "
                       "turns another framework's weights into one).",
    "ModelError": "Change what the message names and open the model again.",
    "DatasetError": "Choose a folder of images in one of the layouts the README's “Datasets” lists.",
    "ImageError": "Replace or remove that image file.",
    "StoreError": "Compute the features again (the Retrieval dock's “Compute features”), or open a feature "
                  "file dmlviewer wrote.",
    "FolderBusy": "Wait until the other run ends, or choose another folder.",
    "TrainingError": "Change what the message names and start again.",
    "UsageError": "Change what the message names and try again.",
}


def _explained_type(exc: BaseException) -> str | None:
    """The name of the :data:`_EXPLAINED` error ``exc`` is (a subclass counts); None if none."""
    return next((cls.__name__ for cls in type(exc).__mro__ if cls.__name__ in _EXPLAINED), None)


def expected(exc: BaseException) -> bool:
    """Whether ``exc`` is a refusal the app expects (bad input, a missing or unreadable file,
    too little memory) rather than a bug: it is logged as one line, without a traceback."""
    from dmlviewer.core.fields import FieldError

    return isinstance(exc, (OSError, MemoryError, FieldError)) or _explained_type(exc) is not None


def what_to_do(exc: BaseException) -> str:
    """One sentence: what the user can do about the expected error ``exc``."""
    from dmlviewer.core.fields import FieldError

    if isinstance(exc, FileNotFoundError):
        return "Check the path: the file may have been moved or renamed."
    if isinstance(exc, OSError):
        return "Check the path, its permissions and the free space, then try again."
    if isinstance(exc, MemoryError):
        return "Close other work or choose a smaller model, dataset or batch."
    if isinstance(exc, FieldError):
        return "Change the field named above and try again."
    return _EXPLAINED.get(_explained_type(exc) or "", "")


def user_message(exc: BaseException) -> str:
    """The line a user reads for ``exc``: a system error described ("no space left on FOLDER"),
    an input error's own message, otherwise the type and the message."""
    from dmlviewer.core.fields import FieldError, worded
    from dmlviewer.core.files import describe_os_error

    if isinstance(exc, FileNotFoundError):
        return f"file not found: {exc.filename or exc}"
    if isinstance(exc, OSError):
        return describe_os_error(exc)
    if isinstance(exc, MemoryError):
        return "not enough memory for this"
    if isinstance(exc, FieldError):  # a field named by its label in the dialog that has it
        return worded(exc, FIELD_LABELS)
    if _explained_type(exc) is not None:
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def report_exception(parent: QWidget | None, title: str, exc: BaseException, path: str | None = None) -> None:
    """Dialog for a caught exception: its one-line message (:func:`user_message`). An
    :func:`expected` refusal is logged as that line and its details say the file (``path``,
    else the error's own), the reason and what to do; a bug keeps its traceback, logged and
    as the details."""
    message = user_message(exc)
    if not expected(exc):
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        show_error(parent, title, message, details)
        return
    path = path or getattr(exc, "filename", None)
    details = "\n\n".join(part for part in (f"File: {path}" if path else "", f"Reason: {message}",
                                              f"What to do: {what_to_do(exc)}") if part)
    show_error(parent, title, message, details, log_details=False)


def split_failure(text: str) -> tuple[str, str]:
    """A worker failure text (``"Type: message\\n\\ntraceback"``) as (first line, whole text)."""
    first = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return first, text


#: the colour of a failure on a view's status line
FAILED_COLOUR = "#eb5757"


def show_failure(label: QLabel, text: str, what: str = "Failed", wrap: Callable[[str], str] | None = None) -> None:
    """A worker's failure (``text``, :func:`split_failure`) on a view's status ``label``: ``what:
    first line`` in red, escaped (a message may hold ``<`` or ``&``, which rich text would
    swallow), the whole text as the tooltip. ``wrap``: applied to the escaped line (the training
    dialog breaks long paths)."""
    first, details = split_failure(text)
    line = html.escape(first, quote=False)
    label.setText(f"<span style='color:{FAILED_COLOUR}'>{html.escape(what, quote=False)}: "
                  f"{wrap(line) if wrap else line}</span>")
    label.setToolTip(details)


def excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """``sys.excepthook`` of the app: log, then show the error dialog; never exit."""
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    details = "".join(traceback.format_exception(exc_type, exc, tb))
    parent = QApplication.activeWindow() if QApplication.instance() is not None else None
    show_error(parent, "Unexpected error", f"{exc_type.__name__}: {exc}", details)


def install_excepthook() -> None:
    sys.excepthook = excepthook
