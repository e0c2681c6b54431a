"""``dmlviewer demo`` and ``dmlviewer gui``: open the desktop app."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="open the app on the built-in demo dataset and checkpoint")
    p.add_argument("--screenshot", metavar="PNG", help="render the loaded window to PNG and exit")
    _hidden(p)
    p.set_defaults(func=run_demo)

    p = sub.add_parser("gui", help="open the app")
    p.add_argument("--dataset", metavar="P", help="dataset folder to open")
    p.add_argument("--format", help="dataset format (default: detected from the folder)",
                   choices=["cub", "cars196", "sop", "inshop", "folder"])
    from dmlviewer.commands.common import add_model_options

    add_model_options(p, required=False, checkpoint_help="checkpoint to open (or imagenet:BACKBONE)")
    p.add_argument("--features", metavar="F.h5", help="HDF5 feature file to open")
    p.add_argument("--screenshot", metavar="PNG", help="render the loaded window to PNG and exit")
    p.add_argument("--last-session", action="store_true", help=argparse.SUPPRESS)
    _hidden(p)
    p.set_defaults(func=run_gui)


def _hidden(p: argparse.ArgumentParser) -> None:
    # For screenshots of the interaction: pin a point of the query (fractions of its width and
    # height, the centre by default); show the group tab.
    p.add_argument("--pin", nargs="?", const="0.5,0.5", type=_fractions, help=argparse.SUPPRESS)
    p.add_argument("--tab", choices=["pair", "groups"], help=argparse.SUPPRESS)


def _fractions(text: str) -> tuple[float, float]:
    try:
        fx, fy = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FX,FY (fractions of the image), got {text!r}") from None
    if not (0 <= fx <= 1 and 0 <= fy <= 1):
        raise argparse.ArgumentTypeError(f"fractions must lie in [0, 1], got {text!r}")
    return fx, fy


def _check(path: str | None, what: str, folder: bool = False) -> None:
    """A missing path named as what it should be (a folder or a file), before the app starts."""
    from dmlviewer.cli import UsageError

    if not path:
        return
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{what} {'folder' if folder else 'file'} not found: {path}")
    if folder and not p.is_dir():
        raise UsageError(f"{what} must be a folder: {path} is a file")
    if not folder and p.is_dir():
        raise UsageError(f"{what} must be a file: {path} is a folder")


def _window_possible() -> bool:
    """The system libraries of Qt's window plugin are there (else the report is printed: Qt
    itself would abort naming the wrong package)."""
    from dmlviewer.system_check import check_before_window

    return check_before_window()


def run_demo(args: argparse.Namespace) -> int:
    if not _window_possible():
        return 1
    from dmlviewer.gui.window.app import run_gui as start

    return start(screenshot=args.screenshot, demo=True, pin=args.pin, tab=args.tab)


def run_gui(args: argparse.Namespace) -> int:
    _check(args.dataset, "dataset", folder=True)
    from dmlviewer.commands.common import command_model_source

    if not str(args.checkpoint or "").startswith("imagenet:"):
        _check(args.checkpoint, "checkpoint")
    source = command_model_source(args)  # one line for --weights without --model, a file not there
    _check(args.features, "feature")
    if not _window_possible():
        return 1
    from dmlviewer.gui.window.app import run_gui as start

    return start(dataset=args.dataset, checkpoint=source if args.model else args.checkpoint, features=args.features,
                 screenshot=args.screenshot, fmt=args.format, last=args.last_session,
                 pin=args.pin, tab=args.tab)
