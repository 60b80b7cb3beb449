"""Many small tables: `binlake run --until-caught-up` over BENCH_TABLES tables (default 1,000) of
BENCH_TABLE_ROWS rows (default 100) and 5 columns, while one writer changes them, on each server.

A MySQL estate is hundreds to thousands of mostly small tables, so what a table costs by itself
(planning, its Delta tables, its snapshot's jobs and commits) matters more there than rows per second.
The baseline, taken in the same run on the same server, is reading every table whole on one
connection (`SELECT *` each, mysqlclient): what the rows cost without binlake. After the timed run,
the writer stops and a second `run --until-caught-up` streams what it wrote meanwhile; then every
silver table is compared with its source table (delta-rs reads silver), and the count that differ is
reported: 0 is the only good figure. Last, `binlake status --json` is timed as an operator runs it (a
process of its own, the source up) over those tables, and each table's `rows` in its report is compared
with the source's count: 0 differing is again the only good figure.
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import harness
from harness import ROOT, WORK, rate, run_cli

DATABASE = "many"
COLUMNS = "id INT NOT NULL PRIMARY KEY, qty INT, name VARCHAR(40), at DATETIME(3), price DECIMAL(12,2)"


def create_tables(source: harness.Source, tables: int, rows: int) -> float:
    began = time.monotonic()
    source.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`", f"CREATE DATABASE `{DATABASE}`")
    with source.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")  # the snapshot reads the tables, not their history
        for t in range(tables):
            cur.execute(f"CREATE TABLE t{t:05d} ({COLUMNS})")
            values = ",".join(f"({i},{i * 7 % 1000},'name {t}-{i}','2024-01-{1 + i % 28:02d} 10:00:00.{i % 1000:03d}',"
                              f"{i * 13 % 100000 / 100:.2f})" for i in range(1, rows + 1))
            cur.execute(f"INSERT INTO t{t:05d} VALUES {values}")
    return time.monotonic() - began


class Writer(threading.Thread):
    """One client changing random tables (an update, an insert or a delete per transaction) until stopped."""

    def __init__(self, source: harness.Source, tables: int, rows: int, per_second: float = 20.0) -> None:
        super().__init__(daemon=True)
        self.source, self.tables, self.rows, self.pause = source, tables, rows, 1.0 / per_second
        self.done = threading.Event()
        self.count = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rnd = random.Random(7)
        next_id = self.rows + 1
        try:
            with self.source.connect(DATABASE) as conn, conn.cursor() as cur:
                while not self.done.is_set():
                    t = f"t{rnd.randrange(self.tables):05d}"
                    kind = rnd.random()
                    if kind < 0.6:
                        cur.execute(f"UPDATE {t} SET qty = qty + 1, at = NOW(3) WHERE id = %s",
                                    (rnd.randrange(1, self.rows + 1),))
                    elif kind < 0.9:
                        cur.execute(f"INSERT INTO {t} VALUES (%s, 1, 'new', NOW(3), 9.99)", (next_id,))
                        next_id += 1
                    else:
                        cur.execute(f"DELETE FROM {t} WHERE id = %s", (rnd.randrange(1, self.rows + 1),))
                    self.count += 1
                    self.done.wait(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported with the figures
            self.error = exc


def scan_all(source: harness.Source, tables: int) -> tuple[int, float]:
    import MySQLdb

    conn = MySQLdb.connect(host="127.0.0.1", port=source.port, user="root", passwd="", db=DATABASE,
                           charset="utf8mb4")
    try:
        began = time.monotonic()
        n = 0
        cur = conn.cursor()
        for t in range(tables):
            cur.execute(f"SELECT * FROM t{t:05d}")
            n += len(cur.fetchall())
        return n, time.monotonic() - began
    finally:
        conn.close()


def differing(source: harness.Source, lake: Any, tables: int) -> list[str]:
    """The tables whose silver differs from the source (rows compared as text, key by key)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    bad = []
    with source.connect(DATABASE) as conn, conn.cursor() as cur:
        for t in range(tables):
            name = f"t{t:05d}"
            cur.execute(f"SELECT id, qty, name, DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f'), price FROM {name}")
            want = {int(r[0]): (r[1], r[2], str(r[3]), str(r[4])) for r in cur.fetchall()}
            table = DeltaTable(str(lake / "silver" / f"{DATABASE}__{name}"))
            # the query engine reads deletion vectors and column mapping, which to_pyarrow_table refuses
            silver = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all()).to_pylist()
            got = {int(r["id"]): (r["qty"], r["name"], r["at"].strftime("%Y-%m-%d %H:%M:%S.%f") if r["at"] else None,
                                  str(r["price"]) if r["price"] is not None else None) for r in silver}
            if got != want:
                bad.append(name)
    return bad


