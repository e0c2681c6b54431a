"""``dmlviewer train``: train a model; checkpoints and metrics.jsonl in the run folder.

Options left out take the value of the recipe (``--recipe``, ``default`` when not given; see
``core/train/recipes.py``), options given always win. With ``--resume`` and no ``--recipe``, the
options left out keep the run's own values (``RUN/config.json``): the defaults may have changed
since the run started. Progress goes to stderr as text: a line
every ``--log-every`` steps and at least every ``PRINT_EVERY_S`` seconds during training and
evaluation, per evaluation and per checkpoint, the last line a summary. The first Ctrl-C (or
SIGTERM) cancels cleanly: the loop stops after the current batch and saves a checkpoint that
``--resume`` continues.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

#: the longest silence on stderr while training or evaluating (seconds)
PRINT_EVERY_S = 10.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import DEVICE_HELP, MAX_IMAGE_SIZE, device_type, float_range, int_range, seed_type
    from dmlviewer.core.train.config import (ADVERSARIAL_MODES, AMP_MODES, BACKBONES, BINOMIAL_PRESETS,
                                             DIVERSITY_VARIANTS, FREEZE_BN_MODES, GROUPINGS, METRIC_LOSSES, MINERS,
                                             OPTIMIZERS, POOLINGS, SCHEDULERS, SELECT_METRICS, TrainConfig)
    from dmlviewer.core.train.recipes import RECIPES

    d = TrainConfig()
    weight = float_range(0.0, 1e6)
    p = sub.add_parser(
        "train", help="train a model",
        description="Train a model; checkpoint.pt (the last state), best.pt (the model selected on validation, "
                    "when there is a validation split), config.json and metrics.jsonl go into the run folder. "
                    "Options not given take the value of the recipe (--recipe, 'default' when not given); the "
                    "defaults shown are those of the 'default' recipe for a backbone trained from scratch (a "
                    "pretrained backbone gets lr 1e-4 with the new layers at x10, a one-epoch head warm-up and a "
                    "0.2 validation share unless given).")
    S = argparse.SUPPRESS

    def opt(*flags, default=None, help="", **kwargs):
        shown = f" (default: {default})" if default not in (None, "") else ""
        p.add_argument(*flags, default=S, help=help + shown, **kwargs)

    p.add_argument("--recipe", choices=list(RECIPES), default=S,  # absent: "default", or the run's own with --resume
                   help="named preset (default: default; with --resume, the run's own options): " + "; ".join(f"{r.name}: {r.title}" for r in RECIPES.values()))
    opt("--dataset", metavar="P", help="dataset folder, format detected (required)")
    opt("--format", choices=["cub", "cars196", "sop", "inshop", "folder"],
        help="dataset format (default: detected from the folder)")
    opt("--protocol", default=d.protocol, choices=["default", "zero-shot", "official"], help="split protocol")
    opt("--out", metavar="RUN", help="run folder (required)")
    opt("--backbone", type=backbone_type, default=d.backbone, metavar="NAME",
        help=f"backbone network: {', '.join(BACKBONES)}, or timm:NAME (a timm CNN or vision transformer, e.g. "
             "timm:resnet50, timm:vit_small_patch16_224; extra timm)")
    opt("--pretrained", default=d.pretrained, help="backbone weights: none | imagenet | FILE")
    opt("--pooling", choices=POOLINGS, default=d.pooling, help="global pooling")
    opt("--grouping", choices=GROUPINGS, default=d.grouping, help="grouping head (seed 001, 004)")
    opt("--groups", type=int_range(1, 512), default=d.groups, metavar="P", help="number of groups P")
    opt("--dim", type=int_range(1, 16384), default=d.dim, metavar="D", help="embedding dimension D")
    opt("--image-size", type=int_range(32, MAX_IMAGE_SIZE), default=d.image_size, metavar="S",
        help="input size in pixels (images are resized to S x S)")
    opt("--multilayer", type=lambda s: [x for x in s.split(",") if x], metavar="MAPS",
        help="comma-separated intermediate feature maps attended by seed 003's head (default: none)")
    opt("--loss", choices=METRIC_LOSSES, default=d.loss, help="metric loss")
    opt("--miner", choices=MINERS, default=d.miner,
        help="pair/triplet miner (auto: semihard for triplet, the MS miner for ms)")
    opt("--binomial", choices=list(BINOMIAL_PRESETS), default=d.binomial,
        help="binomial deviance variant: dgml (seed 001's official code), dgml_printed (seed 001 Table 1 "
             "as printed) or deml (seed 004 Eq. 5)")
    opt("--triplet-margin", type=float_range(0.0, 10.0), default=d.triplet_margin, metavar="M",
        help="margin of the triplet loss and its semi-hard miner")
    opt("--diversity", type=weight, default=d.diversity, metavar="W",
        help="weight of the group diversity loss (seed 001 Eq. 14, lambda_1)")
    opt("--diversity-variant", choices=list(DIVERSITY_VARIANTS), default=d.diversity_variant,
        help="diversity loss: official (DGML code: beta_0 25, sum over group pairs / (P-1)) or printed "
             "(seed 001 Eq. 4, 14: beta_0 1, mean over pairs)")
    opt("--adversarial", choices=ADVERSARIAL_MODES, default=d.adversarial, help="class adversary (seed 003)")
    opt("--adversarial-weight", type=weight, default=d.adversarial_weight, metavar="W",
        help="lambda (smooth) or lambda_0 (adaptive) of the class adversary")
    opt("--deml-adversary", type=weight, default=d.deml_adversary, metavar="W",
        help="weight of DeML's adversary between learners (seed 004 Eq. 4)")
    opt("--activation-decay", type=weight, default=d.activation_decay, metavar="W",
        help="weight of activation decay (seed 004 Eq. 6, lambda_1)")
    opt("--non-trivial", type=weight, default=d.non_trivial, metavar="W",
        help="lambda_2 of activation decay's non-trivial term (seed 004 Eq. 6)")
    opt("--epochs", type=int_range(1, 100_000), default=d.epochs, metavar="E", help="epochs to train")
    opt("--steps-per-epoch", type=int_range(0, 10**9), default=d.steps_per_epoch, metavar="N",
        help="batches per epoch; 0: one pass over the data")
    opt("--classes-per-batch", type=int_range(2, 100_000), default=d.classes_per_batch, metavar="C",
        help="classes in each batch (fewer when the training set has fewer)")
    opt("--images-per-class", type=int_range(2, 100_000), default=d.images_per_class, metavar="M",
        help="images of each class in a batch")
    opt("--lr", type=float_range(0.0, 10.0, low_open=True), default=d.lr, metavar="LR",
        help="learning rate of the backbone")
    opt("--head-lr-mult", type=float_range(0.0, 1e4, low_open=True), default=d.head_lr_mult, metavar="X",
        help="the new layers' learning rate is LR times X")
    opt("--weight-decay", type=float_range(0.0, 10.0), default=d.weight_decay, metavar="W",
        help="weight decay (lambda_2 of seed 001 Eq. 14)")
    opt("--optimizer", choices=OPTIMIZERS, default=d.optimizer, help="optimizer")
    opt("--scheduler", choices=SCHEDULERS, default=d.scheduler, help="learning-rate schedule")
    opt("--val-fraction", type=float_range(0.0, 0.9), default=d.val_fraction, metavar="F",
        help="share of the training classes (of each class's images when there are few classes) held out to "
             "select best.pt; a pretrained backbone holds out at least 4 whole classes (4 left to train), or keeps "
             "its epoch-0 model when there are fewer than 8; 0: keep the last epoch")
    opt("--select-metric", choices=SELECT_METRICS, default=d.select_metric, help="validation metric that selects")
    opt("--patience", type=int_range(0, 100_000), default=d.patience, metavar="N",
        help="stop after N evaluations without a validation improvement (0: never)")
    opt("--freeze-bn", choices=FREEZE_BN_MODES, default=d.freeze_bn,
        help="keep the backbone's BatchNorm statistics fixed (auto: for pretrained backbones)")
    opt("--warmup-epochs", type=int_range(0, 100_000), default=d.warmup_epochs, metavar="E",
        help="epochs training only the new layers before the backbone")
    opt("--device", type=device_type, default=d.device, metavar="DEVICE", help=f"where training runs: {DEVICE_HELP}")
    opt("--amp", choices=AMP_MODES, default=d.amp, help="mixed precision (auto: on for CUDA)")
    p.add_argument("--deterministic", action="store_true", default=S,
                   help="bit-identical repeat runs: torch.use_deterministic_algorithms, one CPU thread")
    opt("--num-workers", type=int_range(0, 256), default=d.num_workers, metavar="N", help="data loader processes")
    opt("--eval-every", type=int_range(0, 100_000), default=d.eval_every, metavar="E",
        help="epochs between evaluations; 0: only after the last epoch")
    opt("--eval-batch-size", type=int_range(1, 65_536), default=d.eval_batch_size, metavar="B",
        help="batch size of the evaluations")
    opt("--log-every", type=int_range(1, 10**9), default=d.log_every, metavar="N", help="steps between log lines")
    opt("--seed", type=seed_type, default=d.seed, metavar="K", help="random seed")
    p.add_argument("--resume", action="store_true", default=S,
                   help="continue the run in RUN from its checkpoint (same dataset and options; --epochs may grow)")
    opt("--branches", type=int, choices=(1, 2), default=1, metavar="N",
        help="2: a query (street) and a reference (aerial) branch with separate weights, trained on a cvusa "
             "dataset with the soft-margin triplet loss; reads --backbone, --pretrained, --pooling, --dim, --epochs, "
             "--lr, --classes-per-batch (pairs per batch), --image-size (aerial S, panorama S/2 x 2S), --device, "
             "--seed, --deterministic and --resume, and refuses options of one-branch recipes (losses, heads, "
             "schedules)")
    p.set_defaults(func=run)


def backbone_type(text: str) -> str:
    """``--backbone``: a listed backbone, or ``timm:NAME`` when timm is installed (the name itself
    is checked when the model is built: importing timm takes seconds)."""
    import importlib.util

    from dmlviewer.core.train.config import BACKBONES

    if text in BACKBONES:
        return text
    if text.startswith("timm:") and text[len("timm:"):].strip():
        if importlib.util.find_spec("timm") is None:
            raise argparse.ArgumentTypeError(f"{text}: timm backbones need the optional package timm "
                                             "(pip install 'dmlviewer[timm]')")
        return text
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(BACKBONES)}, or timm:NAME)")


def option_names() -> dict[str, str]:
    """How this command words the core's errors (they name options by identifier): ``--lr``."""
    from dmlviewer.commands.options import option_names as names
    from dmlviewer.core.train.config import TrainConfig

    return names(TrainConfig.__dataclass_fields__)


