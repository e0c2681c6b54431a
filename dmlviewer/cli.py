"""The ``dmlviewer`` command line (see DESIGN.md, "Command line").

Each sub-command lives in ``dmlviewer/commands/<name>.py`` with ``add_parser(subparsers)``
registering its arguments and a handler ``run(args) -> int``. Heavy imports (torch, Qt)
happen inside the handlers so that ``dmlviewer --help`` stays fast.

Bad arguments exit with status 2 and one clear line; a missing file names the file.
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
    "retrieve": "retrieve",
    "bench": "bench",
}


class UsageError(Exception):
    """A bad argument or a missing input file: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
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


def _input_errors() -> tuple[type[BaseException], ...]:
    """Errors that describe bad user input (a file's name and what is wrong with it):
    reported in one line with exit status 2 rather than a traceback. Looked up only when an
    error happened; a module that cannot be imported (a broken install) must not mask it."""
    found = []
    for module, name in (("dmlviewer.core.data.errors", "DatasetError"),
                         ("dmlviewer.core.data.errors", "ImageError"),
                         ("dmlviewer.core.evaluate.store", "StoreError"),
                         ("dmlviewer.core.models.errors", "CheckpointError"),
                         ("dmlviewer.core.models.errors", "ModelError")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except Exception:  # noqa: BLE001 - see docstring
            log.debug("cannot import %s", module, exc_info=True)
    return tuple(found)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
        if args.verbose:
            log.exception("input error")
        sys.stderr.write(f"dmlviewer {args.command}: error: {exc}\n")
        return 2
    except FileNotFoundError as exc:
        name = exc.filename or str(exc)
        sys.stderr.write(f"dmlviewer {args.command}: error: file not found: {name}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130


def gui_main() -> int:
    """Entry point of the ``dmlviewer-gui`` script (no console window on Windows)."""
    return main(sys.argv[1:] or None)
