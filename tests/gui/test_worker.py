"""JobRunner / LatestRunner: events forwarded, cancellation, failures, crash isolation, order."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _fixtures_part2 as jobs  # noqa: E402

from dmlviewer.core.background import BACKGROUND_NICE, background_threads  # noqa: E402
from dmlviewer.core.progress import Progress  # noqa: E402
from dmlviewer.gui.jobs.job import JobState  # noqa: E402
from dmlviewer.gui.jobs.latest import LatestRunner  # noqa: E402
from dmlviewer.gui.jobs.runner import JobRunner, confirm_close  # noqa: E402

pytestmark = pytest.mark.gui

PROCESS_TIMEOUT_MS = 60_000  # a spawned child imports torch-free code, but CI machines are slow


@pytest.fixture
def runner(qtbot):
    r = JobRunner()
    yield r
    r.shutdown(10)


def test_thread_job_forwards_events_and_result(qtbot, runner):
    seen: list[Progress] = []
    runner.job_progress.connect(lambda job, ev: seen.append(ev))
    with qtbot.waitSignal(runner.job_finished, timeout=5000) as blocker:
        job = runner.submit("count", functools.partial(jobs.counting_job, 5))
    finished_job, result = blocker.args
    assert finished_job is job and job.state == JobState.FINISHED
    assert result == {"sum": 0 + 1 + 4 + 9 + 16}
    steps = [ev for ev in seen if ev.kind == "step"]
    assert [ev.data["value"] for ev in steps] == [0, 1, 4, 9, 16]
    assert [ev.current for ev in steps] == [1, 2, 3, 4, 5]
    # the runner fills an ETA from the rate when the job gives none: 0 once all is done
    assert steps[-1].eta_s == 0.0
    assert not runner.busy


def test_cancel_between_steps_saves_and_reports(qtbot, runner, tmp_path):
    marker = tmp_path / "ckpt.txt"
    started = threading.Event()

    def factory(cancel):
        started.set()
        return jobs.counting_job(10_000, cancel, delay_s=0.005, marker=str(marker))

    steps = []
    runner.job_progress.connect(lambda job, ev: steps.append(ev.current) if ev.kind == "step" else None)
    job = runner.submit("long", factory)
    qtbot.waitUntil(lambda: len(steps) >= 3, timeout=5000)
    with qtbot.waitSignal(runner.job_cancelled, timeout=5000):
        runner.cancel(job)
    assert job.state == JobState.CANCELLED
    assert marker.exists(), "the job's own cancel handler ran (checkpoint stand-in written)"
    stopped_after = int(marker.read_text().split()[-1])
    assert stopped_after < 10_000
    assert "saved" in "\n".join(job.log)


def test_job_that_ignores_cancel_is_stopped_within_one_step(qtbot, runner):
    produced: list[int] = []
    job = runner.submit("deaf", lambda cancel: jobs.deaf_job(cancel, produced))
    qtbot.waitUntil(lambda: len(produced) >= 2, timeout=5000)
    with qtbot.waitSignal(runner.job_cancelled, timeout=5000):
        runner.cancel(job)
        at_cancel = len(produced)
    # the step in flight when cancel was pressed, and the one it then ran without looking
    assert len(produced) <= at_cancel + 2
    assert job.state == JobState.CANCELLED


def test_exception_reported_with_traceback(qtbot, runner):
    with qtbot.waitSignal(runner.job_failed, timeout=5000) as blocker:
        job = runner.submit("broken", jobs.failing_job)
    failed_job, text = blocker.args
    assert failed_job is job and job.state == JobState.FAILED
    assert "ValueError: the job broke on purpose" in text
    assert "Traceback" in text and "failing_job" in text
    assert job.error == text


def test_queue_runs_in_order_and_queued_job_cancels_at_once(qtbot, runner):
    order: list[str] = []
    runner.job_started.connect(lambda job: order.append(job.name))
    gate = threading.Event()

    def blocked(cancel):
        gate.wait(5)
        yield Progress("done", data={"result": "a"})

    a = runner.submit("a", blocked)
    b = runner.submit("b", functools.partial(jobs.counting_job, 2))
    c = runner.submit("c", functools.partial(jobs.counting_job, 2))
    d = runner.submit("d", functools.partial(jobs.counting_job, 2))
    assert runner.jobs == [a, b, c, d] and a.state == JobState.RUNNING
    assert b.state == JobState.QUEUED
    with qtbot.waitSignal(runner.job_cancelled, timeout=1000):
        runner.cancel(c)
    assert c.state == JobState.CANCELLED and runner.jobs == [a, b, d]
    gate.set()
    qtbot.waitUntil(lambda: not runner.busy, timeout=5000)
    assert order == ["a", "b", "d"]
    assert [j.state for j in (a, b, d)] == [JobState.FINISHED] * 3


def test_a_jobs_handlers_hear_that_job_alone(qtbot, runner):
    """Handlers given to submit follow their job only (a view needs no "is it mine" test), the
    first job's start included, which happens inside submit; a job cancelled in the queue and a
    failed one reach their own handlers."""
    heard: dict[str, list] = {"a": [], "b": [], "c": [], "d": []}

    def handlers(key: str) -> dict:
        return dict(started=lambda job: heard[key].append(("started", job.name)),
                    progress=lambda job, ev: heard[key].append(("step", job.name)) if ev.kind == "step" else None,
                    finished=lambda job, result: heard[key].append(("finished", result)),
                    failed=lambda job, text: heard[key].append(("failed", text.splitlines()[-1])),
                    cancelled=lambda job: heard[key].append(("cancelled", job.name)))

    gate = threading.Event()

    def blocked(cancel):
        gate.wait(5)
        yield Progress("done", data={"result": "a"})

    runner.submit("a", blocked, **handlers("a"))
    assert heard["a"] == [("started", "a")]
    runner.submit("b", functools.partial(jobs.counting_job, 2), **handlers("b"))
    c = runner.submit("c", functools.partial(jobs.counting_job, 2), **handlers("c"))
    runner.submit("d", jobs.failing_job, **handlers("d"))
    runner.cancel(c)
    gate.set()
    qtbot.waitUntil(lambda: not runner.busy, timeout=5000)
    assert heard["a"] == [("started", "a"), ("finished", "a")]
    assert heard["b"] == [("started", "b"), ("step", "b"), ("step", "b"), ("finished", {"sum": 1})]
    assert heard["c"] == [("cancelled", "c")]
    assert heard["d"][0] == ("started", "d") and heard["d"][-1] == ("failed", "ValueError: the job broke on purpose")
    assert set(heard["d"][1:-1]) <= {("step", "d")}


def test_process_job_streams_events_and_logs(qtbot, runner):
    events = []
    runner.job_progress.connect(lambda job, ev: events.append(ev))
    with qtbot.waitSignal(runner.job_finished, timeout=PROCESS_TIMEOUT_MS) as blocker:
        job = runner.submit("child", (jobs.counting_job, (4,), {}), process=True)
    assert blocker.args[1] == {"sum": 14}
    assert [ev.data["value"] for ev in events if ev.kind == "step"] == [0, 1, 4, 9]
    assert job.exitcode == 0

    with qtbot.waitSignal(runner.job_finished, timeout=PROCESS_TIMEOUT_MS) as blocker:
        job = runner.submit("child log", jobs.logging_job, process=True)
    assert blocker.args[1] != os.getpid(), "ran in another process"
    assert any("hello from pid" in line for line in job.log)


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="POSIX priorities")
def test_background_jobs_run_below_the_gui_and_leave_it_a_core(qtbot, runner):
    """Issue 40: a thread job's thread and a process job's child run 10 nice levels below the
    GUI (the GUI thread keeps its own), and their torch pool leaves the GUI a core."""
    gui = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    lower = min(19, gui + BACKGROUND_NICE)
    with qtbot.waitSignal(runner.job_finished, timeout=PROCESS_TIMEOUT_MS) as blocker:
        runner.submit("thread", jobs.priority_job)
    thread = blocker.args[1]
    assert thread["pid"] == os.getpid() and thread["nice"] == lower
    assert thread["threads"] <= background_threads()
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == gui  # the GUI thread's own
    with qtbot.waitSignal(runner.job_finished, timeout=PROCESS_TIMEOUT_MS) as blocker:
        runner.submit("process", jobs.priority_job, process=True)
    child = blocker.args[1]
    assert child["pid"] != os.getpid() and child["nice"] == lower
    assert child["threads"] <= background_threads()


def test_process_segfault_and_exception_are_reported_and_app_survives(qtbot, runner):
    failures: dict[str, str] = {}
    runner.job_failed.connect(lambda job, text: failures.__setitem__(job.name, text))
    seg = runner.submit("segfault", jobs.segfault_job, process=True)
    exc = runner.submit("raises", jobs.failing_job, process=True)
    ext = runner.submit("exits", functools.partial(jobs.exit_job, code=3), process=True)
    ok = runner.submit("after", (jobs.counting_job, (3,), {}), process=True)
    qtbot.waitUntil(lambda: not runner.busy, timeout=3 * PROCESS_TIMEOUT_MS)
    assert seg.state == JobState.FAILED and seg.exitcode == -11
    assert "SIGSEGV" in failures["segfault"] and "-11" in failures["segfault"]
    assert "about to crash" in "\n".join(seg.log)
    assert exc.state == JobState.FAILED
    assert "ValueError: the job broke on purpose" in failures["raises"] and "Traceback" in failures["raises"]
    assert ext.state == JobState.FAILED and "exited with code 3" in failures["exits"]
    assert ok.state == JobState.FINISHED and ok.result == {"sum": 5}


def test_process_job_cancel_reaches_child(qtbot, runner, tmp_path):
    marker = tmp_path / "child_ckpt.txt"
    steps = []
    runner.job_progress.connect(lambda job, ev: steps.append(ev) if ev.kind == "step" else None)
    job = runner.submit("child long", (jobs.counting_job, (100_000,), {"delay_s": 0.01, "marker": str(marker)}),
                        process=True)
    qtbot.waitUntil(lambda: len(steps) >= 2, timeout=PROCESS_TIMEOUT_MS)
    with qtbot.waitSignal(runner.job_cancelled, timeout=10_000):
        runner.cancel(job)
    assert marker.exists() and job.exitcode == 0


def test_confirm_close(qtbot, runner, tmp_path):
    assert confirm_close(runner, ask=lambda text: pytest.fail("nothing runs: no question"))
    marker = tmp_path / "close.txt"
    job = runner.submit("long", functools.partial(jobs.counting_job, 100_000, delay_s=0.005, marker=str(marker)))
    qtbot.waitUntil(lambda: job.progress is not None, timeout=5000)
    asked = []
    assert not confirm_close(runner, ask=lambda text: asked.append(text) or False)
    assert runner.busy and "long" in asked[0]
    assert confirm_close(runner, ask=lambda text: True, timeout_s=10)
    assert marker.exists(), "closing waited for the job to save"
    qtbot.waitSignal(runner.job_cancelled, timeout=2000)


def test_latest_runner_drops_stale_results(qtbot):
    latest = LatestRunner()
    results = []
    latest.result_ready.connect(lambda rid, value: results.append((rid, value)))
    gate = threading.Event()

    def slow(cancel):
        gate.wait(5)
        return "first"

    first = latest.submit(slow, cancel_aware=True)
    time.sleep(0.05)
    second = latest.submit(lambda: "second")
    third = latest.submit(lambda: "third")
    gate.set()
    qtbot.waitUntil(lambda: bool(results), timeout=5000)
    qtbot.wait(100)
    assert results == [(third, "third")]
    assert first < second < third

    failures = []
    latest.request_failed.connect(lambda rid, text: failures.append((rid, text)))
    bad = latest.submit(lambda: 1 / 0)
    qtbot.waitUntil(lambda: bool(failures), timeout=5000)
    assert failures[0][0] == bad and "ZeroDivisionError" in failures[0][1]
    assert latest.stop(5)


def test_jobs_view_lists_queue_and_shows_failure_text(qtbot, runner):
    from dmlviewer.gui.jobs.jobs_view import JobsView

    view = JobsView(runner)
    qtbot.addWidget(view)
    gate = threading.Event()

    def blocked(cancel):
        yield Progress("step", 1, 4, data={})
        gate.wait(5)
        yield Progress("done", data={"result": None})

    running = runner.submit("first", blocked)
    queued = runner.submit("second", jobs.failing_job)
    qtbot.waitUntil(lambda: running.progress is not None, timeout=5000)
    view.refresh()
    texts = [[view.tree.topLevelItem(i).text(c) for c in range(4)] for i in range(view.tree.topLevelItemCount())]
    assert [t[:3] for t in texts] == [["first", "running", "25%"], ["second", "queued", ""]]
    gate.set()
    qtbot.waitUntil(lambda: queued.state == JobState.FAILED, timeout=5000)
    view.refresh()
    names = [view.tree.topLevelItem(i).text(0) for i in range(view.tree.topLevelItemCount())]
    assert names == ["first", "second"]  # in the order submitted: a new job is appended below
    view.tree.setCurrentItem(view.tree.topLevelItem(1))
    assert "ValueError: the job broke on purpose" in view.log.toPlainText()
    assert "Traceback" in view.log.toPlainText()
    assert not view.cancel_button.isEnabled()


def test_shutdown_reports_the_end_at_once(qtbot, runner, tmp_path):
    """After ``shutdown`` nothing is busy, so a window's close check does not ask again."""
    job = runner.submit("long", functools.partial(jobs.counting_job, 100_000, delay_s=0.005,
                                                  marker=str(tmp_path / "m.txt")))
    queued = runner.submit("next", functools.partial(jobs.counting_job, 3))
    qtbot.waitUntil(lambda: job.progress is not None, timeout=5000)
    cancelled = []
    runner.job_cancelled.connect(cancelled.append)
    assert runner.shutdown(10)
    assert not runner.busy and cancelled == [queued, job]
    assert job.state == queued.state == JobState.CANCELLED
    assert confirm_close(runner, ask=lambda text: pytest.fail("nothing runs: no question"))
    qtbot.wait(50)
    assert cancelled == [queued, job], "the queued end signal is not reported twice"


