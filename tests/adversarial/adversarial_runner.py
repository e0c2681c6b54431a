"""The adversarial runner: every entry point against hostile input, counted per category.

Run it directly for the summary (``python tests/adversarial/adversarial_runner.py [--only
SUBSTRING] [--json OUT]``) or through pytest (``tests/adversarial/test_adversarial.py``).

It builds the fixtures (``adversarial_fixtures``), starts one in-process worker
(``adversarial_worker``: torch is imported once; each case runs through the real command line
``main`` or the real widgets, with its output captured at the file-descriptor level), feeds it
the cases (``adversarial_cases``); the cases that need real processes (SIGKILL during writes,
two trainings on one folder) start them from the worker. Where the machine allows unprivileged user and
mount namespaces (``unshare -Urm``), the worker runs in one with a 2 MB file system (full-disk
cases) and a read-only one; elsewhere those cases are skipped and the simulated write errors
(a file-size limit) still run.

Each case is classified:

- ``clean``: the expected exit status or outcome, exactly one ``error:`` line that says the
  expected thing (for refusals), no traceback, no warning, nothing leaked, no file changed
  that must not change, no temporary file left;
- ``traceback``: a Python traceback reached the user (or an undocumented exception the API);
- ``crash``: the worker process died (a signal, the memory limit);
- ``hang``: the case did not end within its limit: its timeout (the time it may take on an idle
  machine) x :data:`HANG_MARGIN` x the machine's slowness measured in this run (:class:`Pace`), so
  that a busy machine is not a hang (issue 42 item 12);
- ``payload``: code from a pickle payload ran (a marker file appeared);
- ``corrupt``: a file that had to stay intact changed, a temporary file was left, a file
  written was unreadable after SIGKILL;
- ``leak``: the canary content of a local file appeared in an output, a message or a file;
- ``other``: anything else not clean (wrong exit status, more than one error line, noise on
  stderr, a message that does not say what it should).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import adversarial_cases  # noqa: E402
import adversarial_fixtures  # noqa: E402

COLUMNS = ("tried", "clean", "tracebacks", "crashes", "hangs", "payloads", "corrupt", "leaks", "other")
NOISE = re.compile(r"(\w+Warning: |warnings\.warn\(|propagateSizeHints|Exception ignored in|^QWidget|^QPainter|"
                   r"HDF5-DIAG|Traceback \(most recent call last\))", re.MULTILINE)


def namespaces_available() -> bool:
    try:
        return subprocess.run(["unshare", "-Urm", "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


#: The hang limit is this many times a case's timeout on the measured pace: generous, since a
#: hang never ends and a slow case does, and the limit only keeps a hang from stopping the run.
HANG_MARGIN = 2.0
#: Cases between two timings of the no-op (the load of a shared machine changes during a run).
PACE_EVERY = 10


class Pace:
    """How much slower than an idle core the worker runs now: the wall / CPU time of the no-op
    case (``adversarial_worker.time_noop``) timed in this run, at the start and every
    :data:`PACE_EVERY` cases; at least 1. A case's limit is its timeout x :data:`HANG_MARGIN`
    x this slowness, so the verdict does not depend on the machine's speed."""

    def __init__(self) -> None:
        self.slowness = 1.0
        self.timings: list[dict] = []

    def measure(self, worker: "Worker") -> float:
        timing = worker.noop()
        if timing is not None:
            self.timings.append(timing)
            self.slowness = max(1.0, timing["wall"] / max(timing["cpu"], 1e-3))
        return self.slowness

    def limit(self, case) -> float:
        """Seconds ``case`` may run before it counts as a hang."""
        return case.timeout * HANG_MARGIN * self.slowness


