"""In-process worker of the adversarial runner: runs cases one by one, imports torch once.

Started by ``adversarial_runner`` as ``python adversarial_worker.py FIXTURES.json SCRATCH``
(inside a user and mount namespace with a small and a read-only file system when the machine
allows it). Reads one JSON request per line on stdin (``{"id": ..., "n": ..., "limit": ...}``,
or ``{"noop": true}``: :func:`time_noop`), answers one
JSON line per case on its original stdout. Each case's stdout and stderr are captured at the
file-descriptor level (C libraries included); a case is stopped after its limit (its timeout
scaled by the runner, see ``adversarial_runner.Pace``) by ``SIGALRM`` (the runner kills the whole worker when even that does not return: a hang), and
the worker's address space is limited so that an allocation bomb fails fast instead of
taking the machine (the runner records a crash when the worker dies).
"""

from __future__ import annotations

import faulthandler
import hashlib
import json
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import adversarial_cases as cases_module  # noqa: E402
from adversarial_fixtures import CANARY  # noqa: E402

#: address-space limit of the worker (torch maps a few GiB of virtual memory at import)
ADDRESS_SPACE = 12 << 30


class CaseTimeout(BaseException):
    """Raised by SIGALRM in the case that ran out of time."""


def _on_alarm(signum, frame):
    raise CaseTimeout()


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _temps(folder: str) -> list[str]:
    p = Path(folder)
    if not p.is_dir():
        return []
    return sorted(e.name for e in p.iterdir() if e.name.startswith(".") and ".tmp" in e.name)


def _fmt(value, fx: dict):
    if isinstance(value, str):
        return value.format(**fx)
    if isinstance(value, list):
        return [_fmt(v, fx) for v in value]
    if isinstance(value, dict):
        return {k: _fmt(v, fx) for k, v in value.items()}
    return value


def run_case(case, fx: dict, limit: float | None = None) -> dict:
    """Run ``case``, stopped by SIGALRM after ``limit`` seconds (default: its timeout; the
    runner passes it scaled by the machine's measured slowness)."""
    from dmlviewer.cli import main
    from dmlviewer.core.data import DatasetError, ImageError
    from dmlviewer.core.evaluate import StoreError
    from dmlviewer.core.models import CheckpointError

    documented = (DatasetError, ImageError, StoreError, CheckpointError, FileNotFoundError)
    tmp = Path(fx["tmp"])
    tmp.mkdir(parents=True, exist_ok=True)
    result: dict = {"id": case.id, "rc": None, "timed_out": False, "escaped": None, "value": None}
    saved_env = {k: os.environ.get(k) for k in case.env}
    os.environ.update(case.env)
    cwd = os.getcwd()
    os.chdir(tmp)
    out_path, err_path = tmp.parent / f"{tmp.name}.stdout", tmp.parent / f"{tmp.name}.stderr"
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    intact = {p: _digest(p) for p in _fmt(list(case.intact), fx)}
    start = time.monotonic()
    try:
        if case.setup:
            getattr(cases_module, f"setup_{case.setup}")(fx, tmp)
            intact = {p: _digest(p) for p in _fmt(list(case.intact), fx)}
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, case.timeout if limit is None else limit)
        try:
            if case.argv is not None:
                try:
                    result["rc"] = main(_fmt(case.argv, fx))
                except SystemExit as exc:
                    result["rc"] = exc.code if isinstance(exc.code, int) else 2
            else:
                func = getattr(cases_module, case.func or case.process)
                try:
                    result["value"] = func(fx, tmp, **_fmt(case.args, fx))
                    result["rc"] = "ok"
                except documented as exc:
                    result["rc"] = "raise"
                    result["value"] = f"{type(exc).__name__}: {exc}"
                except ValueError as exc:  # documented too: a bad argument
                    result["rc"] = "raise"
                    result["value"] = f"{type(exc).__name__}: {exc}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except CaseTimeout:
        result["timed_out"] = True
    except BaseException as exc:  # noqa: BLE001 - an escaped exception is what this looks for
        result["escaped"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in (*saved_fds, out_fd, err_fd):
            os.close(fd)
        os.chdir(cwd)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    result["seconds"] = round(time.monotonic() - start, 2)
    result["stdout"] = out_path.read_text(errors="replace")[-20000:]
    result["stderr"] = err_path.read_text(errors="replace")[-20000:]
    result["changed"] = [p for p, d in intact.items() if _digest(p) != d]
    result["temps"] = {d: _temps(d) for d in _fmt(list(case.clean_dirs), fx) if _temps(d)}
    result["payload"] = Path(fx["marker"]).exists()
    outputs = [result["stdout"], result["stderr"], json.dumps(result["value"], default=str)]
    for folder in (tmp, Path(fx.get("full", tmp)), Path(fx["outputs"])):
        for path in folder.rglob("*") if folder.is_dir() else ():
            try:
                if path.is_file() and not path.is_symlink() and path.stat().st_size < 5_000_000:
                    outputs.append(path.read_bytes().decode("latin-1"))
            except OSError:
                pass
    result["leak"] = any(CANARY in text for text in outputs)
    return result


#: how many times the no-op builds the command line's parser and formats its help (about 0.1 s
#: of CPU time on a 2020s core)
NOOP_ROUNDS = 20


def time_noop() -> dict:
    """The no-op case (issue 42 item 12): a fixed amount of pure-Python work (the command
    line's parser built and its help formatted), timed in wall and CPU seconds of this process.
    Wall / CPU is how much slower than an idle core this worker runs now; the runner scales the
    cases' hang limits by it."""
    from dmlviewer.cli import build_parser

    wall, cpu = time.monotonic(), time.process_time()
    for _ in range(NOOP_ROUNDS):
        build_parser().format_help()
    return {"noop": {"wall": time.monotonic() - wall, "cpu": time.process_time() - cpu}}


def main() -> int:
    fixtures = json.loads(Path(sys.argv[1]).read_text())
    scratch = Path(sys.argv[2])
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    faulthandler.enable(os.fdopen(os.dup(2), "w"))  # a crash's stack reaches the runner, not a case's file
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints never reach the protocol
    try:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
    import dmlviewer.cli  # noqa: F401 - import torch and friends once, before the first case
    import dmlviewer.core.models  # noqa: F401
    import dmlviewer.core.evaluate  # noqa: F401

    by_id = {c.id: c for c in cases_module.build_cases()}
    proto.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("noop"):
            proto.write(json.dumps(time_noop()) + "\n")
            continue
        case = by_id[request["id"]]
        fx = {**fixtures, "tmp": str(scratch / "cases" / str(request["n"]))}
        proto.write(json.dumps(run_case(case, fx, request.get("limit", case.timeout)), default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
