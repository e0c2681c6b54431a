"""DistributedDataParallel on two CPU processes (gloo): the ranks stay in sync."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, config_dict: dict, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    from dmlviewer.core.train import TrainConfig, Trainer

    trainer = Trainer(TrainConfig.from_dict(config_dict))
    events = list(trainer.run())
    losses = [e.data["loss"] for e in events if e.kind == "step"]
    torch.save({"state": trainer.model.state_dict(), "losses": losses, "kinds": [e.kind for e in events],
                "world_size": trainer.dist.world_size, "steps": trainer.global_step},
               os.path.join(out_dir, f"rank{rank}.pt"))


def test_two_gloo_ranks_keep_identical_weights(tiny_config, tmp_path):
    run = tmp_path / "run"
    config = tiny_config(run, epochs=1, steps_per_epoch=3, deterministic=False, adversarial="adaptive",
                         grouping="c", groups=2, deml_adversary=0.5)
    mp.spawn(_worker, args=(config.to_dict(), _free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert all(r["world_size"] == 2 and r["steps"] == 3 for r in ranks)
    assert ranks[0]["losses"] != ranks[1]["losses"]  # each rank trained on its own batches
    saved = torch.load(run / "checkpoint.pt", weights_only=True)["state_dict"]
    for key, value in ranks[0]["state"].items():
        assert torch.equal(value, ranks[1]["state"][key]), key  # gradients averaged, buffers synced
        assert torch.equal(value, saved[key]), key  # rank 0's checkpoint holds these very weights
    from dmlviewer.core.models import build_model
    from dmlviewer.core.train.state import seed_everything

    seed_everything(config.seed)  # the initial weights, as the ranks built them
    initial = build_model(config.model_config()).state_dict()
    moved = [k for k, v in initial.items() if v.is_floating_point() and not torch.equal(v, saved[k])]
    assert len(moved) > len(initial) // 2  # training did change the weights
    assert "eval" in ranks[0]["kinds"] and "eval" not in ranks[1]["kinds"]  # only rank 0 evaluates
