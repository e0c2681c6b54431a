"""Background work yields to the hand on the mouse (issue 40).

Training, extraction and report jobs run at a lower CPU priority than the GUI and leave it a
core: on a 2-core laptop that trains while the user hovers, the scheduler then hands the core
to the GUI thread whenever it has a mouse event to draw, and torch's thread pool does not fill
both cores. The GUI calls :func:`yield_to_foreground` at the start of every background job: in
a job's child process (the whole process), and in a job thread of the GUI process (that thread
only: on Linux a nice value is a thread's, set through its thread id).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

#: How much lower than the GUI a background job runs (``nice`` increment, 0..19).
BACKGROUND_NICE = 10


def background_threads(cpus: int | None = None) -> int:
    """Threads for background torch work: every core but one (at least one)."""
    if cpus is None:
        cpus = os.cpu_count() or 1
    return max(1, int(cpus) - 1)


def yield_to_foreground(whole_process: bool = False) -> int:
    """Lower the CPU priority of the calling thread (``whole_process``: of this process, for a
    job's child) by :data:`BACKGROUND_NICE`, and cap torch's intra-op threads at
    :func:`background_threads` (torch's pool is per process: the cap holds for the GUI
    process's other torch work too, which is all background work; where torch is not imported
    yet, through ``OMP_NUM_THREADS``, read when it is). Returns the new nice
    value of the thread (or process); where priorities cannot be lowered (not POSIX, or
    already at the bottom), logs why and carries on."""
    try:
        if whole_process or not hasattr(threading, "get_native_id") or os.name != "posix":
            value = os.nice(BACKGROUND_NICE)
        else:  # Linux: PRIO_PROCESS with a thread id sets that thread's nice value alone
            tid = threading.get_native_id()
            value = min(19, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE)
            os.setpriority(os.PRIO_PROCESS, tid, value)
    except (OSError, AttributeError) as exc:
        log.info("background work keeps its CPU priority: %s", exc)
        value = 0
    torch = sys.modules.get("torch")
    if torch is not None:
        if torch.get_num_threads() > background_threads():
            torch.set_num_threads(background_threads())
    else:  # not imported yet (a child): its pool is sized from this when the job imports it
        os.environ["OMP_NUM_THREADS"] = str(background_threads())
    return value
