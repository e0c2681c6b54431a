"""Helpers the commands share: argument types that check ranges when the command line is
parsed, the one JSON style of every command, output-path checks, the model options of every
command that opens a model (``--checkpoint`` or ``--model`` with ``--model-args``,
``--weights`` and, for a two-branch model, ``--reference-weights`` and ``--input-shapes``:
:func:`add_model_options`, :func:`open_command_model`), and the text progress
display that drives a core job generator (the CLI's counterpart of the GUI's worker).

Bad dataset, image, checkpoint and feature files need no handling here: ``dmlviewer.cli``
reports them in one line with exit status 2.

JSON on stdout (``--json``): every command prints one JSON document, indented by two spaces,
keys in the order the contract lists them, followed by a newline; it is strict JSON (a
non-finite number is written as ``null``, never ``NaN`` or ``Infinity``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

#: the largest square input size a command accepts (as model configs, see core.models.model)
MAX_IMAGE_SIZE = 4096
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d{1,3})?)$")
DEVICE_HELP = "auto | cpu | cuda | cuda:N | mps"


def int_range(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer from ``low`` to ``high`` (inclusive)."""
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer from {low} to {high}, got {text}")
        return value

    parse.__name__ = "integer"
    return parse


def float_range(low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    """argparse type: a finite number in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"must be a finite number in {interval}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def shape_type(low: int, high: int) -> Callable[[str], tuple[int, int]]:
    """argparse type: one input shape, a side ``S`` or ``HxW`` (e.g. ``64x256``), each side from
    ``low`` to ``high``; ``(height, width)``."""
    def parse(text: str) -> tuple[int, int]:
        from dmlviewer.core.models.two_branch import parse_input_shape

        try:
            shape = parse_input_shape(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if not all(low <= v <= high for v in shape):
            raise argparse.ArgumentTypeError(f"each side must be from {low} to {high} pixels, got {text[:40]}")
        return shape

    parse.__name__ = "shape"
    return parse


def input_shapes_type(text: str) -> list[list[int]]:
    """argparse type: the two branches' input shapes, ``QUERY,REFERENCE`` (each ``S`` or
    ``HxW``, e.g. ``64x256,128``), as JSON-ready ``[[h, w], [h, w]]`` (``--input-shapes``)."""
    from dmlviewer.core.models.two_branch import parse_input_shapes

    try:
        return [list(shape) for shape in parse_input_shapes(text)]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def thresholds_type(text: str) -> list[float]:
    """argparse type: localization thresholds, ``a:b:step`` or a comma list (``parse_thresholds``)."""
    from dmlviewer.core.explain.boxes import parse_thresholds

    try:
        return parse_thresholds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: seeds as numpy and torch take them
seed_type = int_range(0, 2**32 - 1)


def device_type(text: str) -> str:
    """argparse type: a device name, refused at once when unknown or not present here."""
    spec = text.strip().lower()
    if not DEVICE_PATTERN.match(spec):
        raise argparse.ArgumentTypeError(f"unknown device {text!r}: use {DEVICE_HELP}")
    if spec not in ("auto", "cpu"):
        from dmlviewer.core.models.device import resolve_device

        try:
            resolve_device(spec)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return spec


def add_device(parser: argparse.ArgumentParser, default: str = "auto", what: str = "") -> None:
    parser.add_argument("--device", default=default, type=device_type, metavar="DEVICE",
                        help=f"where the model runs{what}: {DEVICE_HELP}")


def add_decode(parser: argparse.ArgumentParser, what: str = "", both: bool = False) -> None:
    """``--decode``: where the JPEGs of a feature extraction are decoded
    (:mod:`dmlviewer.core.data.decoders`)."""
    from dmlviewer.core.data.decoders import DECODES, DEFAULT_DECODE

    parser.add_argument("--decode", choices=DECODES, default=DEFAULT_DECODE,
                        help=f"{what}where JPEGs are decoded (cpu: by OpenCV in the loader workers; device: in one "
                             "batch on the model's device, recorded in the feature file as image_decoder=nvjpeg on a GPU; "
                             f"auto: on a CUDA device when torchvision can; default {DEFAULT_DECODE})"
                             + ("; on CUDA one run times both" if both else ""))


def print_json(value: Any) -> None:
    """Write ``value`` to stdout in the one JSON style of the command line (see the module
    docstring)."""
    from dmlviewer.core.json_style import json_text

    sys.stdout.write(json_text(value))
    sys.stdout.flush()


def check_output_file(path: str, what: str = "output") -> Path:
    """The output path, or :class:`~dmlviewer.cli.UsageError` when no file can be written there
    (no such folder, a folder, a device or FIFO)."""
    from dmlviewer.cli import UsageError
    from dmlviewer.core.files import output_problem

    problem = output_problem(path, what)
    if problem:
        raise UsageError(problem)
    return Path(path)


GRAD_FEATURES_HELP = ("feature file with grad_weights for grad_transfer (default: computed from the "
                      "dataset's train split; stored in the file only with --save-grad-weights)")
from dmlviewer.core.data.format_names import FORMATS  # noqa: E402
PROTOCOLS = ("default", "zero-shot", "official")


def add_save_grad_weights(p: argparse.ArgumentParser) -> None:
    p.add_argument("--save-grad-weights", action="store_true",
                   help="when --features has no grad_weights, store the computed ones in it (the file is "
                        "rewritten atomically); without this flag they are computed for this run only")


def add_source_options(p: argparse.ArgumentParser, features_help: str | None = None) -> None:
    """The options of the commands that score a checkpoint on a dataset: ``--format``,
    ``--protocol``, ``--features`` and ``--save-grad-weights`` (grad weights for grad_transfer,
    when ``features_help``), ``--device`` and ``--json``."""
    p.add_argument("--format", choices=FORMATS, help="dataset format (default: detected)")
    p.add_argument("--protocol", default="default", choices=PROTOCOLS, help="split protocol (default: default)")
    if features_help:
        p.add_argument("--features", help=features_help)
        add_save_grad_weights(p)
    add_device(p)
    p.add_argument("--json", action="store_true", help="print JSON on stdout")


#: How the commands' ``--checkpoint`` help names what it takes.
CHECKPOINT_HELP = ("checkpoint file (.pt: from training or import-model), or imagenet:BACKBONE for a "
                   "pretrained backbone without training (GAP of its last map, no projection)")
MODEL_HELP = ("your own model instead of --checkpoint: FILE.py:NAME or package.module:NAME, a function or class "
              "that returns a torch.nn.Module (NAME may be dotted, e.g. Net.from_config). The file is run as "
              "Python, as running your script would: give only code you trust")
MODEL_ARGS_HELP = "keyword arguments of --model's NAME, as a JSON object, e.g. '{\"dim\": 128}'"
WEIGHTS_HELP = ("weights for --model: a state dict or a training checkpoint (Lightning, DDP, torch.compile, "
                ".safetensors), read as data only (torch.load weights_only=True) and loaded strictly; default: "
                "the weights NAME builds")


REFERENCE_WEIGHTS_HELP = ("two-branch --model (NAME returns a (query, reference) pair of modules): the reference "
                          "branch's weights, --weights then holding the query branch's; default: --weights holds "
                          "both branches (keys query.* and reference.*)")
INPUT_SHAPES_HELP = ("two-branch --model: the query's and the reference's input shapes, each a side or HxW, e.g. "
                     "64x256,128 (a 1:4 street panorama and a 128 x 128 aerial image); default: 224 each")
FEATURE_LAYER_HELP = ("--model: the module whose output is the feature map the maps decompose (a name from "
                      "named_modules(), e.g. layer4 or trunk.3); default: the last layer with a spatial output. A "
                      "two-branch --model takes QUERY_LAYER,REFERENCE_LAYER")
OUTPUT_HELP = ("--model whose forward returns a tuple, list, dict or object: the key, index or attribute that "
               "holds the embedding (e.g. embeddings or 0); default: a tensor as it is, a one-element tuple's "
               "element, a dict's embedding, embeddings or features (a tuple of several is refused: say which)")
#: the options that only --model uses (command_model_source refuses them with --checkpoint)
CODE_OPTIONS = (("--model-args", "model_args"), ("--weights", "weights"),
                ("--reference-weights", "reference_weights"), ("--input-shapes", "input_shapes"),
                ("--feature-layer", "feature_layer"), ("--model-output", "model_output"))


def usage_error(exc: BaseException):
    """The :class:`~dmlviewer.cli.UsageError` (one line, exit status 2) for a core error, a field
    named by its option (:mod:`.options`)."""
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.options import worded

    return UsageError(worded(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__)


def json_object(text: str) -> dict:
    """argparse type: a JSON object (``--model-args``)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at character {exc.pos}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"dim\": 128}}', got {text[:80]!r}")
    return value


