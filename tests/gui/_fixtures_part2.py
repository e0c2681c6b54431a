"""Job generators for the worker tests (top-level, so a "spawn" child can import them)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Iterator

from dmlviewer.core.progress import Cancelled, CancelToken, Progress


def counting_job(n: int, cancel: CancelToken, delay_s: float = 0.0,
                 marker: str | None = None) -> Iterator[Progress]:
    """Yields n step events carrying ``value = i * i``; on cancel writes ``marker`` (the
    stand-in for a checkpoint) and raises Cancelled."""
    for i in range(n):
        if cancel.cancelled:
            if marker:
                Path(marker).write_text(f"stopped after {i}")
                yield Progress("checkpoint", message=f"saved {marker}", data={"path": marker})
            raise Cancelled()
        if delay_s:
            time.sleep(delay_s)
        yield Progress("step", i + 1, n, data={"value": i * i})
    yield Progress("done", n, n, data={"result": {"sum": sum(i * i for i in range(n))}})


def deaf_job(cancel: CancelToken, produced: list, delay_s: float = 0.02) -> Iterator[Progress]:
    """Never looks at its cancel token (appends each step to ``produced``): the worker must
    stop it within one step."""
    i = 0
    while True:
        i += 1
        time.sleep(delay_s)
        produced.append(i)
        yield Progress("step", i, 0)


def failing_job(cancel: CancelToken, after: int = 2) -> Iterator[Progress]:
    for i in range(after):
        yield Progress("step", i + 1, after + 1)
    raise ValueError("the job broke on purpose")


def segfault_job(cancel: CancelToken) -> Iterator[Progress]:
    yield Progress("log", message="about to crash")
    os.kill(os.getpid(), signal.SIGSEGV)
    yield Progress("step", 2, 2)


def exit_job(cancel: CancelToken, code: int = 3) -> Iterator[Progress]:
    yield Progress("step", 1, 2)
    os._exit(code)


def logging_job(cancel: CancelToken) -> Iterator[Progress]:
    import logging

    logging.getLogger("dmlviewer.test").warning("hello from pid %d", os.getpid())
    yield Progress("done", data={"result": os.getpid()})


def make_small_demo(folder: Path, classes: int = 6, per_class: int = 6, size: int = 64) -> Path:
    """The synthetic parts dataset, small enough to train on in seconds (CUB layout)."""
    from dmlviewer.core.data import make_demo_data

    make_demo_data(folder, classes=classes, per_class=per_class, size=size, seed=0)
    return folder


def priority_job(cancel: CancelToken) -> Iterator[Progress]:
    """Reports the nice value of the thread it runs in, its process id and torch's threads."""
    import threading

    import torch

    result = {"nice": os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), "pid": os.getpid(),
              "threads": torch.get_num_threads()}
    yield Progress("done", 1, 1, data={"result": result})
