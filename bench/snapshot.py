"""Snapshot throughput: `binlake snapshot` of the customer table against one raw `SELECT *`, on each
server (MariaDB, then MySQL: the same rows, the same settings).

The baseline is the fastest C-backed client here: mysqlclient (MySQLdb, unbuffered SSCursor) and the
server's own command-line client (`mariadb -B`, `mysql -B`), each the best of two runs. binlake's
figure is the wall time of the whole CLI process (JVM start, planning, reading, bronze and silver) in
local mode (`local[2]`), and also the pipeline's own in-process snapshot time from its `-v` log;
`cpu_s_per_1m_rows` is the CPU time of binlake's whole process tree (CLI, JVM, Python workers) per
million rows, and `server_cpu_s_per_1m_rows` the server's own during the run.

On MariaDB the same snapshot then runs on a standalone Spark cluster with two executors, under
`spark-submit` (the `cluster_*` figures, bench/snapshot_cluster.py).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import snapshot_cluster
from harness import WORK, Source, create_customer, parse_snapshot_line, rate, run_cli, write_config

DATABASE = "bench"
TABLE = "customer"


@dataclass
class SnapshotRun:
    """A finished snapshot: what the stream section continues from."""

    config: Path
    lake: Path
    rows: int
    figures: dict[str, Any]


def scan_mysqlclient(source: Source, database: str, table: str) -> tuple[int, float]:
    import MySQLdb
    import MySQLdb.cursors

    conn = MySQLdb.connect(host="127.0.0.1", port=source.port, user="root", passwd="", db=database,
                           charset="utf8mb4", cursorclass=MySQLdb.cursors.SSCursor)
    try:
        began = time.monotonic()
        cur = conn.cursor()
        cur.execute(f"SELECT * FROM {table}")
        n = 0
        while True:
            batch = cur.fetchmany(20_000)
            if not batch:
                break
            n += len(batch)
        cur.close()
        return n, time.monotonic() - began
    finally:
        conn.close()


def scan_cli(source: Source, database: str, table: str) -> float:
    began = time.monotonic()
    subprocess.run([*source.tool("mysql"), "-h", "127.0.0.1", "-P", str(source.port), "-u", "root", "-B", "-e",
                    f"SELECT * FROM `{database}`.`{table}`"], stdout=subprocess.DEVNULL, check=True)
    return time.monotonic() - began


def baseline(source: Source, database: str, table: str, rows: int) -> dict[str, Any]:
    """Best of two runs per client; the faster client is the baseline."""
    mc = []
    for _ in range(2):
        n, secs = scan_mysqlclient(source, database, table)
        if n != rows:
            raise RuntimeError(f"mysqlclient read {n} rows of {database}.{table}, expected {rows}")
        mc.append(rate(n, secs))
    cli = [rate(rows, scan_cli(source, database, table)) for _ in range(2)]
    best = max(max(mc), max(cli))
    return {
        "mysqlclient_sscursor_rows_per_s": max(mc),
        "cli_rows_per_s": max(cli),
        "baseline_client": "mysqlclient" if max(mc) >= max(cli) else f"{source.tool('mysql')[-1].rsplit('/', 1)[-1]} -B",
        "baseline_scan_rows_per_s": best,
    }


def measure_snapshot(source: Source, database: str, rows: int, name: str, fresh_table: bool = True) -> SnapshotRun:
    """One `binlake snapshot` of database.customer into a fresh lake (default parallelism)."""
    if fresh_table:
        create_customer(source, database, rows, TABLE)
    cfg, lake = write_config(name, source, [rf"{database}\.{TABLE}"])
    server_cpu = source.cpu_s()
    run = run_cli(["snapshot", "-c", str(cfg)], WORK / name / "snapshot.log").check()
    server_cpu = source.cpu_s() - server_cpu
    inproc = parse_snapshot_line(run.output)
    figures: dict[str, Any] = {
        "rows": rows,
        "wall_s": round(run.wall_s, 2),
        "rows_per_s": rate(rows, run.wall_s),
        "cpu_s": run.cpu_s,
        "cpu_s_per_1m_rows": round(run.cpu_s * 1e6 / rows, 1),
        "server_cpu_s_per_1m_rows": round(server_cpu * 1e6 / rows, 1),
        "peak_rss_mb": run.peak_rss_mb,
        "peak_rss_parts_mb": run.peak_rss_parts,
        "peak_pss_mb": run.peak_pss_mb,
    }
    if inproc:
        if inproc["rows"] != rows:
            raise RuntimeError(f"binlake snapshot reported {inproc['rows']} rows, the table has {rows}")
        figures["in_process_s"] = inproc["seconds"]
        figures["in_process_rows_per_s"] = rate(rows, inproc["seconds"])
        figures["chunks"] = inproc["chunks"]
        figures["outside_snapshot_s"] = round(run.wall_s - inproc["seconds"], 2)
    return SnapshotRun(cfg, lake, rows, figures)


def run(source: Source, rows: int, mariadb: dict[str, Any] | None = None) -> tuple[dict[str, Any], SnapshotRun]:
    """The section on `source`; on MySQL also its rate against `mariadb`'s figures of the same run."""
    began = time.monotonic()
    load_s = create_customer(source, DATABASE, rows, TABLE)
    base = baseline(source, DATABASE, TABLE, rows)
    snap = measure_snapshot(source, DATABASE, rows, f"snapshot{source.key}", fresh_table=False)
    f = snap.figures
    out: dict[str, Any] = {
        "server": source.version(),
        "table": f"{DATABASE}.{TABLE} (TPC-DS customer shape, 18 columns)",
        "rows": rows,
        "parallelism": "default (snapshot.parallelism 2, chunk-size 8096, group-size 16)",
        "table_load_s": round(load_s, 1),
        "rows_per_s": f["rows_per_s"],
        "wall_s": f["wall_s"],
        "in_process_s": f.get("in_process_s"),
        "in_process_rows_per_s": f.get("in_process_rows_per_s"),
        "outside_snapshot_s": f.get("outside_snapshot_s"),
        "chunks": f.get("chunks"),
        "cpu_s": f["cpu_s"],
        "cpu_s_per_1m_rows": f["cpu_s_per_1m_rows"],
        "server_cpu_s_per_1m_rows": f["server_cpu_s_per_1m_rows"],
        **base,
        "ratio": round(f["rows_per_s"] / base["baseline_scan_rows_per_s"], 4),
        "ratio_in_process": (round(f["in_process_rows_per_s"] / base["baseline_scan_rows_per_s"], 4)
                             if "in_process_rows_per_s" in f else None),
        "peak_rss_mb": f["peak_rss_mb"],
        "peak_rss_parts_mb": f["peak_rss_parts_mb"],
        "peak_pss_mb": f["peak_pss_mb"],
    }
    if source.server == "mariadb":
        out.update(snapshot_cluster.run(source, DATABASE, TABLE, rows, out))
    out["section_s"] = round(time.monotonic() - began, 1)
    if mariadb and mariadb.get("rows_per_s") and mariadb.get("rows") == rows:
        out["ratio_to_mariadb"] = round(f["rows_per_s"] / mariadb["rows_per_s"], 4)
    return out, snap
