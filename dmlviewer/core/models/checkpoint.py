"""Checkpoints: one ``torch.save`` file of tensors and plain values (DESIGN.md "Checkpoint").

``{"format": "dmlviewer-checkpoint", "version": 1, "config": {...}, "state_dict": {...},
"epoch": int, "metrics": {...}, "extra": {...}}`` where ``extra`` holds optional tensors and
plain values (e.g. optimizer state for resuming). Written atomically (temporary file in the same
folder named as :mod:`dmlviewer.core.files` names them, fsync, ``os.replace``; a full disk is
one ``OSError`` and leaves the previous file); read only with ``torch.load(weights_only=True)``,
so a file with arbitrary pickled objects is refused before anything in it runs. A checkpoint is
not trusted: its config is validated before the model is built (``check_config``), its state
dict must hold finite tensors of the architecture's names and shapes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from dmlviewer.core.files import GuardedWriter, atomic_target

from .backbones import CHECKPOINT_FORMAT, format_keys, read_weights_file
from .device import resolve_device
from .errors import CheckpointError
from .model import EmbeddingModel, build_model
from .two_branch import build_two_branch, is_two_branch_config

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
_PLAIN = (type(None), bool, int, float, str, torch.Tensor)


def _check_plain(value, where: str) -> None:
    """Refuse anything ``torch.load(weights_only=True)`` could not read back."""
    if isinstance(value, _PLAIN):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"checkpoint {where} has a key of type {type(key).__name__}")
            _check_plain(item, f"{where}[{key!r}]")
        return
    raise TypeError(f"checkpoint {where} holds a {type(value).__name__}: only tensors and plain values are allowed")


def check_finite(tensors: Mapping[str, torch.Tensor], where: str) -> None:
    """``CheckpointError`` naming the first floating-point tensor that holds NaN or infinity: a
    model with such weights computes NaN embeddings (a diverged training), never a usable one.
    The one check of every door that reads weights (checkpoints, the code door, import-model)."""
    for key, tensor in tensors.items():
        if isinstance(tensor, torch.Tensor) and (tensor.is_floating_point() or tensor.is_complex()):
            finite = torch.isfinite(tensor)
            if not bool(finite.all()):
                bad = int((~finite).sum())
                raise CheckpointError(f"{where}: the weights are not finite: {key} holds {bad} NaN or infinite "
                                      f"value(s) of {tensor.numel()}; the model cannot be used (did its "
                                      "training diverge?)")


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_checkpoint(path: str | os.PathLike, model: EmbeddingModel, epoch: int = 0,
                    metrics: dict | None = None, extra: dict | None = None) -> Path:
    """Write ``model`` (config + state dict), ``epoch``, ``metrics`` and ``extra`` atomically."""
    path = Path(path)
    json.dumps(model.config)  # the config must stay JSON-serializable
    payload = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "config": dict(model.config),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "epoch": int(epoch),
        "metrics": dict(metrics or {}),
        "extra": dict(extra or {}),
    }
    _check_plain(payload["metrics"], "metrics")
    _check_plain(payload["extra"], "extra")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_target(path) as tmp:
        writer = GuardedWriter(tmp)  # torch's own file writer hides a full disk ("unexpected pos")
        try:
            torch.save(payload, writer)
        except RuntimeError:
            writer.raise_error()  # the real cause, when a write failed
            raise
        finally:
            writer.close()
        writer.raise_error()
    log.info("saved checkpoint %s (epoch %d)", path, epoch)
    return path


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu"
                    ) -> tuple[EmbeddingModel, dict]:
    """Rebuild the model from the checkpoint's config and load its state dict (eval mode).

    Returns ``(model, info)``: ``info`` is the checkpoint without ``state_dict`` (``format``,
    ``version``, ``config``, ``epoch``, ``metrics``, ``extra``) plus ``sha256`` of the file and
    ``path``. Raises ``FileNotFoundError`` for a missing file and ``CheckpointError`` for an
    unsafe, malformed or mismatching one.
    """
    path = Path(path)
    data = read_weights_file(path)  # torch.load(weights_only=True) on CPU
    if data.get("format") != CHECKPOINT_FORMAT:
        if data and all(isinstance(v, torch.Tensor) for v in data.values()):
            error = CheckpointError(f"{path} is a bare state dict, not a dmlviewer checkpoint: "
                                    "use it as backbone weights (pretrained FILE)")
            error.bare_state_dict = True  # the app offers File > Import Model on it (issue 23 item 9)
            raise error
        raise CheckpointError(f"{path} is not a dmlviewer checkpoint (no format {CHECKPOINT_FORMAT!r})")
    if data.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path} is checkpoint version {data.get('version')!r}; "
                              f"this dmlviewer reads version {CHECKPOINT_VERSION}")
    for key, kind in (("config", dict), ("state_dict", dict)):
        if not isinstance(data.get(key), kind):
            raise CheckpointError(f"{path} has no valid {key!r}")
    try:
        model = (build_two_branch if is_two_branch_config(data["config"]) else build_model)(  # issue 25
            data["config"], "cpu", load_pretrained=False)
    except (ValueError, ImportError) as exc:
        raise CheckpointError(f"{path}: cannot build its model: {exc}") from None
    state = data["state_dict"]
    wrong = [str(k) for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if wrong:
        raise CheckpointError(f"{path}: its state_dict holds entries that are not named tensors: {format_keys(wrong)}")
    if not isinstance(data.get("epoch", 0), int) or isinstance(data.get("epoch", 0), bool) or data.get("epoch", 0) < 0:
        raise CheckpointError(f"{path}: its epoch must be a non-negative integer, got {data.get('epoch')!r}"[:200])
    for key in ("metrics", "extra"):
        if not isinstance(data.get(key) or {}, dict):
            raise CheckpointError(f"{path}: its {key!r} must be a dictionary")
    expected = model.state_dict().keys()
    missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
    if missing or unexpected:
        raise CheckpointError(f"{path} does not match its architecture: missing keys "
                              f"[{format_keys(missing)}]; unexpected keys [{format_keys(unexpected)}]")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{path} does not match its architecture: {' '.join(str(exc).split())[:500]}") from None
    check_finite(state, str(path))
    model = model.to(resolve_device(device)).eval()
    info = {k: v for k, v in data.items() if k != "state_dict"}
    info.setdefault("metrics", {})
    info.setdefault("extra", {})
    info.update(path=str(path), sha256=file_sha256(path))
    return model, info