class Worker:
    """One worker process; restarted after a crash or a hang."""

    def __init__(self, fixtures_json: Path, scratch: Path, mounts: dict | None, env: dict) -> None:
        self.fixtures_json, self.scratch, self.mounts, self.env = fixtures_json, scratch, mounts, env
        self.proc: subprocess.Popen | None = None
        self._buffer = b""

    def start(self) -> None:
        cmd = [sys.executable, str(HERE / "adversarial_worker.py"), str(self.fixtures_json), str(self.scratch)]
        if self.mounts:
            script = (f"mount -t tmpfs -o size=2m tmpfs '{self.mounts['full']}' && "
                      f"mount -t tmpfs -o size=1m,ro tmpfs '{self.mounts['ro']}' && exec \"$@\"")
            cmd = ["unshare", "-Urm", "sh", "-c", script, "sh", *cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     cwd=HERE, env=self.env, start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._buffer = b""
        ready = self._read_line(300)
        if not ready or not json.loads(ready).get("ready"):
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
            raise RuntimeError(f"the adversarial worker did not start: {err[-3000:]}")

    def _read_line(self, timeout: float) -> str | None:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if not sel.select(min(left, 1.0)):
                    if self.proc.poll() is not None:
                        return None
                    continue
                chunk = self.proc.stdout.read()
                if not chunk:
                    if self.proc.poll() is not None:
                        return None
                    continue
                self._buffer += chunk
        finally:
            sel.close()
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def noop(self) -> dict | None:
        """Time the no-op case in the worker (``{"wall", "cpu"}`` seconds); None if it died."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write(b'{"noop": true}\n')
        self.proc.stdin.flush()
        line = self._read_line(600)
        return json.loads(line)["noop"] if line is not None else None

    def run(self, case, n: int, limit: float | None = None) -> dict:
        """Run ``case`` (SIGALRM after ``limit`` seconds, default its timeout)."""
        limit = case.timeout if limit is None else limit
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write((json.dumps({"id": case.id, "n": n, "limit": limit}) + "\n").encode())
        self.proc.stdin.flush()
        line = self._read_line(limit + 30 * limit / case.timeout)
        if line is not None:
            return {**json.loads(line), "limit": round(limit, 1)}
        if self.proc.poll() is None:  # a hang even SIGALRM did not end
            self.kill()
            return {"id": case.id, "hang": True, "limit": round(limit, 1)}
        code = self.proc.returncode
        stderr = self.proc.stderr.read().decode(errors="replace")[-20000:]
        self.proc = None
        return {"id": case.id, "crash": True, "returncode": code, "stderr": stderr}

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None


def classify(case, r: dict) -> tuple[str, str]:
    """``(column, detail)`` for one case's result (see the module docstring)."""
    if r.get("crash"):
        stack = r.get("stderr", "")
        return "crashes", f"worker died (exit {r.get('returncode')}): {stack[stack.find('Fatal Python'):][:3000]}"
    if r.get("hang") or r.get("timed_out"):
        limit = r.get("limit", case.timeout)
        return "hangs", (f"no end within {limit} s (its timeout {case.timeout:g} s x {HANG_MARGIN:g} x the "
                         f"machine's slowness {limit / case.timeout / HANG_MARGIN:.1f})")
    if r.get("payload"):
        return "payloads", "a pickle payload ran"
    report = r.get("value") if case.process and isinstance(r.get("value"), dict) else {}
    text = (r.get("stderr") or "") + (report.get("resume_stderr") or "")
    if r.get("escaped") or "Traceback (most recent call last)" in text:
        return "tracebacks", (r.get("escaped") or text)[-1500:]
    if r.get("leak"):
        return "leaks", "the secret's content appeared in an output"
    if r.get("changed") or r.get("temps") or report.get("corrupt"):
        return "corrupt", f"changed {r.get('changed')}, temporary files {r.get('temps')}, {report.get('corrupt')}"
    if r.get("skipped"):
        return "skipped", r["skipped"]
    if case.process:
        return ("clean", "; ".join(report.get("notes", []))) if report.get("ok") else ("other", json.dumps(r)[-1500:])
    if r.get("rc") != case.expect:
        return "other", f"expected {case.expect!r}, got {r.get('rc')!r}: {r.get('value') or ''} {text[-800:]}"
    noise = NOISE.findall(text)
    if noise:
        return "other", f"noise on stderr: {noise[:3]}: {text[-800:]}"
    if case.func == "gui_open":
        value = r.get("value") or {}
        if value.get("escaped"):
            return "tracebacks", value["escaped"][0][-1500:]
        if not value.get("idle"):
            return "hangs", "the window did not become idle"
        dialogs = value.get("dialogs", [])
        bad = [d for d in dialogs if "\n" in d[1].strip() or "Traceback" in d[1]]
        if bad:  # the traceback may sit behind "Show Details", never in the message
            return "other", f"a dialog whose message has a traceback or several lines: {bad[:1]}"
        if case.has and not any(case.has in d[1] for d in dialogs):
            return "other", f"no dialog says {case.has!r}: {dialogs}"
        return "clean", f"{len(dialogs)} dialog(s), {len(value.get('problems', []))} problem(s) listed"
    if case.func:
        if isinstance(r.get("value"), str) and r["value"].startswith("skipped:"):
            return "skipped", r["value"]
        if r["rc"] == "raise" and ("Traceback" in str(r.get("value")) or "\n" in str(r.get("value"))):
            return "other", f"a multi-line error: {r['value'][:500]}"
        return "clean", str(r.get("value"))[:200]
    errors = [line for line in text.splitlines() if "error:" in line]
    if case.expect != 0:
        if len(errors) != 1:
            return "other", f"{len(errors)} error lines: {text[-800:]}"
        if case.has and case.has not in errors[0]:
            return "other", f"the error line does not say {case.has!r}: {errors[0][:500]}"
    else:
        if errors:
            return "other", f"error lines in a successful run: {errors[:2]}"
        if case.has and case.has not in text:
            return "other", f"stderr does not say {case.has!r}: {text[-800:]}"
    if case.json_stdout:
        try:
            json.loads(r.get("stdout") or "", parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError as exc:
            return "other", f"stdout is not strict JSON: {exc}"
    return "clean", (errors[0] if errors else "ok")[:300]


def run(only: str | None = None, log=print) -> dict:
    """Run the cases (all, or those whose id contains ``only``); returns ``{"cases": {id:
    {...}}, "summary": {category: {column: count}}, "mounts": bool}``."""
    cases = [c for c in adversarial_cases.build_cases() if not only or only in c.id]
    scratch = Path(tempfile.mkdtemp(prefix="dmlviewer-adversarial-"))
    started = time.monotonic()
    try:
        log(f"building fixtures in {scratch}")
        fixtures = adversarial_fixtures.build(scratch / "fx")
        mounts = None
        if namespaces_available():
            mounts = {"full": str(scratch / "full"), "ro": str(scratch / "ro")}
            for path in mounts.values():
                Path(path).mkdir()
            fixtures.update(mounts)
        fixtures_json = scratch / "fixtures.json"
        fixtures_json.write_text(json.dumps(fixtures))
        home = scratch / "home"
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
               "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache"),
               "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
        for name in ("DMLVIEWER_MAX_IMAGE_PIXELS", "DMLVIEWER_FOLLOW_EXTERNAL_LINKS"):
            env.pop(name, None)
        worker = Worker(fixtures_json, scratch, mounts, env)
        pace = Pace()
        results: dict = {}
        try:
            for n, case in enumerate(cases):
                if case.needs == "mounts" and not mounts:
                    results[case.id] = {"skipped": "no unprivileged mount namespace here (unshare -Urm)"}
                else:
                    if n % PACE_EVERY == 0 or worker.proc is None:
                        log(f"pace: the worker runs {pace.measure(worker):.1f}x slower than an idle core")
                    results[case.id] = worker.run(case, n, pace.limit(case))
                column, detail = classify(case, results[case.id])
                results[case.id].update(column=column, detail=detail)
                log(f"{column:10s} {case.id} ({results[case.id].get('seconds', '-')} s): {detail[:160]}")
        finally:
            worker.stop()
        summary: dict = {}
        for case in cases:
            column = results[case.id]["column"]
            row = summary.setdefault(case.category, {c: 0 for c in COLUMNS} | {"skipped": 0})
            if column == "skipped":
                row["skipped"] += 1
                continue
            row["tried"] += 1
            row[column] += 1
        return {"cases": results, "summary": summary, "mounts": bool(mounts),
                "seconds": round(time.monotonic() - started, 1), "pace": pace.timings}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def format_summary(report: dict) -> str:
    """The per-category table (and the total) as text."""
    rows = dict(report["summary"])
    total = {c: sum(r[c] for r in rows.values()) for c in (*COLUMNS, "skipped")}
    rows["total"] = total
    width = max(len(k) for k in rows)
    lines = [f"{'category':{width}s} " + " ".join(f"{c:>10s}" for c in (*COLUMNS, "skipped"))]
    for name, row in rows.items():
        lines.append(f"{name:{width}s} " + " ".join(f"{row[c]:10d}" for c in (*COLUMNS, "skipped")))
    mode = ("full and read-only disks: real small file systems (unshare -Urm)" if report["mounts"]
            else "full and read-only disks: skipped (no mount namespace); write errors simulated with RLIMIT_FSIZE")
    slowness = [t["wall"] / max(t["cpu"], 1e-3) for t in report.get("pace", [])]
    pace = (f"hang limits: timeout x {HANG_MARGIN:g} x the slowness measured by the no-op case "
            f"({min(slowness):.1f}x to {max(slowness):.1f}x an idle core)" if slowness else "")
    return "\n".join(lines + [mode, *([pace] if pace else []), f"{report['seconds']} s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the cases whose id contains this text")
    parser.add_argument("--json", help="write the full report here")
    args = parser.parse_args()
    report = run(args.only)
    print(format_summary(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    bad = sum(row[c] for row in report["summary"].values() for c in COLUMNS[2:])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
