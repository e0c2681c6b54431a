"""``dmlviewer demo`` and ``dmlviewer gui``: open the desktop app."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="open the app on the built-in demo dataset and checkpoint")
    p.add_argument("--screenshot", metavar="PNG", help="render the loaded window to PNG and exit")
    p.set_defaults(func=run_demo)

    p = sub.add_parser("gui", help="open the app")
    p.add_argument("--dataset", metavar="P", help="dataset folder to open")
    p.add_argument("--format", help="dataset format (default: detected from the folder)")
    p.add_argument("--checkpoint", metavar="C", help="checkpoint to open")
    p.add_argument("--features", metavar="F.h5", help="HDF5 feature file to open")
    p.add_argument("--screenshot", metavar="PNG", help="render the loaded window to PNG and exit")
    p.add_argument("--last-session", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=run_gui)


def run_demo(args: argparse.Namespace) -> int:
    raise NotImplementedError("the GUI is not built yet")


def run_gui(args: argparse.Namespace) -> int:
    raise NotImplementedError("the GUI is not built yet")