def _two_phases(cancel, first: int = 13, second: int = 50, gate: threading.Event | None = None):
    """A job of two phases that each count from 0 (as training's steps, then its evaluation)."""
    for k in range(1, first + 1):
        yield Progress("step", k, first, "phase one", eta_s=100.0)
    for k in range(1, second + 1):
        if gate is not None and k == 3:
            gate.wait(5)
        cancel.raise_if_cancelled()
        yield Progress("step", k, second, "phase two", eta_s=164.0)
    yield Progress("done", data={"result": "ok"})


def test_a_two_phase_job_shows_overall_progress_that_never_moves_back(qtbot, runner):
    """Issue 23 item 11: 12/13 of the first phase is 92 %; the second phase starting at 1/50
    must not pull the bar back to 2 % (or 42 %, as it did for training's evaluation)."""
    fractions: list[float] = []
    runner.job_progress.connect(lambda job, ev: fractions.append(job.fraction))
    with qtbot.waitSignal(runner.job_finished, timeout=5000):
        job = runner.submit("two phases", _two_phases)
    assert len(fractions) == 13 + 50 + 1
    assert all(b >= a for a, b in zip(fractions, fractions[1:]))
    assert fractions[11] == pytest.approx(12 / 13)
    assert fractions[13] >= 12 / 13  # the second phase's first step
    assert fractions[-2] < 1.0 and fractions[-1] == 1.0 and job.fraction == 1.0


