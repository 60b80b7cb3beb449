"""The snapshot's progress, as a person or a log reads it: tables and chunks done, rows, the rate over
the whole snapshot and the time left.

On a terminal it is a progress bar drawn by `tqdm`. Off one (systemd's journal, cron's mail, a
Databricks task's log, a CI log) a bar's carriage returns either vanish or pile up as one endless
line, so there it is a plain line, written at most once every `INTERVAL` seconds while chunks land,
and once at the end::

    snapshot: tables 1/3, chunks 40/120, rows 323,840, 41,200 rows/s, about 2m10s left

Why tqdm and not rich: tqdm is one small pure-Python package with no dependencies of its own (rich
brings pygments and markdown-it), it is safe to update from several threads (the snapshot reads tables
at once), it sizes its bar to the terminal and adds what binlake needs after it, and binlake needs one
bar, not rich's layout and markup. It is imported only when stderr is a terminal.

The rate is every row read in this run over the time since the snapshot started, so reading several
tables at once shows their sum; the time left is the chunks still to read at the pace of the chunks
read so far in this run (chunks resumed from an earlier run count as done, not as pace). While
planning still adds tables (`binlake run` reads tables as they are planned), the totals grow, and the
line says `planning` instead of a time left.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from binlake.capture import metrics

log = logging.getLogger(__name__)

# seconds between two plain lines off a terminal
INTERVAL = float(os.environ.get("BINLAKE_PROGRESS_SECONDS", "10"))


class Progress:
    """Chunks done of `totals` (per table) and rows read, shown as a bar on a terminal and as a plain
    line every `interval` seconds otherwise. `done` holds the chunks already done per table when this
    run begins; `planning` says more tables may still be announced (`expect`)."""

    def __init__(self, totals: dict[str, int], done: dict[str, int], *, planning: bool = False,
                 out: TextIO | None = None, interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out or sys.stderr
        self.tty = self.out.isatty()
        self.totals, self.done = dict(totals), dict(done)
        self.at_start = sum(self.done.values())
        self.rows: dict[str, int] = {t: 0 for t in totals}
        self.planning = planning
        self.interval = INTERVAL if interval is None else interval
        self.clock = clock
        self.began = clock()
        self.shown: float | None = None
        self.lock = threading.Lock()
        self.bar: Any = None
        for table, planned in self.totals.items():
            metrics.chunks(table, planned, self.done.get(table, 0))

    def expect(self, table: str, chunks: int) -> None:
        """`table` has `chunks` more chunks to read (planned while the snapshot runs)."""
        with self.lock:
            self.totals[table] = self.totals.get(table, 0) + chunks
            metrics.chunks(table, self.totals[table], self.done.get(table, 0))
            if self.bar is not None:
                self.bar.total = sum(self.totals.values())
                self.bar.refresh()

    def update(self, table: str, chunks: int, rows: int) -> None:
        """`chunks` more chunks of `table`, holding `rows` rows, are read."""
        with self.lock:
            self.done[table] = self.done.get(table, 0) + chunks
            self.rows[table] = self.rows.get(table, 0) + rows
            metrics.chunks(table, self.totals.get(table, 0), self.done[table])
            metrics.snapshot_rows(table, rows)
            if self.tty:
                self._draw(chunks)
            elif self.shown is None or self.clock() - self.shown >= self.interval:
                self.shown = self.clock()
                self.out.write(self.line() + "\n")
                self.out.flush()

    def rate(self) -> float:
        """Rows per second over the whole snapshot so far: every table's rows, over the time since
        it began."""
        return sum(self.rows.values()) / max(self.clock() - self.began, 1e-6)

    def seconds_left(self) -> float | None:
        """The chunks not yet read at this run's pace; None while planning or before a chunk is read."""
        read = sum(self.done.values()) - self.at_start
        if self.planning or read <= 0 or not self.totals:
            return None
        left = max(sum(self.totals.values()) - sum(self.done.values()), 0)
        return left * (self.clock() - self.began) / read

    def line(self) -> str:
        known = [t for t in self.totals if self.totals[t]]
        tables = sum(1 for t in known if self.done.get(t, 0) >= self.totals[t])
        total = sum(self.totals.values())
        left = self.seconds_left()
        when = "planning" if self.planning else "time left unknown" if left is None else f"about {_span(left)} left"
        return (f"snapshot: tables {tables}/{len(known)}, chunks {sum(self.done.values())}/{total}, "
                f"rows {sum(self.rows.values()):,}, {self.rate():,.0f} rows/s, {when}")

    def finish(self) -> None:
        """The closing line: what this run read and how fast; nothing when it read nothing."""
        with self.lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None
            read = sum(self.done.values()) - self.at_start
            rows = sum(self.rows.values())
            if not read and not rows:
                return
            secs = self.clock() - self.began
            line = f"snapshot: {read} chunks, {rows:,} rows in {secs:.1f}s ({self.rate():,.0f} rows/s)"
            log.info(line)
            self.out.write(line + "\n")
            self.out.flush()

    def _draw(self, chunks: int) -> None:
        if self.bar is None:
            from tqdm import tqdm  # only on a terminal

            self.bar = tqdm(total=sum(self.totals.values()) or None, initial=self.at_start, unit="chunk",
                            desc="snapshot", file=self.out, dynamic_ncols=True, leave=False)
        self.bar.update(chunks)
        # drawn at every update (one per group of chunks), not only past tqdm's minimum interval
        self.bar.set_postfix_str(f"{sum(self.rows.values()):,} rows, {self.rate():,.0f} rows/s", refresh=True)


def _span(seconds: float) -> str:
    """`45s`, `2m10s`, `1h05m`."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
