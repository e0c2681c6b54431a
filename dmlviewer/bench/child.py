"""Running a benchmark step in a fresh interpreter, and the peak resident memory it reports.

Peak RSS is ``VmHWM`` of ``/proc/self/status`` where it exists (Linux): a child's
``ru_maxrss`` also carries the high-water mark of the process image it was exec'd from, so it
would never read below its parent's size. Elsewhere ``ru_maxrss`` is used (kilobytes on Linux,
bytes on macOS).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

_MB = 1024 * 1024


def _proc_status_mb(*fields: str) -> dict[str, float]:
    """The ``fields`` of ``/proc/self/status`` that exist, in MiB (none without /proc)."""
    found = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name in fields:
                    found[name] = int(value.split()[0]) * 1024 / _MB
    except OSError:
        pass
    return found


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB (see the module docstring for the source)."""
    peak = _proc_status_mb("VmHWM").get("VmHWM")
    return _maxrss_mb() if peak is None else peak


def rss_parts_mb() -> dict[str, float]:
    """Current resident memory split into ``anon`` (heap, arrays) and ``file`` (mapped shared
    libraries, shared between processes) in MiB; empty without /proc."""
    return {name[3:].lower(): mb for name, mb in _proc_status_mb("RssAnon", "RssFile").items()}


def _maxrss_mb(children: bool = False) -> float:
    """``ru_maxrss`` of this process (or of its largest reaped child) in MiB."""
    try:
        import resource
    except ImportError as exc:  # Windows
        raise RuntimeError("bench memory needs /proc or the resource module (Linux, macOS)") from exc
    value = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF).ru_maxrss
    return value / _MB if sys.platform == "darwin" else value * 1024 / _MB


def run_child(module: str, entry: str, spec: dict, env: dict[str, str] | None = None,
              timeout_s: float = 600) -> dict:
    """Run ``entry(spec)`` of ``module`` in a fresh interpreter; its last stdout line is JSON."""
    code = f"import json, sys; from {module} import {entry}; {entry}(json.loads(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout_s)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"benchmark child {module}.{entry} failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-4000:]}")
    return json.loads(lines[-1])