def test_jobs_with_an_overall_fraction_are_shown_by_it(qtbot, runner):
    """Training gives ``data["overall"]``; the jobs view and the status bar show that, not the
    evaluation pass's own count."""
    from dmlviewer.gui.jobs.jobs_view import JobsView

    view = JobsView(runner)
    qtbot.addWidget(view)
    gate = threading.Event()

    def training(cancel):
        yield Progress("step", 90, 100, data={"overall": 0.9})
        yield Progress("evaluate", 3, 10, data={"overall": 0.93})  # 30 % of the evaluation pass
        gate.wait(5)

    job = runner.submit("train", training)
    qtbot.waitUntil(lambda: job.progress is not None and job.progress.kind == "evaluate", timeout=5000)
    view.refresh()
    assert view.tree.topLevelItem(0).text(2) == "93%"
    gate.set()


def test_after_cancel_no_stale_percentage_or_eta(qtbot, runner):
    from dmlviewer.gui.jobs.job_status import JobStatus
    from dmlviewer.gui.jobs.jobs_view import JobsView

    status = JobStatus(runner)
    view = JobsView(runner)
    qtbot.addWidget(status)
    qtbot.addWidget(view)
    gate = threading.Event()
    job = runner.submit("extract features", functools.partial(_two_phases, gate=gate))
    qtbot.waitUntil(lambda: job.progress is not None and job.progress.message == "phase two", timeout=5000)
    status.refresh()
    view.refresh()
    assert status.label.text() == "extract features: 99 %, ETA 02:44" and not status.bar.isHidden()
    assert view.tree.topLevelItem(0).text(3) == "02:44"
    runner.cancel(job)
    status.refresh()
    view.refresh()
    assert job.eta_s is None and status.label.text() == "extract features: cancelling…"
    assert view.tree.topLevelItem(0).text(3) == ""
    gate.set()
    qtbot.waitUntil(lambda: job.state == JobState.CANCELLED, timeout=5000)
    status.refresh()
    view.refresh()
    assert status.label.text() == "cancelled: extract features" and status.bar.isHidden()  # the state first
    row = [view.tree.topLevelItem(0).text(c) for c in range(4)]
    assert row == ["extract features", "cancelled", "", ""]


