"""Snapshots beside the stream: what a table's snapshot taken while `binlake run` streams costs the other
tables. One table (`account`, BENCH_BESIDE_HOT_ROWS rows) is changed at BENCH_BESIDE_RATE rows a second
(2,000: bench/steady.py's writer, 20-key statements) for the whole section, while:
  1. nothing else happens, for BENCH_BESIDE_BASE_S seconds after a warm-up: the baseline;
  2. a 1M-row table (`big`, BENCH_BESIDE_ROWS) is snapshotted again by a signal (`binlake signal
     execute-snapshot`), until its snapshot beside the stream is done;
  3. `CREATE TABLE copy ... AS SELECT * FROM big` makes a new captured table of as many rows, until its
     silver holds them all.
Figures: `account`'s commit-to-silver p99 in each window and the ratio of 2's and 3's to 1's (the
target: within 1.5x), how long 2 and 3 took, and `binlake verify` over all three tables at the end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import steady
import steady_lake
from harness import BINLAKE, ROOT, WORK, Source, cli_env, env_int, run_cli, stop_group, write_config
from latency import percentile, wait_for

DATABASE, HOT, BIG, COPY = steady.DATABASE, steady.TABLE, "big", "copy"


def _p99(writer: steady.Writer, watcher: steady_lake.StampWatcher, began: float, ended: float) -> dict[str, Any]:
    """The p99 (and count) of the commit-to-silver latency of the statements written in [began, ended)."""
    stamps = [s for s in writer.stamps if began <= s / 1e6 < ended]
    late = [watcher.committed[s] - s / 1e6 if s in watcher.committed else float("inf") for s in stamps]
    return {"statements": len(stamps), "p50_s": percentile(late, 0.5), "p99_s": percentile(late, 0.99)}


def _rows(location: Path) -> int:
    from binlake.lake.table_log import Snapshot

    if not (location / "_delta_log").is_dir():
        return 0
    snapshot = Snapshot.read(location)
    return sum(snapshot.num_records(p) for p in snapshot.files)


def run(source: Source) -> dict[str, Any]:
    began = time.monotonic()
    rows, hot_rows = env_int("BENCH_BESIDE_ROWS", 1_000_000), env_int("BENCH_BESIDE_HOT_ROWS", 200_000)
    rate, base_s, warmup_s = env_int("BENCH_BESIDE_RATE", 2000), env_int("BENCH_BESIDE_BASE_S", 120), 30
    steady.create_table(source, hot_rows)
    steady.create_table(source, rows, BIG, fresh=False)
    name = f"beside{source.key}"
    cfg, lake = write_config(name, source, [rf"{DATABASE}\.({HOT}|{BIG}|{COPY})"])
    hot_silver = lake / "silver" / f"{DATABASE}__{HOT}"
    state = lake / "_binlake" / "snapshots" / f"{DATABASE}__{BIG}.json"
    log = WORK / name / "run.log"
    writer = steady.Writer(source, hot_rows, rate, 4 * 3600)
    watcher = steady_lake.StampWatcher(hot_silver, "changed_us", 1)
    out_file = open(log, "w")
    proc = subprocess.Popen([*BINLAKE, "-v", "run", "-c", str(cfg)], cwd=ROOT, env=cli_env(), stdout=out_file,
                            stderr=subprocess.STDOUT, start_new_session=True)

    def watching(done: Any, timeout: float, what: str) -> float:
        """Poll the watcher until `done()`; the seconds it took."""
        t0 = time.monotonic()

        def check() -> bool:
            watcher.poll()
            return bool(done())
        wait_for(check, timeout, what, proc, log)
        return time.monotonic() - t0

    try:
        wait_for(lambda: "binlake.capture.stream_loop: streaming from" in log.read_text(errors="replace"), 3600,
                 "the stream's start", proc, log)
        writer.start()
        wait_for(lambda: writer.began > 0, 60, "the writer's start", proc, log)
        watching(lambda: time.time() > writer.began + warmup_s + base_s, base_s + warmup_s + 60, "the baseline")
        windows = {"base": (writer.began + warmup_s, time.time())}
        signalled = time.time()
        sent = run_cli(["signal", "-c", str(cfg), "execute-snapshot", f"{DATABASE}.{BIG}"], WORK / name / "signal.log")
        if sent.returncode != 0:
            raise RuntimeError(f"binlake signal failed: {sent.output[-500:]}")
        snapshot_s = watching(lambda: state.exists() and json.loads(state.read_text()).get("status") == "done",
                              3600, "the snapshot beside the stream")
        windows["during_snapshot"] = (signalled, time.time())
        landed = json.loads(state.read_text())
        created = time.time()
        source.execute(f"CREATE TABLE {COPY} (PRIMARY KEY (id)) AS SELECT * FROM {BIG}", database=DATABASE)
        copy_s = watching(lambda: _rows(lake / "silver" / f"{DATABASE}__{COPY}") >= rows, 3600,
                          "the created table's rows in silver")
        windows["during_created_table"] = (created, time.time())
        writer.stop.set()
        writer.join()
        sentinel = int(time.time() * 1e6)
        source.execute(f"UPDATE {HOT} SET changed_us = {sentinel} WHERE id = 1", database=DATABASE)
        watching(lambda: sentinel in watcher.committed, 900, "the stream catching up")
        stopped = stop_group(proc, grace=60, leader_first=True)
    finally:
        writer.stop.set()
        if proc.poll() is None:
            stop_group(proc, grace=10)
        out_file.close()
    verify = run_cli(["verify", "-c", str(cfg)], WORK / name / "verify.log")
    shutil.rmtree(lake)  # about 3 GB: the three tables' snapshots and every file their merges left
    # each window's statements, once every one of them has reached silver (or never will)
    base, during, created_p99 = (_p99(writer, watcher, *windows[k]) for k in
                                 ("base", "during_snapshot", "during_created_table"))

    def ratio(window: dict[str, Any]) -> float | None:
        return round(window["p99_s"] / base["p99_s"], 2) if window["p99_s"] and base["p99_s"] else None

    return {
        "server": source.version(),
        "rows": rows, "hot_rows": hot_rows, "writer_rate_rows_per_s": rate,
        "base": base, "during_snapshot": during, "during_created_table": created_p99,
        "p99_ratio_during_snapshot": ratio(during),
        "p99_ratio_during_created_table": ratio(created_p99),
        "snapshot_beside_s": round(snapshot_s, 1),
        "snapshot_beside_rows": landed.get("rows"), "snapshot_beside_chunks": landed.get("chunks"),
        "snapshot_beside_rows_per_s": round(landed.get("rows", 0) / snapshot_s) if snapshot_s else None,
        "created_table_s": round(copy_s, 1),
        "verify_ok": verify.returncode == 0,
        "verify_output": [line for line in verify.output.splitlines() if line.startswith((f"{DATABASE}.", "verify:"))],
        "writer_max_schedule_lag_s": round(writer.lag_max, 3),
        **steady.log_figures(log.read_text(errors="replace")),
        "stop": stopped,
        "section_s": round(time.monotonic() - began, 1),
    }

