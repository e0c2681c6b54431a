"""Overall progress across the phases of a job (issue 23 item 11)."""

from __future__ import annotations

import pytest

from dmlviewer.core.progress import OverallProgress, Progress


def _values(events) -> list[float]:
    tracker = OverallProgress()
    return [tracker.update(e) for e in events]


def test_a_new_phase_continues_from_where_the_bar_stands():
    first = [Progress("step", k, 13) for k in range(1, 14)]
    second = [Progress("step", k, 4) for k in range(1, 5)]
    values = _values(first[:12] + second + [Progress("done")])
    assert values[11] == pytest.approx(12 / 13)
    # the second phase fills the rest of the bar: base + (1 - base) * fraction
    base = 12 / 13
    assert values[12:16] == pytest.approx([min(base + (1 - base) * k / 4, 0.999) for k in range(1, 5)])
    assert values[-1] == 1.0
    assert all(b >= a for a, b in zip(values, values[1:]))


def test_a_phase_that_restarts_with_the_same_total_is_a_new_phase():
    values = _values([Progress("step", 9, 10), Progress("step", 2, 10), Progress("step", 10, 10)])
    assert values[0] == pytest.approx(0.9)
    assert values[1] == pytest.approx(0.9 + 0.1 * 0.2)
    assert values[2] == pytest.approx(0.999)  # 100 % is for "done"


def test_declared_overall_values_win_and_never_move_back():
    events = [Progress("step", 5, 10, data={"overall": 0.5}), Progress("evaluate", 1, 10, data={"overall": 0.55}),
              Progress("step", 9, 10), Progress("step", 1, 10, data={"overall": 0.4}), Progress("log", message="x")]
    assert _values(events) == pytest.approx([0.5, 0.55, 0.55, 0.55, 0.55])


# -- the one driver (issue 39 item 2): the GUI's job threads, the command line and run_to_end


def _deaf(produced: list[int], steps: int = 100):
    """A job that never looks at its cancel token."""
    for k in range(1, steps + 1):
        produced.append(k)
        yield Progress("step", k, steps)
    yield Progress("done", data={"result": "all"})


def test_a_job_that_ignores_a_cancel_gets_cancelled_thrown_in_at_its_next_step():
    from dmlviewer.core.progress import CancelToken, run_job

    token, produced, seen = CancelToken(), [], []

    def emit(event):
        seen.append(event.kind)
        if event.current == 3:
            token.cancel()  # asked while step 3 is shown

    status, payload = run_job(lambda cancel: _deaf(produced), token, emit)
    assert (status, payload) == ("cancelled", None)
    # step 4 was in flight when the job resumed with the token set; its yield is where it stops
    assert produced == [1, 2, 3, 4] and seen == ["step"] * 4


def test_wind_down_events_pass_after_a_cancel():
    from dmlviewer.core.progress import WIND_DOWN_KINDS, CancelToken, run_job

    token, seen = CancelToken(), []

    def saving_job(cancel):
        yield Progress("step", 1, 2)
        for kind in ("log", "checkpoint", "epoch", "eval"):  # what a job does to wind down
            yield Progress(kind, message=kind)
        yield Progress("done", data={"result": {"cancelled": True, "checkpoint": "c.pt"}})

    def emit(event):
        seen.append(event.kind)
        token.cancel()

    status, payload = run_job(saving_job, token, emit)
    assert seen == ["step", "log", "checkpoint", "epoch", "eval", "done"]
    assert set(seen[1:]) <= WIND_DOWN_KINDS
    assert (status, payload) == ("cancelled", {"cancelled": True, "checkpoint": "c.pt"})


def test_run_job_reports_a_failure_with_its_traceback_and_a_cancel_before_the_start():
    from dmlviewer.core.progress import CancelToken, run_job

    def broken(cancel):
        yield Progress("step", 1, 2)
        raise ValueError("broke on purpose")

    status, text = run_job(broken, CancelToken())
    assert status == "failed" and text.startswith("ValueError: broke on purpose")
    assert "Traceback" in text and "broken" in text
    started = []
    token = CancelToken()
    token.cancel()
    assert run_job(lambda cancel: started.append(1) or _deaf([]), token) == ("cancelled", None)
    assert started == []  # a job cancelled in the queue is never started
    assert run_job((_deaf, ([], 3), {}), CancelToken())[0] == "failed"  # a tuple factory gets cancel=


def test_the_driver_fills_the_eta_from_the_rate_with_one_clock(monkeypatch):
    from dmlviewer.core import progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])

    def job():
        for k in (2, 3, 4, 6):  # the phase is first seen at 2 of 10 done
            now[0] += 1.0
            yield Progress("step", k, 10)
        yield Progress("step", 1, 4, eta_s=7.5)  # a job's own estimate is kept
        yield Progress("done", data={"result": 1})

    seen = []
    assert progress.drive(job(), emit=seen.append) == (1, True)
    # 1 s per unit since the first event (2 done at t=101): 3 at t=102 -> 7 left x 1 s
    assert [e.eta_s for e in seen[:4]] == [None, 7.0, 6.0, pytest.approx(3.0 / 4 * 4)]  # 3 s for 4 units
    assert seen[4].eta_s == 7.5 and seen[5].eta_s is None
    clock = progress.EtaClock(10, start_count=2)
    now[0] += 2.0
    assert clock.eta(2) is None and clock.eta(4) == pytest.approx(6.0)


def test_the_command_line_bar_shows_the_drivers_eta(caplog, monkeypatch):
    """``commands.common.drive`` draws the core driver's events: an ETA for a job that gives none
    (the bar used to show none for such jobs)."""
    import logging
    import sys

    from dmlviewer.commands import common

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)

    def job():
        for k in range(1, 4):
            yield Progress("step", k, 3, "counting")
        yield Progress("done", data={"result": "r"})

    with caplog.at_level(logging.INFO, logger=common.__name__):
        assert common.drive(job(), "count") == "r"
    last = [r.getMessage() for r in caplog.records if r.getMessage().startswith("count: 3/3")]
    assert last and last[-1].endswith("s left")