def add_model_options(p: argparse.ArgumentParser, required: bool = True, checkpoint_help: str = CHECKPOINT_HELP,
                      what: str = "") -> None:
    """``--checkpoint`` or ``--model`` (one of them, ``required`` or not), with ``--model-args``,
    ``--weights``, ``--reference-weights``, ``--input-shapes`` (these two for a two-branch model,
    issue 25), ``--feature-layer`` and ``--model-output``: the model options of every command that
    opens a model (DESIGN.md, the code-and-weights door). ``what``: appended to the help (e.g.
    " (for --region)")."""
    group = p.add_mutually_exclusive_group(required=required)
    group.add_argument("--checkpoint", metavar="C", help=checkpoint_help + what)
    group.add_argument("--model", metavar="FILE.py:NAME", help=MODEL_HELP + what)
    add_code_options(p)


def add_two_models(p: argparse.ArgumentParser, two: str) -> None:
    """``--checkpoint`` given up to twice (``two`` says what a second one does) and ``--model``
    with its options, counted as the last model (compare, report)."""
    p.add_argument("--checkpoint", action="append", default=None, metavar="C", help=CHECKPOINT_HELP + "; " + two)
    p.add_argument("--model", metavar="FILE.py:NAME", help=MODEL_HELP + "; counts as the last model")
    add_code_options(p)


