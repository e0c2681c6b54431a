"""Lightning-style checkpoints read safely (issue 22 item 4): the data types a training
framework stores beside the tensors are read through torch's weights-only unpickler; anything
else is refused by name, and nothing in the file runs."""

from __future__ import annotations

import argparse
import collections
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from dmlviewer.core.models.backbones import read_weights_file
from dmlviewer.core.models.code_door import load_weights
from dmlviewer.core.models.errors import CheckpointError


def _lightning_checkpoint(state: dict, hyper_parameters) -> dict:
    """The layout ``pytorch_lightning.Trainer.save_checkpoint`` writes."""
    return {
        "epoch": 3, "global_step": 120, "pytorch-lightning_version": "2.4.0",
        "state_dict": collections.OrderedDict((f"model.{k}", v) for k, v in state.items()),
        "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"total": {"ready": 4}}}},
        "callbacks": {"ModelCheckpoint{'monitor': 'val/recall', 'mode': 'max'}": {
            "best_model_score": torch.tensor(0.71), "best_model_path": "/runs/epoch=3.ckpt"}},
        "optimizer_states": [{"state": {}, "param_groups": [{"lr": 1e-3, "params": [0, 1]}]}],
        "lr_schedulers": [],
        "hparams_name": "kwargs",
        "hyper_parameters": hyper_parameters,
    }


def test_lightning_hyper_parameters_of_data_types_are_read(tmp_path):
    net = torchvision.models.resnet18(weights=None, num_classes=16)
    hyper = {"path": Path("/data/cub") / "images", "ns": argparse.Namespace(lr=1e-3, arch="resnet18", dims=[1, 2]),
             "np": np.float64(1.0), "seed": np.int64(7), "dtype": np.dtype("float32"), "mean": np.array([0.5, 0.4]),
             "ordered": collections.OrderedDict(a=1)}
    path = tmp_path / "epoch=3.ckpt"
    torch.save(_lightning_checkpoint(net.state_dict(), hyper), path)
    with pytest.raises(Exception):  # torch's default refuses it: what this reading adds
        torch.load(path, weights_only=True)
    data = read_weights_file(path)
    read = data["hyper_parameters"]
    assert read["path"] == Path("/data/cub/images") and read["ns"].arch == "resnet18" and read["ns"].dims == [1, 2]
    assert read["np"] == 1.0 and isinstance(read["np"], np.float64) and read["seed"] == 7
    assert read["dtype"] == np.float32 and np.array_equal(read["mean"], [0.5, 0.4]) and data["epoch"] == 3
    # and its weights open: Lightning's state_dict, the 'model.' attribute stripped, strict load
    fresh = torchvision.models.resnet18(weights=None, num_classes=16)
    load_weights(fresh, path, "resnet18")
    for key, value in net.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key


class _Canary:
    """Unpickling this would write the canary file (were the loader unsafe)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (_write_canary, (self.target,))


class _StatefulCanary:
    """Rebuilding this object's state would write the canary file."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __setstate__(self, state: dict) -> None:
        Path(state["target"]).write_text("ran")


def _write_canary(target: str) -> str:
    Path(target).write_text("ran")
    return target


@pytest.mark.parametrize("kind, named", [(_Canary, "test_lightning._write_canary"),  # what its pickle calls
                                         (_StatefulCanary, "test_lightning._StatefulCanary")])
def test_a_custom_class_is_refused_by_name_and_nothing_runs(tmp_path, kind, named):
    canary = tmp_path / "canary.txt"
    hyper = {"path": Path("/data"), "callback": kind(str(canary))}
    path = tmp_path / "evil.ckpt"
    torch.save(_lightning_checkpoint({"w": torch.ones(2)}, hyper), path)
    assert not canary.exists()
    with pytest.raises(CheckpointError) as info:
        read_weights_file(path)
    assert not canary.exists()
    message = str(info.value)
    assert named in message and "nothing in it was run" in message and "\n" not in message
    # the payload is real: an unsafe load would have run it (into another file)
    other = tmp_path / "unsafe.txt"
    torch.save(_lightning_checkpoint({"w": torch.ones(2)}, {"c": kind(str(other))}), tmp_path / "unsafe.ckpt")
    torch.load(tmp_path / "unsafe.ckpt", weights_only=False)
    assert other.exists() and not canary.exists()


def test_a_refused_function_is_named_even_beside_allowed_types(tmp_path):
    canary = tmp_path / "canary.txt"

    class _System:
        def __reduce__(self):
            return (os.system, (f"touch {canary}",))

    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1)}, "hyper_parameters": {"p": Path("x"), "e": _System()}}, path)
    with pytest.raises(CheckpointError, match=r"(posix|nt|os)\.system"):
        read_weights_file(path)
    assert not canary.exists()


def test_omegaconf_hyper_parameters_are_read(tmp_path):
    omegaconf = pytest.importorskip("omegaconf")
    config = omegaconf.OmegaConf.create({"lr": 0.1, "name": "gem", "layers": [1, 2, 3], "model": {"p": 3.0, "x": None}})
    path = tmp_path / "omega.ckpt"
    torch.save(_lightning_checkpoint({"w": torch.ones(2)}, config), path)
    read = read_weights_file(path)["hyper_parameters"]
    assert isinstance(read, omegaconf.DictConfig) and read.model.p == 3.0 and list(read.layers) == [1, 2, 3]
