"""torch.distributed set-up when started under ``torchrun`` (RANK, WORLD_SIZE, LOCAL_RANK).

One process per GPU (NCCL) or per CPU worker (gloo). Every rank trains on its own m-per-class
batches; DistributedDataParallel averages gradients; only rank 0 writes files.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # this module started the process group and ends it

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def mean(self, value: float) -> float:
        """The mean of a float over ranks (the value itself without distribution)."""
        if not self.enabled:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t)
        return float(t.item()) / self.world_size

    def broadcast_buffers(self, module: torch.nn.Module) -> None:
        """Copy rank 0's buffers (BatchNorm running statistics, ...) to every rank. DDP does so
        at the start of each forward pass; doing it at epoch end makes the ranks agree at
        evaluations and checkpoints too."""
        if self.enabled:
            for buffer in module.buffers():
                dist.broadcast(buffer, src=0)

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def from_environment(device_type: str) -> DistContext:
    """Join the process group described by torchrun's environment variables, if any."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext()
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    owns = False
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, init_method="env://")
        owns = True
        log.info("joined process group: rank %d of %d (%s)", rank, world_size, backend)
    return DistContext(dist.get_rank(), dist.get_world_size(), local_rank, owns)