def add_code_options(p: argparse.ArgumentParser) -> None:
    """The options that go with ``--model`` (``CODE_OPTIONS``)."""
    p.add_argument("--model-args", type=json_object, metavar="JSON", help=MODEL_ARGS_HELP)
    p.add_argument("--weights", metavar="FILE", help=WEIGHTS_HELP)
    p.add_argument("--reference-weights", metavar="FILE", help=REFERENCE_WEIGHTS_HELP)
    p.add_argument("--input-shapes", type=input_shapes_type, metavar="Q,R", help=INPUT_SHAPES_HELP)
    p.add_argument("--feature-layer", type=_layer_name, metavar="NAME", help=FEATURE_LAYER_HELP)
    p.add_argument("--model-output", type=_output_key, metavar="KEY", help=OUTPUT_HELP)


def _layer_name(text: str) -> str:
    """argparse type: a module name, or two separated by a comma (``--feature-layer``)."""
    parts = [part.strip() for part in text.split(",")]
    if not 1 <= len(parts) <= 2 or not all(parts) or not all(
            all(piece.isidentifier() or piece.isdigit() for piece in part.split(".")) for part in parts):
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a module name like layer4 or trunk.3 (two-branch: "
                                         "QUERY_LAYER,REFERENCE_LAYER)")
    return ",".join(parts)


def _output_key(text: str) -> str | int:
    """argparse type: an index (digits) or a key (``--model-output``)."""
    text = text.strip()
    if not text or len(text) > 200:
        raise argparse.ArgumentTypeError("give the key, attribute or index of the embedding, e.g. embeddings or 0")
    return int(text) if text.isdigit() else text


