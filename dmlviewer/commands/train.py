"""``dmlviewer train``: train a model; checkpoints and metrics.jsonl in the run folder.

Progress goes to stderr as text (a line every ``--log-every`` steps, per evaluation and per
checkpoint), the last line a summary. The first Ctrl-C (or SIGTERM) cancels cleanly: the
loop stops after the current batch and saves a checkpoint that ``--resume`` continues.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

BACKBONES = ["resnet18", "resnet34", "resnet50", "resnet101", "googlenet", "inception_v3",
             "mobilenet_v3_large", "efficientnet_b0", "efficientnet_lite0", "small_cnn"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import MAX_IMAGE_SIZE, add_device, float_range, int_range, seed_type

    weight = float_range(0.0, 1e6)
    p = sub.add_parser("train", help="train a model",
                       description="Train a model; checkpoint.pt, config.json and metrics.jsonl go into the run folder.")
    p.add_argument("--dataset", required=True, metavar="P", help="dataset folder (format detected)")
    p.add_argument("--format", choices=["cub", "cars196", "sop", "inshop", "folder"],
                   help="dataset format (default: detected from the folder)")
    p.add_argument("--protocol", default="default", choices=["default", "zero-shot", "official"],
                   help="split protocol")
    p.add_argument("--out", required=True, metavar="RUN",
                   help="run folder: checkpoint.pt, config.json and metrics.jsonl are written there")
    p.add_argument("--backbone", choices=BACKBONES, default="small_cnn", help="backbone network")
    p.add_argument("--pretrained", default="none", help="backbone weights: none | imagenet | FILE")
    p.add_argument("--pooling", choices=["gap", "gmp", "gem"], default="gap", help="global pooling")
    p.add_argument("--grouping", choices=["none", "m", "g", "c", "a"], default="none", help="grouping head")
    p.add_argument("--groups", type=int_range(1, 512), default=4, metavar="P", help="number of groups P")
    p.add_argument("--dim", type=int_range(1, 16384), default=128, metavar="D", help="embedding dimension D")
    p.add_argument("--loss", choices=["contrastive", "triplet", "margin", "binomial", "ms", "proxy_nca"],
                   default="margin", help="metric loss")
    p.add_argument("--miner", choices=["auto", "none", "semihard", "multi_similarity", "distance_weighted"],
                   default="auto", help="pair/triplet miner (auto: semihard for triplet, MS miner for ms)")
    p.add_argument("--binomial", choices=["deml", "dgml"], default="deml",
                   help="binomial deviance variant: deml (seed 004 Eq. 5) or dgml (seed 001 Table 1)")
    p.add_argument("--diversity", type=weight, default=0.0, metavar="W",
                   help="weight of the group diversity loss (seed 001 Eq. 14, lambda_1)")
    p.add_argument("--adversarial", choices=["none", "smooth", "adaptive"], default="none",
                   help="class adversary (seed 003)")
    p.add_argument("--adversarial-weight", type=weight, default=0.5, metavar="W",
                   help="lambda (smooth) or lambda_0 (adaptive) of the class adversary")
    p.add_argument("--deml-adversary", type=weight, default=0.0, metavar="W",
                   help="weight of DeML's adversary between learners (seed 004 Eq. 4)")
    p.add_argument("--activation-decay", type=weight, default=0.0, metavar="W",
                   help="weight of activation decay (seed 004 Eq. 6, lambda_1)")
    p.add_argument("--non-trivial", type=weight, default=0.25, metavar="W",
                   help="lambda_2 of activation decay's non-trivial term (seed 004 Eq. 6)")
    p.add_argument("--epochs", type=int_range(1, 100_000), default=10, metavar="E", help="epochs to train")
    p.add_argument("--steps-per-epoch", type=int_range(0, 10**9), default=0, metavar="N",
                   help="batches per epoch; 0: one pass over the data")
    p.add_argument("--classes-per-batch", type=int_range(2, 100_000), default=8, metavar="C",
                   help="classes in each batch")
    p.add_argument("--images-per-class", type=int_range(2, 100_000), default=4, metavar="M",
                   help="images of each class in a batch")
    p.add_argument("--lr", type=float_range(0.0, 10.0, low_open=True), default=1e-4, metavar="LR",
                   help="learning rate of the backbone")
    p.add_argument("--head-lr-mult", type=float_range(0.0, 1e4, low_open=True), default=10.0, metavar="X",
                   help="the head's learning rate is LR times X")
    p.add_argument("--weight-decay", type=float_range(0.0, 10.0), default=2e-4, metavar="W", help="weight decay")
    p.add_argument("--optimizer", choices=["adam", "adamw", "sgd"], default="adam", help="optimizer")
    p.add_argument("--scheduler", choices=["constant", "cosine"], default="cosine", help="learning-rate schedule")
    add_device(p)
    p.add_argument("--amp", choices=["auto", "on", "off"], default="auto",
                   help="mixed precision (auto: on for CUDA)")
    p.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms")
    p.add_argument("--num-workers", type=int_range(0, 256), default=2, metavar="N", help="data loader processes")
    p.add_argument("--image-size", type=int_range(32, MAX_IMAGE_SIZE), default=128, metavar="S",
                   help="input size in pixels (images are resized to S x S)")
    p.add_argument("--eval-every", type=int_range(0, 100_000), default=1, metavar="E",
                   help="epochs between evaluations; 0: only after the last epoch")
    p.add_argument("--eval-batch-size", type=int_range(1, 65_536), default=64, metavar="B",
                   help="batch size of the evaluations")
    p.add_argument("--log-every", type=int_range(1, 10**9), default=10, metavar="N", help="steps between log lines")
    p.add_argument("--seed", type=seed_type, default=0, metavar="K", help="random seed")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in RUN from its checkpoint (same dataset and options; --epochs may grow)")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace):
    from dmlviewer.core.train import TrainConfig

    names = set(TrainConfig.__dataclass_fields__) - {"ks"}
    return TrainConfig(**{k: v for k, v in vars(args).items() if k in names})


def _format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _metrics_text(metrics: dict) -> str:
    keys = [k for k in metrics if k.startswith("recall@")] + ["nmi", "f1", "map@r"]
    return " ".join(f"{k} {metrics[k]:.4f}" for k in keys if k in metrics)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.core.progress import CancelToken
    from dmlviewer.core.train import TrainingError, train, validate

    config = config_from_args(args)
    errors = validate(config)
    if errors:
        raise UsageError("; ".join(errors))
    cancel = CancelToken()

    def on_signal(signum, frame):
        if cancel.cancelled:
            raise KeyboardInterrupt
        sys.stderr.write("\ncancelling: saving a checkpoint after this batch (again to abort)\n")
        cancel.cancel()

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    start = time.perf_counter()
    result = None
    try:
        for event in train(config, cancel):
            if event.kind == "step":
                d = event.data
                if d["step"] % config.log_every == 0:
                    terms = " ".join(f"{k} {v:.4f}" for k, v in d["losses"].items())
                    sys.stderr.write(f"epoch {d['epoch']}/{config.epochs} step {event.current}/{event.total} "
                                     f"loss {d['loss']:.4f} ({terms}) lr {d['lr']:.2e} "
                                     f"eta {_format_duration(event.eta_s)}\n")
            elif event.kind == "eval":
                sys.stderr.write(f"epoch {event.data['epoch']} test: {_metrics_text(event.data['metrics'])}\n")
            elif event.kind in ("log", "checkpoint"):
                sys.stderr.write(f"{event.message or event.data}\n")
            elif event.kind == "done":
                result = event.data["result"]
    except TrainingError as exc:
        sys.stderr.write(f"dmlviewer train: error: {exc}\n")
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    wall = time.perf_counter() - start
    state = "cancelled" if result["cancelled"] else "done"
    sys.stderr.write(f"{state}: {result['epochs']} epoch(s), {result['steps']} steps in {_format_duration(wall)}; "
                     f"checkpoint {result['checkpoint']}; {_metrics_text(result['metrics']) or 'no test metrics'}\n")
    return 0
