"""Latency: a steady writer inserts rows at a fixed rate while `binlake run` streams continuously; how
long until each row is visible in silver.

Each row carries its commit time in a DATETIME(6) column (UTC, set by the writer in the statement that
commits it; autocommit). Two views of "visible", both reported:
- `p50_s`/`p99_s`: a second Spark session in this process reads the silver Delta table every
  POLL_S seconds; a row's visible time is the end of the first read that returned it. This is what a
  reader polling silver experiences and includes up to one poll interval plus the read itself.
- `commit_p50_s`/`commit_p99_s`: the time of the silver Delta commit that first contained the row
  (the modification time of its `_delta_log/NNN.json`), found after the run from the Parquet files each
  commit added. This is binlake's own latency with no polling error.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness import ROOT, WORK, Source, TreeSampler, cli_env, env_int, stop_group, write_config, BINLAKE

DATABASE = "bench_latency"
TABLE = "ticks"
POLL_S = 0.5


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


def commit_times(silver: Path) -> dict[int, float]:
    """For every id in silver: the modification time of the first Delta commit whose added files hold it."""
    import pyarrow.parquet as pq

    first: dict[int, float] = {}
    log = silver / "_delta_log"
    commits = sorted((int(p.stem), p) for p in log.glob("*.json") if p.stem.isdigit())
    for _version, path in commits:
        when = path.stat().st_mtime
        for line in path.read_text().splitlines():
            action = json.loads(line)
            add = action.get("add")
            if not add:
                continue
            ids = pq.read_table(silver / add["path"], columns=["id"]).column("id").to_pylist()
            for i in ids:
                first.setdefault(int(i), when)
    return first


BATCH_LINE = re.compile(r"^(\S+ \S+) INFO binlake\.spark\.streaming: batch (\d+): \{[^:]*: (\d+)", re.M)


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


def lower_priority_of_reader(niceness: int = 10) -> int:
    """The polling reader is an observer on a 2-core machine: its JVM (and the Python workers it forks
    later) run at lower priority, so binlake gets the CPU when both want it."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.nice(niceness)
        except psutil.Error:
            pass
    return niceness


def wait_for(predicate: Any, timeout: float, what: str, proc: subprocess.Popen[Any], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"binlake run exited {proc.returncode} while waiting for {what}; log {log}")
        if predicate():
            return
        time.sleep(POLL_S)
    raise RuntimeError(f"{what} did not happen within {timeout:.0f}s; log {log}")


def run(source: Source) -> dict[str, Any]:
    from binlake.spark.session import get_spark

    began = time.monotonic()
    rate = env_int("BENCH_LATENCY_RATE", 200)
    seconds = env_int("BENCH_LATENCY_SECONDS", 60)
    source.execute(f"DROP DATABASE IF EXISTS {DATABASE}", f"CREATE DATABASE {DATABASE}")
    source.execute(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, committed DATETIME(6) NOT NULL, note VARCHAR(32))",
                   database=DATABASE)
    cfg, lake = write_config("latency", source, [rf"{DATABASE}\.{TABLE}"])
    silver = lake / "silver" / f"{DATABASE}__{TABLE}"
    reader = get_spark(1, "binlake-bench-reader")  # started before binlake, so its start costs binlake nothing
    observer_niceness = lower_priority_of_reader()
    seen: dict[int, float] = {}
    polls: list[float] = []

    def poll() -> None:
        t0 = time.monotonic()
        if not (silver / "_delta_log").is_dir():
            return
        try:
            ids = [r[0] for r in reader.read.format("delta").load(str(silver)).select("id").collect()]
        except Exception:  # the table may be mid-creation on the first polls
            return
        now = time.time()
        for i in ids:
            seen.setdefault(int(i), now)
        polls.append(time.monotonic() - t0)

    log = WORK / "latency" / "run.log"
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
                    poll()
                    return key in seen
                wait_for(warmed, 900, f"warm-up row {warm} reaching silver", proc, log)
            ready_s = time.monotonic() - started
            writer.start()
            while writer.is_alive():
                poll()
                time.sleep(POLL_S)
            expected = set(writer.committed)

            def drained() -> bool:
                poll()
                return expected <= seen.keys()
            try:
                wait_for(drained, 120, "every written row reaching silver", proc, log)
            except RuntimeError:
                pass  # reported as unseen rows
        stopped = stop_group(proc, grace=60, leader_first=True)
    finally:
        if proc.poll() is None:
            stop_group(proc, grace=10)
        out_file.close()
        reader.stop()
    committed = writer.committed
    polled = [seen[i] - committed[i] for i in committed if i in seen]
    exact = commit_times(silver)
    in_commit = [exact[i] - committed[i] for i in committed if i in exact]
    return {
        "writer_rate_rows_per_s": rate,
        "writer_seconds": seconds,
        "rows_written": len(committed),
        "writer_max_schedule_lag_s": round(writer.lag_max, 3),
        "stream_trigger_s": 1,
        "poll_interval_s": POLL_S,
        "poll_reader_niceness": observer_niceness,
        "poll_read_mean_s": round(sum(polls) / len(polls), 3) if polls else None,
        **summary(polled, len(committed)),
        **summary(in_commit, len(committed), "commit_"),
        "run_ready_s": round(ready_s, 1),
        **batch_stats(log.read_text(errors="replace")),
        "stop": stopped,
        "peak_rss_mb": sampler.peak_mb,
        "peak_rss_parts_mb": sampler.peak_parts,
        "peak_pss_mb": sampler.peak_pss_mb,
        "histogram_s": [round(v, 3) for v in sorted(polled)],
        "commit_histogram_s": [round(v, 3) for v in sorted(in_commit)],
        "section_s": round(time.monotonic() - began, 1),
    }
