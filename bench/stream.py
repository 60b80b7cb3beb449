"""Stream throughput: a burst of row changes written while binlake is stopped, then
`binlake stream --until-caught-up`, against the server's own `mysqlbinlog -v` (`mariadb-binlog -v` on
MariaDB) decoding the same binlog bytes; on each server.

The burst starts in a fresh binlog file (FLUSH BINARY LOGS) and consists of three multi-row statements
(an UPDATE, a DELETE and an INSERT ... SELECT) plus single-row updates, inserts and deletes, so the
table keeps its size. The baseline reads the binlog files in the server's data directory between the
positions before and after the burst.
"""

from __future__ import annotations

import random
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import decode
from harness import WORK, Source, customer_select, env_int, rate, run_cli
from snapshot import DATABASE, TABLE, SnapshotRun, measure_snapshot

SINGLES = 1000  # single-row statements: half updates, a quarter inserts, a quarter deletes


def burst(source: Source, rows: int, changes: int) -> dict[str, Any]:
    """Write about `changes` row changes to bench.customer; returns the statements' counts and the
    binlog range they occupy."""
    multi = max(changes - SINGLES, 0)
    deletes = inserts = multi // 5
    updates = min(multi - deletes - inserts, rows - deletes - SINGLES // 4)
    if updates <= 0:
        raise RuntimeError(f"BENCH_ROWS {rows} is too small for a burst of {changes} changes")
    source.execute("FLUSH BINARY LOGS")
    start = source.position()
    began = time.monotonic()
    counts = source.execute(
        f"UPDATE {TABLE} SET c_birth_year = c_birth_year + 1, c_last_review_date_sk = c_last_review_date_sk + 1, "
        f"c_preferred_cust_flag = IF(c_preferred_cust_flag = 'Y', 'N', 'Y') WHERE c_customer_sk <= {updates}",
        f"DELETE FROM {TABLE} WHERE c_customer_sk > {rows - deletes}",
        f"INSERT INTO {TABLE} {customer_select(f'(seq + {rows + SINGLES})', source.numbers(inserts))}",
        database=DATABASE,
    )
    rnd = random.Random(7)
    singles = []
    next_key = rows + SINGLES + inserts
    live_low, live_high = updates + 1, rows - deletes  # keys untouched by the multi-row statements
    victims = rnd.sample(range(live_low, live_high + 1), SINGLES // 4)
    for i in range(SINGLES):
        if i % 4 in (0, 1):
            key = rnd.randint(1, updates)
            singles.append(f"UPDATE {TABLE} SET c_email_address = 'changed.{i}@example.com' WHERE c_customer_sk = {key}")
        elif i % 4 == 2:
            next_key += 1
            singles.append(f"INSERT INTO {TABLE} {customer_select(str(next_key), source.numbers(1))}")
        else:
            singles.append(f"DELETE FROM {TABLE} WHERE c_customer_sk = {victims.pop()}")
    counts += source.execute(*singles, database=DATABASE)
    stop = source.position()
    return {
        "changes": sum(counts),
        "multi_row_statements": {"update": counts[0], "delete": counts[1], "insert": counts[2]},
        "single_row_statements": SINGLES,
        "write_s": round(time.monotonic() - began, 1),
        "binlog_start": list(start),
        "binlog_stop": list(stop),
    }


def binlog_files(source: Source, start: str, stop: str) -> list[str]:
    """The binlog files from `start` to `stop` inclusive, in numeric order of their suffix."""
    data = source.db.data_path
    names = [line.strip().split("/")[-1] for line in (data / "mysql-bin.index").read_text().splitlines() if line.strip()]
    def num(n: str) -> int:
        return int(n.rsplit(".", 1)[1])
    return [str(data / n) for n in names if num(start) <= num(n) <= num(stop)]


def decode_command(source: Source, start: tuple[str, int], stop: tuple[str, int]) -> list[str]:
    return [*source.tool("mysqlbinlog"), "-v", f"--start-position={start[1]}", f"--stop-position={stop[1]}",
            *binlog_files(source, start[0], stop[0])]


def baseline(source: Source, start: tuple[str, int], stop: tuple[str, int]) -> dict[str, Any]:
    """The server's `mysqlbinlog -v` over the burst: best of two timed runs into /dev/null, rows counted
    by a third."""
    cmd = decode_command(source, start, stop)
    times = []
    for _ in range(2):
        began = time.monotonic()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        times.append(time.monotonic() - began)
    counted = subprocess.run(
        " ".join(cmd) + " | grep -c -E '^### (INSERT INTO|UPDATE|DELETE FROM) '",
        shell=True, capture_output=True, text=True, check=True,
    )
    rows = int(counted.stdout.strip())
    size = sum(Path(f).stat().st_size for f in binlog_files(source, start[0], stop[0]))
    return {"baseline_rows": rows, "baseline_s": round(min(times), 2),
            "baseline_decode_rows_per_s": rate(rows, min(times)),
            "binlog_bytes": size if start[0] != stop[0] else stop[1] - start[1]}


STAMP = r"^(\S+ \S+) INFO "
# the stream's start: Spark's query (py4j's callback server, started as foreachBatch is registered), or
# the loop a local lake streams with (binlake.capture.stream_loop)
QUERY_START = re.compile(STAMP + r"(?:py4j\.java_gateway: Callback Server Starting|binlake\.capture\.stream_loop: "
                         r"streaming from)", re.M)
BATCH_END = re.compile(STAMP + r"binlake\.capture\.micro_batch: batch \d+:", re.M)


def in_process_seconds(text: str) -> float | None:
    """From the stream's start to the last micro-batch's log line: the stream without JVM start and
    state loading."""
    start, ends = QUERY_START.findall(text), BATCH_END.findall(text)
    if not start or not ends:
        return None
    def t(stamp: str) -> float:
        return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return round(t(ends[-1]) - t(start[0]), 2)


def streamed_rows(snap: SnapshotRun) -> int:
    import json

    progress = snap.lake / "_binlake" / "stream.json"
    if not progress.exists():
        return 0
    tables = json.loads(progress.read_text()).get("tables", {})
    return sum(int(t.get("rows", 0)) for t in tables.values())


def run(source: Source, rows: int, snap: SnapshotRun | None, mariadb: dict[str, Any] | None = None) -> dict[str, Any]:
    """The section on `source`; on MySQL also its rate against `mariadb`'s figures of the same run."""
    began = time.monotonic()
    changes = env_int("BENCH_STREAM_CHANGES", 500_000)
    prepared_by = "the snapshot section's lake"
    if snap is None:
        snap = measure_snapshot(source, DATABASE, rows, f"stream-snapshot{source.key}")
        prepared_by = f"a snapshot of its own ({snap.figures['wall_s']} s)"
    written = burst(source, rows, changes)
    server_cpu = source.cpu_s()
    result = run_cli(["stream", "-c", str(snap.config), "--until-caught-up"], WORK / f"stream{source.key}.log").check()
    server_cpu = source.cpu_s() - server_cpu
    seen = streamed_rows(snap)
    inproc = in_process_seconds(result.output)
    base = baseline(source, tuple(written["binlog_start"]), tuple(written["binlog_stop"]))  # type: ignore[arg-type]
    decoded = decode.run(source, DATABASE, TABLE, tuple(written["binlog_start"]), tuple(written["binlog_stop"]),  # type: ignore[arg-type]
                         base["baseline_decode_rows_per_s"])
    n = written["changes"]
    out: dict[str, Any] = {
        "server": source.version(),
        "table_rows": rows,
        "prepared_by": prepared_by,
        **written,
        "binlake_rows_streamed": seen,
        "wall_s": round(result.wall_s, 2),
        "rows_per_s": rate(n, result.wall_s),
        "in_process_s": inproc,
        "in_process_rows_per_s": rate(n, inproc) if inproc else None,
        "batches": len(BATCH_END.findall(result.output)),
        **base,
        **decoded,
        "ratio": round(rate(n, result.wall_s) / base["baseline_decode_rows_per_s"], 4),
        "ratio_in_process": round(rate(n, inproc) / base["baseline_decode_rows_per_s"], 4) if inproc else None,
        "peak_rss_mb": result.peak_rss_mb,
        "peak_rss_parts_mb": result.peak_rss_parts,
        "peak_pss_mb": result.peak_pss_mb,
        "cpu_s": result.cpu_s,
        "cpu_s_per_1m_rows": round(result.cpu_s * 1e6 / n, 1),
        "server_cpu_s": round(server_cpu, 1),
        "section_s": round(time.monotonic() - began, 1),
    }
    if mariadb and mariadb.get("rows_per_s") and mariadb.get("changes") == n:
        out["ratio_to_mariadb"] = round(out["rows_per_s"] / mariadb["rows_per_s"], 4)
    if seen != n:
        out["note"] = f"binlake's stream progress counts {seen} rows, the burst wrote {n}"
    return out
