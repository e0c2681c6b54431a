"""Device strings."""

from __future__ import annotations

import pytest
import torch

from dmlviewer.core.models import available_devices, resolve_device


def test_cpu_and_auto_without_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert available_devices() == ["cpu"]
    for spec in ("cuda", "cuda:0", "mps"):
        with pytest.raises(ValueError, match="not available"):
            resolve_device(spec)
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu")


def test_cuda_indices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cuda:0")
    assert resolve_device("cuda") == torch.device("cuda:0")
    assert resolve_device("CUDA:1") == torch.device("cuda:1")
    assert available_devices() == ["cpu", "cuda:0", "cuda:1"]
    with pytest.raises(ValueError, match="only 2 CUDA"):
        resolve_device("cuda:2")
    with pytest.raises(ValueError, match="cuda:N"):
        resolve_device("cuda:x")
