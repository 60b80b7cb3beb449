"""Latency: a steady writer inserts rows at a fixed rate while `binlake run` streams continuously; how
long until each row is visible in silver.

Each row carries its commit time in the source (the writer's clock, taken as it commits; autocommit).
A row is visible in silver once the Delta commit that adds it exists: `p50_s`/`p99_s` use that
commit's time (the modification time of its `_delta_log/NNN.json`). The watcher reads silver's
Delta log itself, with pyarrow over each commit's added files: no second Spark session competes
with binlake for the machine's two cores. `seen_p50_s`/`seen_p99_s` are when the watcher, polling
every POLL_S seconds, first found the row (so they include up to one poll interval).
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness import (BINLAKE, ROOT, WORK, LogFollower, Source, TreeSampler, cli_env, env_int, stop_group,
                     write_config)

DATABASE = "bench_latency"
TABLE = "ticks"
POLL_S = 0.2


class Writer(threading.Thread):
    """Inserts `rate` rows a second for `seconds`, on a fixed schedule (it does not catch up in bursts
    beyond the schedule if a statement is slow; a late row is simply written late)."""

    def __init__(self, source: Source, rate: int, seconds: int) -> None:
        super().__init__(daemon=True)
        self.source, self.rate, self.seconds = source, rate, seconds
        self.committed: dict[int, float] = {}
        self.lag_max = 0.0

    def run(self) -> None:
        conn = self.source.connect(DATABASE)
        cur = conn.cursor()
        began = time.time()
        for i in range(self.rate * self.seconds):
            due = began + i / self.rate
            now = time.time()
            if due > now:
                time.sleep(due - now)
            else:
                self.lag_max = max(self.lag_max, now - due)
            t = time.time()
            stamp = datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
            cur.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, 'tick')", (i + 1, stamp))
            self.committed[i + 1] = t
        conn.close()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return round(s[k], 3)


def summary(latencies: list[float], expected: int, prefix: str = "") -> dict[str, Any]:
    """Percentiles over all expected rows; a row never seen counts as infinitely late."""
    missing = expected - len(latencies)
    values = latencies + [float("inf")] * missing
    out = {}
    for name, q in (("p50_s", 0.50), ("p90_s", 0.90), ("p99_s", 0.99), ("max_s", 1.0)):
        v = percentile(values, q)
        out[prefix + name] = None if v is None or v == float("inf") else v
    out[prefix + "unseen_rows"] = missing
    return out


class SilverWatcher:
    """Reads silver's Delta log as it grows: for each source `id`, the time of the first commit that
    added it and the time this watcher first saw it."""

    def __init__(self, silver: Path) -> None:
        self.log = LogFollower(silver, "id")
        self.committed: dict[int, float] = {}
        self.seen: dict[int, float] = {}

    def poll(self) -> None:
        for when, now, columns in self.log.commits():
            for ids in columns:
                for i in ids.to_pylist():
                    self.committed.setdefault(int(i), when)
                    self.seen.setdefault(int(i), now)


BATCH_LINE = re.compile(r"^(\S+ \S+) INFO binlake\.capture\.micro_batch: batch (\d+): \{[^:]*: (\d+)", re.M)


def batch_stats(text: str) -> dict[str, Any]:
    """Micro-batches from the `-v` log: how many, rows per batch, and the time between batch ends."""
    ends, sizes = [], []
    for stamp, _batch, rows in BATCH_LINE.findall(text):
        ends.append(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp())
        sizes.append(int(rows))
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    return {
        "batches": len(ends),
        "batch_rows_mean": round(sum(sizes) / len(sizes), 1) if sizes else None,
        "batch_interval_mean_s": round(sum(gaps) / len(gaps), 2) if gaps else None,
        "batch_interval_max_s": round(max(gaps), 2) if gaps else None,
    }


def wait_for(predicate: Any, timeout: float, what: str, proc: subprocess.Popen[Any], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"binlake run exited {proc.returncode} while waiting for {what}; log {log}")
        if predicate():
            return
        time.sleep(POLL_S)
    raise RuntimeError(f"{what} did not happen within {timeout:.0f}s; log {log}")


def run(source: Source, rate: int) -> dict[str, Any]:
    """`binlake run` under a writer of `rate` rows a second for BENCH_LATENCY_SECONDS (60)."""
    began = time.monotonic()
    seconds = env_int("BENCH_LATENCY_SECONDS", 60)
    source.execute(f"DROP DATABASE IF EXISTS {DATABASE}", f"CREATE DATABASE {DATABASE}")
    source.execute(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, committed DATETIME(6) NOT NULL, note VARCHAR(32))",
                   database=DATABASE)
    name = f"latency-{rate}{source.key}"
    cfg, lake = write_config(name, source, [rf"{DATABASE}\.{TABLE}"])
    watcher = SilverWatcher(lake / "silver" / f"{DATABASE}__{TABLE}")
    log = WORK / name / "run.log"
    out_file = open(log, "w")
    proc = subprocess.Popen([*BINLAKE, "-v", "run", "-c", str(cfg)], cwd=ROOT, env=cli_env(), stdout=out_file,
                            stderr=subprocess.STDOUT, start_new_session=True)
    started = time.monotonic()
    writer = Writer(source, rate, seconds)
    try:
        with TreeSampler(proc.pid) as sampler:
            # Row 0 arrives by the snapshot (it is there before binlake reads the table); row -1, written
            # once row 0 is in silver, can only arrive by the binlog stream: then the clock starts.
            source.execute(f"INSERT INTO {TABLE} VALUES (0, UTC_TIMESTAMP(6), 'warm-up')", database=DATABASE)
            for warm in (0, -1):
                if warm == -1:
                    source.execute(f"INSERT INTO {TABLE} VALUES (-1, UTC_TIMESTAMP(6), 'warm-up')",
                                   database=DATABASE)

                def warmed(key: int = warm) -> bool:
                    watcher.poll()
                    return key in watcher.seen
                wait_for(warmed, 900, f"warm-up row {warm} reaching silver", proc, log)
            ready_s = time.monotonic() - started
            writer.start()
            while writer.is_alive():
                watcher.poll()
                time.sleep(POLL_S)
            expected = set(writer.committed)

            def drained() -> bool:
                watcher.poll()
                return expected <= watcher.seen.keys()
            try:
                wait_for(drained, 120, "every written row reaching silver", proc, log)
            except RuntimeError:
                pass  # reported as unseen rows
        stopped = stop_group(proc, grace=60, leader_first=True)
    finally:
        if proc.poll() is None:
            stop_group(proc, grace=10)
        out_file.close()
    committed = writer.committed
    in_commit = [watcher.committed[i] - committed[i] for i in committed if i in watcher.committed]
    seen = [watcher.seen[i] - committed[i] for i in committed if i in watcher.seen]
    # a stream that keeps up has the same latency at the end of the run as at its start
    tenth = max(1, len(committed) // 6)
    ids = sorted(committed)
    first = [watcher.committed[i] - committed[i] for i in ids[:tenth] if i in watcher.committed]
    last = [watcher.committed[i] - committed[i] for i in ids[-tenth:] if i in watcher.committed]
    return {
        "server": source.version(),
        "writer_rate_rows_per_s": rate,
        "writer_seconds": seconds,
        "rows_written": len(committed),
        "writer_max_schedule_lag_s": round(writer.lag_max, 3),
        "stream_trigger_s": 1,
        "poll_interval_s": POLL_S,
        **summary(in_commit, len(committed)),
        **summary(seen, len(committed), "seen_"),
        "p99_first_sixth_s": percentile(first, 0.99),
        "p99_last_sixth_s": percentile(last, 0.99),
        "run_ready_s": round(ready_s, 1),
        **batch_stats(log.read_text(errors="replace")),
        "stop": stopped,
        "peak_rss_mb": sampler.peak_mb,
        "peak_rss_parts_mb": sampler.peak_parts,
        "peak_pss_mb": sampler.peak_pss_mb,
        "histogram_s": [round(v, 3) for v in sorted(in_commit)],
        "seen_histogram_s": [round(v, 3) for v in sorted(seen)],
        "section_s": round(time.monotonic() - began, 1),
    }
