"""``dmlviewer make-demo-data``: write the synthetic parts dataset."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("make-demo-data", help="write the synthetic parts dataset (CUB layout)")
    p.add_argument("out", metavar="OUT", help="output folder")
    p.add_argument("--classes", type=int, default=20, metavar="N")
    p.add_argument("--per-class", type=int, default=40, metavar="M")
    p.add_argument("--size", type=int, default=128, metavar="S")
    p.add_argument("--seed", type=int, default=0, metavar="K")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError
