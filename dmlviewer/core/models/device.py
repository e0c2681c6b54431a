"""Device selection: turn a user's device string into a ``torch.device``, list what is present."""

from __future__ import annotations

import torch


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def available_devices() -> list[str]:
    """Every device this machine can run on: ``cpu``, each ``cuda:N``, and ``mps`` when present."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        devices.append("mps")
    return devices


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """``auto`` (first GPU, else MPS, else CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.

    Raises ``ValueError`` with one line when the device is unknown or not present here.
    """
    if isinstance(spec, torch.device):
        spec = str(spec)
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda:0")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "mps":
        if not _mps_available():
            raise ValueError("device 'mps' requested but MPS is not available on this machine")
        return torch.device("mps")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {spec!r} requested but CUDA is not available on this machine")
        index = 0
        if spec != "cuda":
            text = spec.split(":", 1)[1]
            if not text.isdigit():
                raise ValueError(f"bad device {spec!r}: expected cuda:N with N a number")
            index = int(text)
        count = torch.cuda.device_count()
        if index >= count:
            raise ValueError(f"device {spec!r} requested but only {count} CUDA device(s) are present")
        return torch.device(f"cuda:{index}")
    raise ValueError(f"unknown device {spec!r}: use auto, cpu, cuda, cuda:N or mps")