def test_the_jobs_list_keeps_the_running_job_in_sight(qtbot, runner):
    from dmlviewer.gui.jobs.jobs_view import JobsView

    view = JobsView(runner)
    qtbot.addWidget(view)
    view.resize(400, 160)
    view.show()
    for k in range(30):  # a history longer than the list is high
        with qtbot.waitSignal(runner.job_finished, timeout=5000):
            runner.submit(f"quick {k}", functools.partial(jobs.counting_job, 1))
    gate = threading.Event()

    def blocked(cancel):
        yield Progress("step", 1, 2)
        gate.wait(5)

    running = runner.submit("the running one", blocked)
    qtbot.waitUntil(lambda: running.progress is not None, timeout=5000)
    view.refresh()
    rows = [view.tree.topLevelItem(i).text(0) for i in range(view.tree.topLevelItemCount())]
    assert rows[-1] == "the running one"  # appended below the others
    item = view.tree.topLevelItem(len(rows) - 1)
    assert view.tree.viewport().rect().intersects(view.tree.visualItemRect(item))
    gate.set()


def test_a_failure_and_progress_read_on_a_views_status_line(qtbot, runner):
    """A failed job's first line shows as written, even with ``<`` and ``&`` (rich text swallowed
    ``<lambda>``); the whole text is the tooltip; progress shows message, count and the bar."""
    from PySide6.QtGui import QTextDocument
    from PySide6.QtWidgets import QLabel, QProgressBar

    from dmlviewer.gui.common.errors import show_failure
    from dmlviewer.gui.jobs.job_status import show_progress

    def broken(cancel):
        raise ValueError("cannot pickle '<lambda>' & friends")

    label, bar = QLabel(), QProgressBar()
    bar.setRange(0, 1000)
    with qtbot.waitSignal(runner.job_failed, timeout=5000) as blocker:
        job = runner.submit("broken", broken)
    show_failure(label, blocker.args[1], "Evaluation failed")
    shown = QTextDocument()
    shown.setHtml(label.text())
    assert shown.toPlainText() == "Evaluation failed: ValueError: cannot pickle '<lambda>' & friends"
    assert label.toolTip() == job.error and "Traceback" in label.toolTip()
    show_progress(bar, label, job, Progress("step", 3, 12, message="embedding"))
    assert label.text().startswith("embedding 3/12")
    show_progress(bar, label, job, Progress("log", message="writing the file"))
    assert label.text().startswith("writing the file")
