"""binlake's benchmark: `make bench`, or `python bench/run.py [--only SECTION ...]`.

Sections, each measured against a baseline taken in the same run:
  snapshot  `binlake snapshot` of a TPC-DS customer table vs one raw SELECT * (mysqlclient, the server's
            own client), on MariaDB and on MySQL (`snapshot-mysql`, with its ratio to MariaDB's); on
            MariaDB also on a standalone Spark cluster of two executors (`cluster_*`, next to `local[2]`)
  stream    `binlake stream --until-caught-up` over a burst of changes vs the server's `mysqlbinlog -v`,
            on both servers
  latency   commit-to-silver latency under a steady writer while `binlake run` streams, at
            BENCH_LATENCY_RATE (200 rows/s: `latency`) and BENCH_LATENCY_HIGH_RATE (2,000: `latency-high`),
            on both servers
  floor     binlake's own Delta writes of the snapshot's rows and the stream's changes, already in the JVM:
            the best rate (and latency) these writes allow here, against the same baselines
  memory    peak RSS of the snapshot at 1x and 5x rows
  peer      Flink CDC's MySQL source on the same table, when it can run here
  many-tables  `binlake run --until-caught-up` over many small tables with one writer, on MariaDB and
            MySQL, vs one connection reading every table (bench/many_tables.py)
  steady    a lake left running: `binlake run` on a 5M-row table under 2,000 changed rows/s for 15 minutes,
            on both servers: latency and its growth, CPU per 1M changes, files and disk bytes, silver's scan
            against a compacted copy, silver equal to the source (bench/steady.py)
  beside    a 1M-row table snapshotted again by a signal, then one made by CREATE TABLE ... AS SELECT, while
            another table takes 2,000 changed rows/s: its p99 in each window against a baseline window, on
            both servers (bench/beside.py)

Sizes: BENCH_ROWS (default 1,000,000), BENCH_STREAM_CHANGES (500,000), BENCH_MEMORY_ROWS (the memory
section's small size, default BENCH_ROWS), BENCH_LATENCY_RATE (200 rows/s), BENCH_LATENCY_SECONDS (60),
BENCH_TABLES (1,000) and BENCH_TABLE_ROWS (100) for many-tables, BENCH_MANY_SERVERS (mariadb,mysql),
BENCH_SERVERS (mariadb,mysql) for snapshot, stream, latency and steady; BENCH_STEADY_ROWS (5,000,000),
BENCH_STEADY_MINUTES (15), BENCH_STEADY_RATE (2,000 rows/s), BENCH_STEADY_WARMUP_S (60) and
BENCH_STEADY_LARGE=1 (a second MariaDB run at BENCH_STEADY_LARGE_ROWS, 20,000,000) for steady.
Writes bench/results/latest.json, report.md and chart.png, or into the folder BENCH_RESULTS, so that a run
at another size keeps the default run's. A run of some sections replaces those sections in latest.json and
keeps the others (each section records when it was measured). MySQL's figures are the sections named with
`-mysql`. At BENCH_ROWS of 5,000,000 or more the bar against Flink CDC is 6x, not 4x.
The benchmark uses its own servers in .binlake/bench-mariadb and .binlake/bench-mysql and stops them
at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import beside  # noqa: E402
import floor  # noqa: E402
import harness  # noqa: E402
import latency  # noqa: E402
import many_tables  # noqa: E402
import memory  # noqa: E402
import peer  # noqa: E402
import report  # noqa: E402
import snapshot  # noqa: E402
import steady  # noqa: E402
import stream  # noqa: E402

SECTIONS = ("snapshot", "stream", "floor", "latency", "memory", "peer", "many-tables", "steady", "beside")
# sections measured on each of BENCH_SERVERS; the others on MariaDB alone
ON_EACH_SERVER = ("snapshot", "stream", "latency", "steady", "beside")


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=harness.ROOT, capture_output=True, text=True).stdout.strip()
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    return git("rev-parse", "--short", "HEAD") + dirty


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run this section (repeatable)")
    parser.add_argument("--report-only", action="store_true",
                        help="redraw report.md and chart.png from latest.json without measuring")
    args = parser.parse_args(argv)
    if args.report_only:
        latest = harness.RESULTS / "latest.json"
        results = json.loads(latest.read_text())
        results["targets"] = report.check_targets(results)
        write_outputs(results)
        return 0
    wanted = list(args.only or SECTIONS)
    rows = harness.env_int("BENCH_ROWS", 1_000_000)
    harness.RESULTS.mkdir(parents=True, exist_ok=True)
    latest = harness.RESULTS / "latest.json"
    results: dict[str, Any] = json.loads(latest.read_text()) if args.only and latest.exists() else {}

    began = time.monotonic()
    servers = [x for x in os.environ.get("BENCH_SERVERS", "mariadb,mysql").split(",") if x]
    print(f"bench: {', '.join(wanted)} at BENCH_ROWS={rows:,} on {', '.join(servers)}", flush=True)
    sources: dict[str, harness.Source] = {}

    def source_of(server: str) -> harness.Source:
        if server not in sources:
            sources[server] = harness.start_source(server)
        return sources[server]

    meta = {
        "started": now(), "rows": rows, "sections": wanted, "servers": servers, "cpus": os.cpu_count(),
        "memory_gb": round(__import__("psutil").virtual_memory().total / 2**30, 1),
        "load_at_start": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "python": platform.python_version(), "commit": commit(),
    }
    snap_runs: dict[str, snapshot.SnapshotRun] = {}
    this_run: dict[str, Any] = {}  # the figures measured in this run: MySQL's ratios are to these
    try:
        for name in wanted:
            for server in (servers if name in ON_EACH_SERVER else ["mariadb"]):
                this_run.update(measure(name, source_of(server), rows, results, this_run, snap_runs))
                results.update(this_run)
        meta["versions"] = {server: source.version() for server, source in sources.items()}
    finally:
        for source in sources.values():
            harness.stop_source(source)
    meta.update(finished=now(), duration_s=round(time.monotonic() - began, 1),
                load_at_end=" ".join(f"{x:.1f}" for x in os.getloadavg()))
    results["meta"] = meta
    results["targets"] = report.check_targets(results)
    write_outputs(results)
    return 0


def measure(name: str, source: harness.Source, rows: int, results: dict[str, Any], this_run: dict[str, Any],
            snap_runs: dict[str, snapshot.SnapshotRun]) -> dict[str, dict[str, Any]]:
    """One section on one server: its figures by their key in the results (`snapshot`, `snapshot-mysql`;
    the latency section gives `latency` and `latency-high`)."""
    if name == "latency":
        return {**measured("latency" + source.key,
                           lambda: latency.run(source, harness.env_int("BENCH_LATENCY_RATE", 200)), rows),
                **measured("latency-high" + source.key,
                           lambda: latency.run(source, harness.env_int("BENCH_LATENCY_HIGH_RATE", 2000)), rows)}
    if name == "steady":
        out = measured("steady" + source.key, lambda: steady.run(source), rows)
        if source.server == "mariadb" and steady.large_wanted():
            out.update(measured("steady-large", lambda: steady.run_large(source, out["steady"]), rows))
        return out

    def section() -> dict[str, Any]:
        if name == "snapshot":
            out, snap_runs[source.server] = snapshot.run(source, rows, this_run.get("snapshot"))
            return out
        if name == "stream":
            return stream.run(source, rows, snap_runs.get(source.server), this_run.get("stream"))
        if name == "floor":
            return floor.run(source, results)
        if name == "memory":
            mariadb = snap_runs.get("mariadb")
            return memory.run(source, rows, mariadb.figures if mariadb else None)
        if name == "many-tables":
            servers = tuple(os.environ.get("BENCH_MANY_SERVERS", "mariadb,mysql").split(","))
            return many_tables.run(harness.env_int("BENCH_TABLES", 1000), harness.env_int("BENCH_TABLE_ROWS", 100),
                                   servers)
        if name == "beside":
            return beside.run(source)
        return peer.run(source, rows)

    return measured(name + source.key, section, rows)


def measured(key: str, section: Any, rows: int) -> dict[str, dict[str, Any]]:
    """`section()`'s figures under `key`, or the error it failed with."""
    t0 = time.monotonic()
    print(f"bench: {key} ...", flush=True)
    try:
        out = section()
    except Exception as exc:  # one failed section must not lose the others' figures
        traceback.print_exc()
        out = {"error": f"{type(exc).__name__}: {str(exc)[:1500]}"}
    out["measured_at"] = now()
    out["rows_setting"] = rows
    print(f"bench: {key} done in {time.monotonic() - t0:.0f}s: "
          + json.dumps({k: v for k, v in out.items() if not isinstance(v, (list, dict))})[:600], flush=True)
    return {key: out}


def write_outputs(results: dict[str, Any]) -> None:
    latest = harness.RESULTS / "latest.json"
    latest.write_text(json.dumps(results, indent=2) + "\n")
    chart = harness.RESULTS / "chart.png"
    try:
        drawn = report.draw_chart(results, chart)
    except Exception:
        traceback.print_exc()
        drawn = False
    report.write_report(results, harness.RESULTS / "report.md", chart.name if drawn else None)
    print(f"bench: wrote {latest}, {harness.RESULTS / 'report.md'}" + (f", {chart}" if drawn else ""))
    for t in results["targets"]:
        verdict = "n/a" if t["pass"] is None else ("PASS" if t["pass"] else "FAIL")
        print(f"  {t['figure']:<16} {str(t['value']):>10}  target {t['target']:<7} {verdict}")


if __name__ == "__main__":
    sys.exit(main())
