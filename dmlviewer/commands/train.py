"""``dmlviewer train``: train a model; checkpoints and metrics.jsonl in the run folder."""

from __future__ import annotations

import argparse

BACKBONES = ["resnet18", "resnet34", "resnet50", "resnet101", "googlenet", "inception_v3",
             "mobilenet_v3_large", "efficientnet_b0", "efficientnet_lite0", "small_cnn"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model")
    p.add_argument("--dataset", required=True, metavar="P")
    p.add_argument("--format", help="dataset format (default: detected)")
    p.add_argument("--out", required=True, metavar="RUN")
    p.add_argument("--backbone", choices=BACKBONES, default="small_cnn")
    p.add_argument("--pretrained", default="none", help="none | imagenet | FILE")
    p.add_argument("--pooling", choices=["gap", "gmp", "gem"], default="gap")
    p.add_argument("--grouping", choices=["none", "m", "g", "c", "a"], default="none")
    p.add_argument("--groups", type=int, default=4, metavar="P")
    p.add_argument("--dim", type=int, default=128, metavar="D")
    p.add_argument("--loss", choices=["contrastive", "triplet", "margin", "binomial", "ms", "proxy_nca"],
                   default="margin")
    p.add_argument("--diversity", type=float, default=0.0, metavar="W")
    p.add_argument("--adversarial", choices=["none", "smooth", "adaptive"], default="none")
    p.add_argument("--deml-adversary", type=float, default=0.0, metavar="W")
    p.add_argument("--activation-decay", type=float, default=0.0, metavar="W")
    p.add_argument("--epochs", type=int, default=10, metavar="E")
    p.add_argument("--classes-per-batch", type=int, default=8, metavar="C")
    p.add_argument("--images-per-class", type=int, default=4, metavar="M")
    p.add_argument("--lr", type=float, default=1e-4, metavar="LR")
    p.add_argument("--head-lr-mult", type=float, default=10.0, metavar="X")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    p.add_argument("--image-size", type=int, default=128, metavar="S")
    p.add_argument("--seed", type=int, default=0, metavar="K")
    p.add_argument("--resume", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError
