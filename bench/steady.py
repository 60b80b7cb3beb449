"""Steady state: a lake left running. `binlake run` (the defaults, a real subprocess as a user runs it)
streams one table of BENCH_STEADY_ROWS rows (5,000,000) while a writer changes random keys at
BENCH_STEADY_RATE rows a second (2,000: a 20-row statement every 10 ms, 4% of the rows inserts and
deletes) for BENCH_STEADY_MINUTES (15); on each server.

What a lake costs once it has run a while, which a burst or a minute does not show: does the latency
hold (p99 over the steady window, after BENCH_STEADY_WARMUP_S, and the p99 of its last third over its
first), how many files and bytes silver and bronze gather (live by the Delta log, and every byte on
disk under each table's folder, dead files included), how much slower silver reads than the same rows
compacted, what CPU a million changes cost, and whether silver still equals the source.

Latency: every row a statement writes carries the writer's wall time of that statement (`changed_us`,
microseconds, taken as it commits; autocommit), so silver's added files tell when each statement's
changes landed (bench/steady_lake.py's watcher: the time of the silver commit that first held the
stamp). Updates and inserts are timed; a delete leaves no row to carry a stamp.

BENCH_STEADY_LARGE=1 adds a run on MariaDB at BENCH_STEADY_LARGE_ROWS (20,000,000), whose p99 is
compared with the first run's (`steady-large`): the latency should not depend on the table's size.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import threading
import time
from array import array
from datetime import datetime, timezone
from typing import Any

import steady_lake
from harness import (BINLAKE, ROOT, WORK, Source, TreeSampler, cli_env, env_int, run_cli, stop_group,
                     write_config)
from latency import percentile, summary, wait_for

DATABASE = "bench_steady"
TABLE = "account"
COLUMNS = ("id BIGINT NOT NULL PRIMARY KEY, visits INT NOT NULL, changed_us BIGINT NOT NULL, "
           "name VARCHAR(32) NOT NULL, balance DECIMAL(12,2) NOT NULL, updated_at DATETIME(6) NOT NULL")
STATEMENT_ROWS = 20
# of every 50 statements, one inserts and one deletes: 4% of the changed rows, and the table keeps its size
CYCLE, INSERT_AT, DELETE_AT = 50, 24, 49
POLL_S = 0.5


def create_table(source: Source, rows: int, table: str = TABLE, fresh: bool = True) -> float:
    """(Re)create the table with `rows` rows outside the binlog (the snapshot reads the table, not its
    history), half a million rows a statement, in a database made anew unless not `fresh`. Returns the
    seconds it took."""
    began = time.monotonic()
    if fresh:
        source.execute(f"DROP DATABASE IF EXISTS {DATABASE}", f"CREATE DATABASE {DATABASE}")
    source.execute(f"CREATE TABLE {table} ({COLUMNS})", database=DATABASE)
    step = 500_000
    for lo in range(0, rows, step):
        k = f"(seq + {lo})"
        source.execute(
            f"INSERT INTO {table} SELECT {k}, {k} * 7 % 1000, 0, CONCAT('customer-', {k}), "
            f"({k} * 7919 % 10000000) / 100, TIMESTAMP('2024-01-01') + INTERVAL {k} SECOND "
            f"FROM {source.numbers(min(step, rows - lo))}", database=DATABASE, log_bin=False)
    source.execute(f"ANALYZE TABLE {table}", database=DATABASE, log_bin=False)
    return time.monotonic() - began


class Writer(threading.Thread):
    """Changes random live keys: a statement of STATEMENT_ROWS rows every STATEMENT_ROWS / `rate`
    seconds on a fixed schedule (a late statement is written late, not caught up in a burst), for
    `seconds`, then stops by itself. Every row it writes carries the statement's stamp."""

    def __init__(self, source: Source, rows: int, rate: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.source, self.interval = source, STATEMENT_ROWS / rate
        self.statements = int(seconds / self.interval)
        # the keys the table holds, for picking and deleting; key 1 is the warm-up's and the sentinel's
        self.live = array("q", range(2, rows + 1))
        self.next_key = rows + 1
        self.stamps: dict[int, str] = {}  # stamp (microseconds) -> 'u' or 'c', statements with rows to time
        self.changes = {"u": 0, "c": 0, "d": 0}
        self.lag_max = 0.0
        self.began = self.ended = 0.0
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.rnd = random.Random(52)

    @classmethod
    def unpaced(cls, source: Source, rows: int, statements: int) -> Writer:
        """A writer of `statements` statements, each written as soon as the one before it is (no schedule)."""
        writer = cls(source, rows, rate=10**9, seconds=0)
        writer.statements = statements
        return writer

    def pick(self, n: int, remove: bool = False) -> list[int]:
        places = self.rnd.sample(range(len(self.live)), n)
        keys = [self.live[i] for i in places]
        if remove:
            for i in sorted(places, reverse=True):
                self.live[i] = self.live[-1]
                self.live.pop()
        return keys

    def run(self) -> None:
        try:
            with self.source.connect(DATABASE) as conn, conn.cursor() as cur:
                self.began = time.time()
                last = 0
                for i in range(self.statements):
                    if self.stop.is_set():
                        break
                    due, now = self.began + i * self.interval, time.time()
                    if due > now:
                        time.sleep(due - now)
                    else:
                        self.lag_max = max(self.lag_max, now - due)
                    last = stamp = max(last + 1, int(time.time() * 1e6))
                    at = datetime.fromtimestamp(stamp / 1e6, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
                    kind = {INSERT_AT: "c", DELETE_AT: "d"}.get(i % CYCLE, "u")
                    self.changes[kind] += self.write(cur, kind, stamp, at)
                    if kind != "d":
                        self.stamps[stamp] = kind
        except BaseException as exc:  # noqa: BLE001 - reported with the figures
            self.error = exc
        self.ended = time.time()

    def write(self, cur: Any, kind: str, stamp: int, at: str) -> int:
        n = STATEMENT_ROWS
        if kind == "c":
            keys = range(self.next_key, self.next_key + n)
            self.next_key += n
            self.live.extend(keys)
            values = ",".join(f"({k}, 1, {stamp}, 'customer-{k}', {k % 100000 / 100:.2f}, '{at}')"
                              for k in keys)
            return int(cur.execute(f"INSERT INTO {TABLE} VALUES {values}"))
        keys = ",".join(map(str, self.pick(n, remove=kind == "d")))
        if kind == "d":
            return int(cur.execute(f"DELETE FROM {TABLE} WHERE id IN ({keys})"))
        balance = round(self.rnd.uniform(0, 99999), 2)
        return int(cur.execute(f"UPDATE {TABLE} SET visits = visits + 1, balance = %s, changed_us = %s, "
                               f"updated_at = %s WHERE id IN ({keys})", (balance, stamp, at)))


BATCH_LINE = re.compile(r"^(\S+ \S+) INFO binlake\.capture\.micro_batch: batch (\d+): \{[^}]*\} "
                        r"\(binlog read ([\d.]+)s, bronze ([\d.]+)s, silver ([\d.]+)s\)", re.M)
STEP_LINE = re.compile(r"^(\S+ \S+) INFO binlake\.lake\.compaction: \S+: (bronze|silver) compacted, \d+ files into \d+ "
                       r"in ([\d.]+)s", re.M)
TROUBLE = re.compile(r"^.*\b(ERROR|WARN(?:ING)?|Traceback|Exception)\b.*$", re.M)
# the bench's own SIGTERM at the end, which binlake acknowledges with a warning
OWN_STOP = "binlake.stop: SIGTERM"


def _log_time(stamp: str) -> float:
    """A `-v` log line's time (its first two fields), as Unix seconds."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def log_figures(text: str) -> dict[str, Any]:
    """The stream's micro-batches from the `-v` log (how many, time between their ends, each one's bronze
    and silver seconds), and its lines of trouble (errors, warnings, traces)."""
    found = BATCH_LINE.findall(text)
    ends = [_log_time(f[0]) for f in found]
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    silver = [float(f[4]) for f in found]
    bronze = [float(f[3]) for f in found]
    lines = [m.group(0)[:300] for m in TROUBLE.finditer(text) if OWN_STOP not in m.group(0)]
    return {
        "batches": len(found),
        "batch_interval_mean_s": round(sum(gaps) / len(gaps), 2) if gaps else None,
        "batch_interval_max_s": round(max(gaps), 2) if gaps else None,
        "batch_silver_mean_s": round(sum(silver) / len(silver), 3) if silver else None,
        "batch_silver_p99_s": percentile(silver, 0.99),
        "batch_bronze_mean_s": round(sum(bronze) / len(bronze), 3) if bronze else None,
        "log_trouble_lines": len(lines),
        "log_trouble_examples": lines[:5],
    }


def part_figures(text: str, began: float, ended: float, changes: int) -> dict[str, Any]:
    """Where the stream's time went while the writer wrote (from `began` to `ended`, Unix seconds), by
    the `-v` log: the seconds of each micro-batch's binlog read, bronze and silver, and of each
    compaction step by side, per 1M changes. These are the main thread's wall seconds, which is where
    nearly all of the CLI's CPU is spent; a read's include the waits for the server to send. No
    profiler watches the run, so the figures are not distorted by one."""
    seconds = {"binlog_read": 0.0, "bronze": 0.0, "silver": 0.0, "bronze_compaction": 0.0, "silver_compaction": 0.0}
    for stamp, _, read, bronze, silver in BATCH_LINE.findall(text):
        if began <= _log_time(stamp) <= ended:
            seconds["binlog_read"] += float(read)
            seconds["bronze"] += float(bronze)
            seconds["silver"] += float(silver)
    for stamp, side, took in STEP_LINE.findall(text):
        if began <= _log_time(stamp) <= ended:
            seconds[f"{side}_compaction"] += float(took)
    return {"wall_s_per_1m_changes_by_part": {k: round(v * 1e6 / changes, 1) for k, v in seconds.items()}
            if changes else None}


def source_checksum(source: Source) -> list[str]:
    """The source table's row count and the sums of `visits` and `balance`, as `steady_lake.checksum`
    gives silver's (a stamp's sum would pass 2^63 in silver's int64)."""
    with source.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), SUM(visits), SUM(balance) FROM {TABLE}")
        return [str(v or 0) for v in cur.fetchone()]


