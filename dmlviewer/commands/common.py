"""Helpers the commands share: loading a checkpoint for a command, and the text progress
display that drives a core job generator (the CLI's counterpart of the GUI's worker).

Bad dataset, image, checkpoint and feature files need no handling here: ``dmlviewer.cli``
reports them in one line with exit status 2.
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger(__name__)


#: How the commands' ``--checkpoint`` help names what it takes.
CHECKPOINT_HELP = ("checkpoint file (.pt: from training or import-model), or imagenet:BACKBONE for a "
                   "pretrained backbone without training (GAP of its last map, no projection)")


def model_source_exists(source: str) -> bool:
    """True for an existing file or an ``imagenet:BACKBONE`` spec (checked when it is opened)."""
    from pathlib import Path

    return str(source).startswith("imagenet:") or Path(source).is_file()


def load_model(checkpoint: str, device: str, size: int | None = None):
    """``(model, torch.device)`` from a checkpoint file or ``imagenet:BACKBONE`` (a pretrained
    backbone, GAP, no projection), in eval mode; ``size`` overrides the input size."""
    from dmlviewer.cli import UsageError
    from dmlviewer.core.models import open_model, resolve_device

    try:
        dev = resolve_device(device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    model, info = open_model(checkpoint, dev, size=size)
    log.info("model %s; decomposition %s", checkpoint, info["rule"])
    return model.eval(), dev


def drive(job, label: str):
    """Run a progress generator to its end with a one-line progress display on stderr; returns
    the ``done`` event's result."""
    tty = sys.stderr.isatty()
    last = 0.0
    result = None
    for event in job:
        if event.kind == "done":
            result = event.data.get("result")
            continue
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
    if tty:
        sys.stderr.write("\n")
    return result