def command_model_source(args: argparse.Namespace):
    """The :class:`~dmlviewer.core.models.source.ModelSource` of ``--checkpoint`` or ``--model``
    (``None`` when neither is given); ``UsageError`` for ``--model-args`` or ``--weights``
    without ``--model`` and for a file that is not there."""
    from dmlviewer.cli import UsageError
    from dmlviewer.core.models.source import ModelSource

    entry = getattr(args, "model", None)
    if entry:
        given = {"input_shapes": getattr(args, "input_shapes", None),
                 "feature_layer": getattr(args, "feature_layer", None), "output": getattr(args, "model_output", None)}
        source = ModelSource("code", entry=entry, args=args.model_args or {}, weights=args.weights,
                             reference_weights=getattr(args, "reference_weights", None),
                             options={k: v for k, v in given.items() if v is not None})
    else:
        for option, attr in CODE_OPTIONS:
            if getattr(args, attr, None) is not None:
                raise UsageError(f"{option} is only used with --model")
        if not args.checkpoint:
            return None
        source = ModelSource.from_text(args.checkpoint)
    problem = source.missing()
    if problem:
        raise UsageError(problem)
    return source


def open_command_model(args: argparse.Namespace, device: str, size: int | None = None):
    """``(model, torch.device)`` from the command's ``--checkpoint`` or ``--model`` (see
    :func:`command_model_source`), in eval mode; ``size`` overrides the input size. The ways the
    model is run differently from how it was given (``info["notes"]``) are logged as warnings."""
    from dataclasses import replace

    from dmlviewer.cli import UsageError
    from dmlviewer.core.models import resolve_device

    source = command_model_source(args)
    if source is None:
        raise UsageError("give --checkpoint or --model")
    try:
        dev = resolve_device(device)
    except ValueError as exc:
        raise usage_error(exc) from None
    if size:
        source = replace(source, options={**source.options, "size": int(size)})
    model, info = source.open(dev)
    log.info("model %s; decomposition %s", source.display(), info["rule"])
    return model.eval(), dev


def drive(job, label: str):
    """Run a progress generator to its end with a one-line progress display on stderr; returns
    the ``done`` event's result. The core's one driver (``core.progress.drive``) runs the job and
    fills the ETA; this only draws the bar."""
    from dmlviewer.core.progress import drive as drive_job

    tty = sys.stderr.isatty()
    last = 0.0

    def show(event) -> None:
        nonlocal last
        if event.kind == "done":
            return
        now = time.monotonic()
        if event.total and (now - last > (0.2 if tty else 10.0) or event.current == event.total):
            last = now
            eta = f", {event.eta_s:.0f} s left" if event.eta_s is not None else ""
            line = f"{label}: {event.current}/{event.total} {event.message}{eta}"
            if tty:
                sys.stderr.write("\r" + line.ljust(70))
                sys.stderr.flush()
            else:
                log.info(line)

    try:
        result, _done = drive_job(job, emit=show)
    finally:
        if tty:
            sys.stderr.write("\n")
    return result


@contextlib.contextmanager
def cancel_on_signals(cancel) -> Iterator[None]:
    """While the block runs, the first Ctrl-C or SIGTERM cancels ``cancel`` (a
    :class:`~dmlviewer.core.progress.CancelToken`: the job saves a checkpoint after its batch and
    stops) and the second aborts; the previous handlers come back afterwards. Only the main
    thread can take signals; elsewhere this does nothing."""

    def on_signal(signum, frame) -> None:
        if cancel.cancelled:
            raise KeyboardInterrupt
        sys.stderr.write("\ncancelling: saving a checkpoint after this batch (again to abort)\n")
        cancel.cancel()

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into ``SystemExit(143)`` so that ``finally`` blocks and writers' aborts run
    (torchrun stops the remaining ranks with SIGTERM when one fails); only from the main thread."""

    def handler(signum, _frame) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