def latency_figures(writer: Writer, watcher: steady_lake.StampWatcher, warmup_s: int) -> dict[str, Any]:
    """Commit to silver of the statements written after the first `warmup_s` seconds: percentiles (a
    statement never seen counts as infinitely late), and the p99 of their last third over their first."""
    timed = sorted(s for s in writer.stamps if s / 1e6 >= writer.began + warmup_s)

    def latencies(stamps: list[int]) -> list[float]:
        return [watcher.committed[s] - s / 1e6 for s in stamps if s in watcher.committed]
    third = max(1, len(timed) // 3)
    p99_first = percentile(latencies(timed[:third]), 0.99)
    p99_last = percentile(latencies(timed[-third:]), 0.99)
    return {
        "timed_statements": len(timed),
        **summary(latencies(timed), len(timed)),
        "p99_first_third_s": p99_first,
        "p99_last_third_s": p99_last,
        "growth": round(p99_last / p99_first, 3) if p99_first and p99_last is not None else None,
    }


def measure(source: Source, rows: int, name: str) -> dict[str, Any]:
    """One steady run on `source` with a table of `rows` rows, its lake in .binlake/bench/`name`."""
    began = time.monotonic()
    minutes = float(env_int("BENCH_STEADY_MINUTES", 15))
    rate = env_int("BENCH_STEADY_RATE", 2000)
    warmup_s = env_int("BENCH_STEADY_WARMUP_S", 60)
    load_s = create_table(source, rows)
    cfg, lake = write_config(name, source, [rf"{DATABASE}\.{TABLE}"])
    silver, bronze = lake / "silver" / f"{DATABASE}__{TABLE}", lake / "bronze" / f"{DATABASE}__{TABLE}"
    log = WORK / name / "run.log"
    writer = Writer(source, rows, rate, minutes * 60)
    # stamps at or after 1 are the writer's or the warm-up's; the loaded rows carry 0
    watcher = steady_lake.StampWatcher(silver, "changed_us", 1)
    out_file = open(log, "w")
    proc = subprocess.Popen([*BINLAKE, "-v", "run", "-c", str(cfg)], cwd=ROOT, env=cli_env(), stdout=out_file,
                            stderr=subprocess.STDOUT, start_new_session=True)
    started = time.monotonic()

    def landed(stamp: int) -> Any:
        def check() -> bool:
            watcher.poll()
            return stamp in watcher.committed
        return check

    def mark(stamp: int) -> None:
        """A change of one row carrying `stamp`, which only the stream can bring once the snapshot is done."""
        source.execute(f"UPDATE {TABLE} SET changed_us = {stamp} WHERE id = 1", database=DATABASE)

    try:
        with TreeSampler(proc.pid, interval=1.0) as sampler:
            wait_for(lambda: "binlake.capture.stream_loop: streaming from" in log.read_text(errors="replace"),
                     4 * 3600, "the stream's start", proc, log)
            snapshot_s = time.monotonic() - started
            mark(1)
            wait_for(landed(1), 600, "the warm-up change reaching silver", proc, log)
            ready_s = time.monotonic() - started
            silver_before = steady_lake.folder_bytes(silver)[0]
            bronze_before = steady_lake.folder_bytes(bronze)[0]
            cpu_before, server_cpu, split_before = sampler.cpu_s, source.cpu_s(), sampler.cpu_by_kind()
            writer.start()
            while writer.is_alive():
                watcher.poll()
                if proc.poll() is not None:
                    writer.stop.set()
                    raise RuntimeError(f"binlake run exited {proc.returncode} under the writer; log {log}")
                time.sleep(POLL_S)
            if writer.error is not None:
                raise RuntimeError(f"the writer failed: {writer.error!r}")
            # every change before this one is in silver once it is: one binlog, batches in order
            sentinel = int(time.time() * 1e6)
            mark(sentinel)
            wait_for(landed(sentinel), 900, "the stream catching up after the writer stopped", proc, log)
            caught_up_s = time.time() - writer.ended
            cpu_s, server_cpu = sampler.cpu_s - cpu_before, source.cpu_s() - server_cpu
            split = {k: round(v - split_before.get(k, 0.0), 1) for k, v in sampler.cpu_by_kind().items()}
            peak_mb = sampler.peak_mb
        stopped = stop_group(proc, grace=60, leader_first=True)
    finally:
        writer.stop.set()
        if proc.poll() is None:
            stop_group(proc, grace=10)
        out_file.close()

    changes = sum(writer.changes.values())
    run_log = log.read_text(errors="replace")
    ends = {**steady_lake.table_figures(silver, "silver"), **steady_lake.table_figures(bronze, "bronze")}
    scanned = steady_lake.scan_against_compacted(silver, WORK / name / "compacted", "id", "visits")
    verify = run_cli(["verify", "-c", str(cfg)], WORK / name / "verify.log")
    verdict = [line for line in verify.output.splitlines() if line.startswith((f"{DATABASE}.", "verify:"))]
    want, got = source_checksum(source), steady_lake.checksum(silver, ["visits", "balance"])
    equal = verify.returncode == 0 and want == got
    kept = os.environ.get("BENCH_STEADY_KEEP_LAKE", "") not in ("", "0")
    if not kept:
        shutil.rmtree(lake)  # with every file its MERGEs left behind: gigabytes after a full run
    return {
        "server": source.version(),
        "table": f"{DATABASE}.{TABLE} (BIGINT key, INT, BIGINT, VARCHAR(32), DECIMAL(12,2), DATETIME(6))",
        "rows": rows,
        "writer_rate_rows_per_s": rate,
        "writer_minutes": minutes,
        "warmup_s": warmup_s,
        "changes": changes,
        "changes_by_kind": writer.changes,
        "writer_max_schedule_lag_s": round(writer.lag_max, 3),
        "table_load_s": round(load_s, 1),
        "snapshot_s": round(snapshot_s, 1),
        "run_ready_s": round(ready_s, 1),
        **latency_figures(writer, watcher, warmup_s),
        "caught_up_s": round(caught_up_s, 1),
        "cpu_s": round(cpu_s, 1),
        "cpu_s_per_1m_changes": round(cpu_s * 1e6 / changes, 1) if changes else None,
        "cpu_s_by_process": split,  # the CLI's Python, the JVM, Spark's Python workers
        "server_cpu_s_per_1m_changes": round(server_cpu * 1e6 / changes, 1) if changes else None,
        "peak_rss_mb": peak_mb,
        **ends,
        "silver_folder_growth_bytes": ends["silver_folder_bytes"] - silver_before,
        "bronze_folder_growth_bytes": ends["bronze_folder_bytes"] - bronze_before,
        "silver_growth_bytes_per_change": round((ends["silver_folder_bytes"] - silver_before) / changes, 1)
        if changes else None,
        "bronze_growth_bytes_per_change": round((ends["bronze_folder_bytes"] - bronze_before) / changes, 1)
        if changes else None,
        **scanned,
        "verify_ok": verify.returncode == 0,
        "verify_s": round(verify.wall_s, 1),
        "verify_output": verdict or verify.output.strip().splitlines()[-3:],
        "source_checksum": want,
        "silver_checksum": got,
        "silver_differs": 0 if equal else 1,
        "lake_kept": kept,
        "watcher_rows_read": watcher.rows_read,
        "watcher_read_s": round(watcher.read_s, 1),
        **log_figures(run_log),
        **part_figures(run_log, writer.began, writer.ended, changes),
        "stop": stopped,
        "section_s": round(time.monotonic() - began, 1),
    }


def run(source: Source) -> dict[str, Any]:
    """The section on `source`, at BENCH_STEADY_ROWS (5,000,000)."""
    return measure(source, env_int("BENCH_STEADY_ROWS", 5_000_000), f"steady{source.key}")


def run_large(source: Source, base: dict[str, Any] | None) -> dict[str, Any]:
    """The run at BENCH_STEADY_LARGE_ROWS (20,000,000), with its p99 over `base`'s (the first run's)."""
    out = measure(source, env_int("BENCH_STEADY_LARGE_ROWS", 20_000_000), f"steady-large{source.key}")
    if base and base.get("p99_s") and out.get("p99_s") is not None:
        out["base_rows"] = base["rows"]
        out["p99_ratio_to_base"] = round(out["p99_s"] / base["p99_s"], 3)
    return out


def large_wanted() -> bool:
    """Whether BENCH_STEADY_LARGE asks for the run at BENCH_STEADY_LARGE_ROWS too."""
    return os.environ.get("BENCH_STEADY_LARGE", "") not in ("", "0")
