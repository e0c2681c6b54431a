"""Checkpoints: round trip for every head, safe loading, mismatches, atomic writes."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from dmlviewer.core.models import CheckpointError, load_checkpoint, save_checkpoint
from dmlviewer.core.models.backbones import CHECKPOINT_FORMAT

HEADS = [
    dict(pooling="gap"), dict(pooling="gmp", bn=True), dict(pooling="gem", hidden=16),
    dict(pooling="flatten", bn=True, hidden=16), dict(grouping="m"), dict(grouping="g", pooling="gmp"),
    dict(grouping="c", bn=True), dict(grouping="a", hidden=16), dict(multilayer=["stage2", "stage3"]),
]


@pytest.mark.parametrize("overrides", HEADS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_round_trip_reproduces_outputs(make_model, images, tmp_path, overrides):
    model = make_model(**overrides)
    with torch.no_grad():
        for p in model.parameters():  # move every parameter off its initial value
            p.add_(torch.randn_like(p) * 0.01)
        before = model(images)
    path = save_checkpoint(tmp_path / "run" / "checkpoint.pt", model, epoch=3, metrics={"recall@1": 0.5})
    loaded, info = load_checkpoint(path, "cpu")
    assert not loaded.training
    assert info["epoch"] == 3 and info["metrics"] == {"recall@1": 0.5} and info["config"] == model.config
    assert len(info["sha256"]) == 64 and "state_dict" not in info
    with torch.no_grad():
        after = loaded(images)
    assert torch.equal(before.embedding_raw, after.embedding_raw)
    assert before.attention.keys() == after.attention.keys()
    for name in before.attention:
        assert torch.equal(before.attention[name], after.attention[name])


def test_pretrained_key_is_not_reloaded(make_model, tmp_path):
    """A checkpoint's config may name weights absent on this machine: the state dict suffices."""
    model = make_model()
    model.config["pretrained"] = str(tmp_path / "gone.pth")
    path = save_checkpoint(tmp_path / "c.pt", model)
    loaded, info = load_checkpoint(path)
    assert info["config"]["pretrained"] == str(tmp_path / "gone.pth")


def test_extra_state_for_resuming(make_model, images, tmp_path):
    model = make_model().train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(images).embedding.sum().backward()
    optimizer.step()
    path = save_checkpoint(tmp_path / "c.pt", model, epoch=1,
                           extra={"optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(), "step": 7})
    _, info = load_checkpoint(path)
    fresh = torch.optim.Adam(model.parameters(), lr=1e-3)
    fresh.load_state_dict(info["extra"]["optimizer"])
    state = fresh.state_dict()["state"]
    assert torch.equal(state[0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert info["extra"]["step"] == 7


def test_save_refuses_objects_it_could_not_read_back(make_model, tmp_path):
    with pytest.raises(TypeError, match="extra"):
        save_checkpoint(tmp_path / "c.pt", make_model(), extra={"callback": print})
    assert not list(tmp_path.iterdir())


class _Exploit:
    """Unpickling this would create a file (were the loader unsafe)."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_malicious_pickle_is_refused_without_running(tmp_path):
    target = tmp_path / "pwned.txt"
    path = tmp_path / "evil.pt"
    payload = {"format": CHECKPOINT_FORMAT, "version": 1, "config": {}, "state_dict": {},
               "epoch": 0, "metrics": {}, "hook": _Exploit(str(target))}
    torch.save(payload, path)  # torch.save pickles it; only loading could run it
    assert not target.exists()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert not target.exists()
    message = str(info.value)
    assert "refusing to load" in message and str(path) in message and "weights_only" in message
    assert "\n" not in message
    with open(path, "wb") as f:  # a plain pickle file (not a torch zip) is refused too
        pickle.dump(_Exploit(str(target)), f, protocol=2)
    with pytest.raises(CheckpointError, match="refusing to load"):
        load_checkpoint(path)
    assert not target.exists()


def test_bare_state_dict_and_other_files_are_refused(make_model, tmp_path):
    path = tmp_path / "bare.pt"
    torch.save(make_model().backbone.net.state_dict(), path)
    with pytest.raises(CheckpointError, match="bare state dict.*pretrained"):
        load_checkpoint(path)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="refusing"):
        load_checkpoint(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_checkpoint(tmp_path / "missing.pt")


def test_architecture_mismatch_lists_keys(make_model, tmp_path):
    model = make_model(grouping="a")
    path = save_checkpoint(tmp_path / "c.pt", model)
    data = torch.load(path, weights_only=True)
    data["state_dict"].pop("head.queries")
    data["state_dict"]["head.extra_weight"] = torch.zeros(3)
    torch.save(data, path)
    with pytest.raises(CheckpointError, match=r"missing keys \[head.queries\].*unexpected keys \[head.extra_weight\]"):
        load_checkpoint(path)
    data["state_dict"]["head.queries"] = torch.zeros(5, 5)  # right name, wrong shape
    data["state_dict"].pop("head.extra_weight")
    torch.save(data, path)
    with pytest.raises(CheckpointError, match="size mismatch"):
        load_checkpoint(path)


def test_save_is_atomic(make_model, tmp_path, monkeypatch):
    model = make_model()
    path = save_checkpoint(tmp_path / "c.pt", model, epoch=1)
    original = path.read_bytes()

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, epoch=2)
    assert path.read_bytes() == original  # the old checkpoint is intact
    assert sorted(os.listdir(tmp_path)) == ["c.pt"]  # no temporary left behind