def config_from_args(args: argparse.Namespace):
    """The :class:`TrainConfig`: recipe ``args.recipe`` with the options given on top."""
    from dmlviewer.core.train import TrainConfig
    from dmlviewer.core.train.recipes import apply_recipe

    names = set(TrainConfig.__dataclass_fields__) - {"ks"}
    given = {k: v for k, v in vars(args).items() if k in names}
    if given.get("resume") and not hasattr(args, "recipe"):
        # Resuming: the options left out keep the run's own values (RUN/config.json), not
        # today's defaults, which may have changed since the run started.
        try:
            saved = TrainConfig.read(Path(given["out"]))
        except FileNotFoundError:
            saved = None  # no such run: the loop says what is missing
        if saved is not None:
            return TrainConfig.from_dict({**saved.to_dict(), **given})
    return apply_recipe(getattr(args, "recipe", None), given)


def _format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _metrics_text(metrics: dict) -> str:
    keys = [k for k in metrics if k.startswith("recall@")] + ["nmi", "f1", "map@r"]
    return " ".join(f"{k} {metrics[k]:.4f}" for k in keys if k in metrics)


class _Shown(logging.Filter):
    """Remembers the messages of the log records that a handler writes (it filters nothing), so
    that the printer does not echo a training's ``log`` event whose record stderr already shows
    (each warning was printed twice, issue 42 item 10)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        self.messages.add(record.getMessage())
        return True


class _Printer:
    """Progress lines on stderr: every ``log_every`` steps, and whenever ``PRINT_EVERY_S`` have
    passed without a line (long steps, evaluations); a ``log`` event only when no log record on
    stderr said it (:class:`_Shown`, attached to the root logger's handlers while it lives)."""

    def __init__(self, config) -> None:
        self.config = config
        self.last = time.monotonic()
        self.shown = _Shown()
        self._handlers = list(logging.getLogger().handlers)
        for handler in self._handlers:
            handler.addFilter(self.shown)

    def close(self) -> None:
        for handler in self._handlers:
            handler.removeFilter(self.shown)

    def write(self, text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        self.last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.last >= PRINT_EVERY_S

    def event(self, event) -> None:
        c, d = self.config, event.data
        left = f"eta {_format_duration(event.eta_s)}"
        if "overall" in d:
            left = f"{d['overall']:.0%} done, {left}"
        if event.kind == "step":
            if d["step"] % c.log_every == 0 or self.due():
                terms = " ".join(f"{k} {v:.4f}" for k, v in d["losses"].items())
                self.write(f"epoch {d['epoch']}/{c.epochs} step {event.current}/{event.total} "
                           f"loss {d['loss']:.4f} ({terms}) lr {d['lr']:.2e}; {left}")
        elif event.kind == "evaluate":
            if self.due():
                self.write(f"{event.message} {d['images']}/{d['of']} images; {left}")
        elif event.kind == "eval":
            val = f"; validation {_metrics_text(d['val'])}" if d.get("val") else ""
            best = " (best so far)" if d.get("best") else ""
            self.write(f"epoch {d['epoch']} test: {_metrics_text(d['metrics'])}{val}{best}")
        elif event.kind in ("log", "checkpoint"):
            text = f"{event.message or event.data}"
            if text not in self.shown.messages:
                self.write(text)


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import cancel_on_signals
    from dmlviewer.core.fields import worded
    from dmlviewer.core.progress import CancelToken, drive
    from dmlviewer.core.train import TrainingError, train, validate

    missing = [f"--{name}" for name in ("dataset", "out") if not hasattr(args, name)]
    if missing:
        raise UsageError(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required")
    if getattr(args, "branches", 1) == 2:  # cross-view (issue 25)
        from dmlviewer.commands.train_two_branch import run as run_two_branch

        return run_two_branch(args)
    if getattr(args, "resume", False):
        from dmlviewer.core.train.cross_view import saved_config

        if saved_config(args.out) is not None:
            raise UsageError(f"{args.out} holds a two-branch run: resume it with --branches 2")
    try:
        config = config_from_args(args)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    names = option_names()
    errors = validate(config)
    if errors:
        raise UsageError("; ".join(worded(e, names) for e in errors))
    cancel = CancelToken()
    printer = _Printer(config)
    recipe = getattr(args, "recipe", "default")
    printer.write(f"recipe {recipe}: loss {config.loss}, lr {config.lr:g} (new layers x{config.head_lr_mult:g}), "
                  f"batch {config.classes_per_batch} x {config.images_per_class}, {config.epochs} epochs, "
                  f"validation share {config.val_fraction:g}")
    start = time.perf_counter()
    try:
        with cancel_on_signals(cancel):
            result, _done = drive(train(config, cancel), cancel,
                                  lambda event: printer.event(event) if event.kind != "done" else None)
    except TrainingError as exc:
        sys.stderr.write(f"dmlviewer train: error: {worded(exc, names)}\n")
        return 1
    finally:
        printer.close()
    wall = time.perf_counter() - start
    state = "cancelled" if result["cancelled"] else "done"
    chosen = (f"selected epoch {result['selected_epoch']} on {result['selected_on']}"
              if result["checkpoint"] != result["last_checkpoint"] else "the last epoch")
    sys.stderr.write(f"{state}: {result['epochs']} epoch(s), {result['steps']} steps in {_format_duration(wall)}; "
                     f"model {result['checkpoint']} ({chosen}; last state {result['last_checkpoint']}); "
                     f"test {_metrics_text(result['metrics']) or 'not evaluated'}\n")
    return 0
