"""The snapshot's progress figures: the rate over the whole snapshot, the time left, and the plain line
at a steady interval off a terminal."""

from __future__ import annotations

import io

from binlake.capture.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_is_every_tables_rows_over_the_whole_snapshots_time() -> None:
    """Two tables read one after the other: after 10 s, 1,000 rows of `a` and 3,000 of `b` are 400
    rows/s, not `b`'s 3,000 over the whole time, nor `a`'s alone."""
    clock = Clock()
    p = Progress({"a": 4, "b": 6}, {}, out=io.StringIO(), interval=0, clock=clock)
    clock.now += 4
    p.update("a", 4, 1000)
    clock.now += 6
    p.update("b", 6, 3000)
    assert p.rate() == 400.0


def test_the_time_left_is_the_chunks_left_at_this_runs_pace() -> None:
    """Chunks resumed from an earlier run count as done, not as pace."""
    clock = Clock()
    p = Progress({"a": 100}, {"a": 50}, out=io.StringIO(), interval=0, clock=clock)
    assert p.seconds_left() is None  # nothing read yet
    clock.now += 10
    p.update("a", 10, 80)
    assert p.seconds_left() == 40 * 10 / 10


def test_plain_lines_off_a_terminal_at_a_steady_interval() -> None:
    clock = Clock()
    out = io.StringIO()
    p = Progress({"a": 2, "b": 2}, {}, out=out, interval=10, clock=clock)
    for _ in range(4):
        clock.now += 4
        p.update("a" if clock.now < 110 else "b", 1, 500)
    p.finish()
    lines = out.getvalue().splitlines()
    # the first update (at 4 s) prints, the ones at 8 s and 12 s are within 10 s of it, the one at 16 s prints
    assert lines == [
        "snapshot: tables 0/2, chunks 1/4, rows 500, 125 rows/s, about 12s left",
        "snapshot: tables 2/2, chunks 4/4, rows 2,000, 125 rows/s, about 0s left",
        "snapshot: 4 chunks, 2,000 rows in 16.0s (125 rows/s)",
    ]
    assert "\r" not in out.getvalue()


def test_while_planning_no_time_left_is_guessed() -> None:
    clock = Clock()
    out = io.StringIO()
    p = Progress({}, {}, planning=True, out=out, interval=0, clock=clock)
    p.expect("a", 3)
    clock.now += 2
    p.update("a", 3, 30)
    p.expect("b", 5)
    assert out.getvalue() == "snapshot: tables 1/1, chunks 3/3, rows 30, 15 rows/s, planning\n"
    assert p.line() == "snapshot: tables 1/2, chunks 3/8, rows 30, 15 rows/s, planning"


def test_a_run_that_read_nothing_prints_nothing() -> None:
    out = io.StringIO()
    p = Progress({"a": 2}, {"a": 2}, out=out)
    p.finish()
    assert out.getvalue() == ""


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_terminal() -> None:
    """tqdm's bar: chunks done of the total, rows and the rate after it; the closing line last."""
    out = Tty()
    p = Progress({"d.t": 10}, {"d.t": 2}, out=out)
    p.update("d.t", 4, 1234)
    p.finish()
    text = out.getvalue()
    assert "6/10" in text and "1,234 rows" in text and "rows/s" in text and "\r" in text
    assert text.splitlines()[-1].startswith("snapshot: 4 chunks, 1,234 rows in ")
