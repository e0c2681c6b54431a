"""How far the run in a run folder got, read without loading its weights: the training dialog
says a run already finished before Resume is pressed, as both trainers refuse it when started."""

from __future__ import annotations

import logging
import os
import warnings

log = logging.getLogger(__name__)


def saved_progress(path: str | os.PathLike) -> tuple[int, bool] | None:
    """``(epochs finished, stopped within an epoch)`` of a checkpoint written by ``train`` or
    ``train --branches 2``; None when it cannot be read (starting the run then says why). Read
    with ``torch.load(weights_only=True, mmap=True)``: the tensors stay on disk."""
    import torch

    from dmlviewer.core.files import file_problem

    if file_problem(path) is not None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - any unreadable file: the trainer's own check names the problem
        log.debug("cannot read %s", path, exc_info=True)
        return None
    if not isinstance(data, dict) or not isinstance(data.get("epoch"), int):
        return None
    extra = data.get("extra") if isinstance(data.get("extra"), dict) else {}
    sampler = extra.get("sampler") if isinstance(extra.get("sampler"), dict) else {}
    cross_view = extra.get("cross_view") if isinstance(extra.get("cross_view"), dict) else {}
    within = sampler.get("start") or cross_view.get("step_in_epoch") or 0
    return int(data["epoch"]), bool(isinstance(within, int) and within > 0)
