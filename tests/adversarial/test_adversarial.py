"""Every entry point against hostile input: one test per case, all run in one batch.

The cases, the fixtures and the classification are in ``adversarial_cases``,
``adversarial_fixtures`` and ``adversarial_runner`` (run the runner directly for the summary
table). The batch runs once per session (a few minutes); each case's test then asserts that
its case was clean: the expected exit status and one clear line, no traceback, crash, hang,
payload run, corrupt or leftover file, or leaked file content.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import adversarial_cases  # noqa: E402
import adversarial_runner  # noqa: E402

# No fixed budget for the batch (it was 1500 s): every case is bounded by its hang limit, scaled
# by the machine's slowness measured in the run (adversarial_runner.Pace), so the batch ends; a
# fixed budget would make the verdict depend on the machine's speed (issue 42 item 12).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(0),
              pytest.mark.skipif(os.name != "posix", reason="FIFOs, devices, rlimits and namespaces are POSIX")]

CASES = adversarial_cases.build_cases()


@pytest.fixture(scope="module")
def report():
    lines: list[str] = []
    result = adversarial_runner.run(log=lines.append)
    result["log"] = lines
    return result


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_is_clean(report, case):
    result = report["cases"][case.id]
    if result["column"] == "skipped":
        pytest.skip(result["detail"])
    assert result["column"] == "clean", f"{case.id}: {result['column']}: {result['detail']}"


def test_summary_has_nothing_but_clean_cases(report, capsys):
    text = adversarial_runner.format_summary(report)
    with capsys.disabled():
        sys.stdout.write("\n" + text + "\n")
    for category, row in report["summary"].items():
        assert row["tried"] == row["clean"], f"{category}: {row}"
    tried = sum(row["tried"] for row in report["summary"].values())
    assert tried >= len(CASES) - 10  # only the mount cases and the API hooks may be skipped


def test_every_subcommand_is_attacked():
    """A new sub-command must get adversarial cases too."""
    from dmlviewer.cli import COMMANDS

    attacked = {c.argv[0] for c in CASES if c.argv}
    missing = set(COMMANDS) - attacked - {"demo"}  # demo takes no input but --screenshot
    assert not missing, f"no adversarial case for: {sorted(missing)}"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def _wait_until_spinning(procs, cpu_s: float = 0.3, timeout_s: float = 60.0) -> None:
    """Wait until each process has used ``cpu_s`` of CPU time (``/proc/PID/stat``'s utime +
    stime): a busy loop counts as load once it runs, not once it is started."""
    import time

    tick = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        while time.monotonic() < deadline:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            if (int(fields[11]) + int(fields[12])) / tick >= cpu_s:
                break
            time.sleep(0.05)


def test_a_busy_machine_scales_the_hang_limit_instead_of_counting_a_hang(tmp_path):
    """Issue 42 item 12: the worker and three busy loops share one CPU; the no-op case timed in
    the worker measures it (wall / CPU time), and each case's hang limit grows by that factor
    (x HANG_MARGIN), so a case slowed by the load is not called a hang; a hang's detail says the
    limit and how it was reached."""
    (tmp_path / "fixtures.json").write_text(json.dumps({}))
    here = Path(__file__).resolve().parent
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])}
    worker = adversarial_runner.Worker(tmp_path / "fixtures.json", tmp_path, None, env)
    cpu = min(os.sched_getaffinity(0))
    hogs = []
    try:
        worker.start()
        pace = adversarial_runner.Pace()
        os.sched_setaffinity(worker.proc.pid, {cpu})
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                 preexec_fn=lambda: os.sched_setaffinity(0, {cpu})) for _ in range(3)]
        _wait_until_spinning(hogs)  # measured before the loops spun, the core looked half free (CI, 1.97)
        slowness = pace.measure(worker)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        worker.stop()
    case = next(c for c in CASES if c.category == "args")
    # four processes on one core: a quarter of it each in theory; clean CI runs measured 1.97 and
    # 1.98 (the worker's share was half), so the check asks for a clear slowdown, not a quarter
    assert slowness > 1.5, pace.timings
    assert pace.limit(case) == pytest.approx(case.timeout * adversarial_runner.HANG_MARGIN * slowness)
    column, detail = adversarial_runner.classify(case, {"timed_out": True, "limit": round(pace.limit(case), 1)})
    assert column == "hangs" and f"no end within {round(pace.limit(case), 1)} s" in detail and "slowness" in detail