def source_counts(source: harness.Source, tables: int) -> dict[str, int]:
    """Each table's rows, by `binlake status`'s name for it."""
    with source.connect(DATABASE) as conn, conn.cursor() as cur:
        counts = {}
        for t in range(tables):
            cur.execute(f"SELECT COUNT(*) FROM t{t:05d}")
            counts[f"{DATABASE}.t{t:05d}"] = int(cur.fetchone()[0])
        return counts


def timed_status(cfg: Path, log: Path) -> tuple[float, dict[str, Any]]:
    """`binlake status --json`, in a process of its own as an operator runs it: its seconds and its report."""
    began = time.monotonic()
    done = subprocess.run([*harness.BINLAKE, "status", "--json", "-c", str(cfg)], cwd=ROOT, env=harness.cli_env(),
                          capture_output=True, text=True, timeout=3600, check=False)
    took = time.monotonic() - began
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"binlake status --json exited {done.returncode}; log {log}:\n{tail}")
    return took, json.loads(done.stdout)


def measure(server: str, tables: int, rows: int) -> dict[str, Any]:
    source = harness.start_source(server, "bench-many")
    try:
        load_s = create_tables(source, tables, rows)
        n, scan_s = scan_all(source, tables)
        cfg, lake = harness.write_config(f"many-{server}", source, [rf"{DATABASE}\..*"])
        writer = Writer(source, tables, rows)
        writer.start()
        try:
            run = run_cli(["run", "--until-caught-up", "-c", str(cfg)], WORK / f"many-{server}" / "run.log",
                          timeout=4 * 3600).check()
        finally:
            writer.done.set()
            writer.join()
        if writer.error is not None:
            raise RuntimeError(f"the writer failed: {writer.error}")
        catch_up = run_cli(["run", "--until-caught-up", "-c", str(cfg)], WORK / f"many-{server}" / "catchup.log").check()
        bad = differing(source, lake, tables)
        status_s, report = timed_status(cfg, WORK / f"many-{server}" / "status.log")
        counted = {t["source"]: t["rows"] for t in report["tables"]}
        miscounted = sorted(n for n, c in source_counts(source, tables).items() if counted.get(n) != c)
        return {
            "server": source.version(),
            "tables": tables,
            "rows_per_table": rows,
            "table_load_s": round(load_s, 1),
            "baseline_scan_s": round(scan_s, 2),
            "baseline_rows": n,
            "run_s": round(run.wall_s, 1),
            "seconds_per_table": round(run.wall_s / tables, 3),
            "ratio_to_scan": round(scan_s / run.wall_s, 5),
            "rows_per_s": rate(n, run.wall_s),
            "writer_changes": writer.count,
            "catch_up_s": round(catch_up.wall_s, 1),
            "peak_rss_mb": run.peak_rss_mb,
            "silver_tables_differing": len(bad),
            "differing_examples": bad[:5],
            "status_s": round(status_s, 1),
            "status_rows_differing": len(miscounted),
            "status_differing_examples": miscounted[:5],
        }
    finally:
        harness.stop_source(source)


def run(tables: int, rows: int, servers: tuple[str, ...] = ("mariadb", "mysql")) -> dict[str, Any]:
    began = time.monotonic()
    out: dict[str, Any] = {}
    for server in servers:
        out[server] = measure(server, tables, rows)
        out[f"{server}_run_s"] = out[server]["run_s"]
        out[f"{server}_seconds_per_table"] = out[server]["seconds_per_table"]
        out[f"{server}_status_s"] = out[server]["status_s"]
    out["silver_tables_differing"] = sum(out[s]["silver_tables_differing"] for s in servers)
    out["status_rows_differing"] = sum(out[s]["status_rows_differing"] for s in servers)
    out["section_s"] = round(time.monotonic() - began, 1)
    return out
