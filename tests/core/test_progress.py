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
