"""The ``dmlviewer`` command line (see DESIGN.md, "Command line").

Each sub-command lives in ``dmlviewer/commands/<name>.py`` with ``add_parser(subparsers)``
registering its arguments and a handler ``run(args) -> int``. Heavy imports (torch, Qt)
happen inside the handlers so that ``dmlviewer --help`` stays fast.

Exit status: 0 success; 2 bad input (an argument out of range, a missing, unreadable or unsafe
file: one clear line naming it); 1 the work could not be done (a full or read-only disk, an
output that cannot be written, a run folder in use, training that diverged, not enough memory:
one clear line); 130 interrupted. No traceback reaches the user for any of these (``-v`` logs
it). Python warnings of libraries are logged at debug level (``-v`` shows them), one line each.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

log = logging.getLogger(__name__)

#: sub-command name -> module under dmlviewer.commands
COMMANDS = {
    "demo": "gui",
    "gui": "gui",
    "make-demo-data": "make_demo_data",
    "train": "train",
    "evaluate": "evaluate",
    "explain": "explain",
    "localize": "localize",
    "correspond": "correspond",
    "orientation": "orientation",
    "faithfulness": "faithfulness",
    "compare": "compare",
    "retrieve": "retrieve",
    "report": "report",
    "import-model": "import_model",
    "bench": "bench",
}


class UsageError(Exception):
    """A bad argument or a missing input file: reported in one line, exit status 2."""


def states_default(action: argparse.Action) -> bool:
    """Whether ``action``'s default is one to state: not None, a flag's False or suppressed
    (compared by identity: 0 equals False, and ``--seed``'s default 0 went unsaid)."""
    default = action.default
    return not (default is None or default is False or default is argparse.SUPPRESS)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that states every option's default (unless the help already does, or there is
    none to state)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (action.option_strings and states_default(action)
                and "default" not in text.lower() and text is not argparse.SUPPRESS):
            shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
            shown = shown.replace("%", "%%")
            text = f"{text} (default: {shown})" if text else f"(default: {shown})"
        return text


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one clear line, status 2
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dmlviewer",
        description="Explain, train and evaluate deep metric learning models on images.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    seen: set[str] = set()
    for module_name in COMMANDS.values():
        if module_name in seen:
            continue
        seen.add(module_name)
        module = importlib.import_module(f"dmlviewer.commands.{module_name}")
        module.add_parser(sub)
    return parser


def _classes(names: tuple[tuple[str, str], ...]) -> tuple[type[BaseException], ...]:
    """The exception classes ``(module, name)``, imported only when an error happened; a
    module that cannot be imported (a broken install) must not mask that error."""
    found = []
    for module, name in names:
        try:
            found.append(getattr(importlib.import_module(module), name))
        except Exception:  # noqa: BLE001 - see docstring
            log.debug("cannot import %s", module, exc_info=True)
    return tuple(found)


def _input_errors() -> tuple[type[BaseException], ...]:
    """Errors that describe bad user input (a file's name and what is wrong with it):
    reported in one line with exit status 2 rather than a traceback."""
    return _classes((("dmlviewer.core.data.errors", "DatasetError"), ("dmlviewer.core.data.errors", "ImageError"),
                     ("dmlviewer.core.evaluate.store", "StoreError"),
                     ("dmlviewer.core.models.errors", "CheckpointError"),
                     ("dmlviewer.core.models.errors", "ModelError"), ("dmlviewer.core.fields", "FieldError")))


def _job_errors() -> tuple[type[BaseException], ...]:
    """Errors that say the work could not be done (not a bad input): exit status 1."""
    return _classes((("dmlviewer.core.files", "FolderBusy"), ("dmlviewer.core.train.loop", "TrainingError")))


def _log_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` of the command line: one debug line, no source echo."""
    logging.getLogger("py.warnings").debug("%s: %s (%s:%s)", category.__name__, message, filename, lineno)


def main(argv: Sequence[str] | None = None) -> int:
    import warnings

    warnings.resetwarnings()
    warnings.simplefilter("default")
    warnings.showwarning = _log_warning
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad argument (2): the status is returned, as for the rest
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command is None:
        # No sub-command: the GUI on the last session or, the first time, on the demo.
        args = parser.parse_args(["gui", "--last-session"])
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        sys.stderr.write(f"dmlviewer {args.command}: error: {exc}\n")
        return 2
    except _input_errors() as exc:  # bad dataset, image, checkpoint or feature file
        from dmlviewer.commands.options import worded

        if args.verbose:
            log.exception("input error")
        sys.stderr.write(f"dmlviewer {args.command}: error: {worded(exc)}\n")
        return 2
    except FileNotFoundError as exc:
        name = exc.filename or str(exc)
        sys.stderr.write(f"dmlviewer {args.command}: error: file not found: {name}\n")
        return 2
    except _job_errors() as exc:  # a run folder in use, training that cannot go on
        if args.verbose:
            log.exception("job error")
        sys.stderr.write(f"dmlviewer {args.command}: error: {exc}\n")
        return 1
    except OSError as exc:  # a full or read-only disk, an output that cannot be written
        from dmlviewer.core.files import describe_os_error

        if args.verbose:
            log.exception("system error")
        sys.stderr.write(f"dmlviewer {args.command}: error: {describe_os_error(exc)}\n")
        return 1
    except MemoryError:
        sys.stderr.write(f"dmlviewer {args.command}: error: not enough memory for this job\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130


def gui_main() -> int:
    """Entry point of the ``dmlviewer-gui`` script (no console window on Windows)."""
    return main(sys.argv[1:] or None)
