"""The floor under binlake's figures: what its own Delta writes cost on this machine when the rows are
already in the JVM, with no MariaDB, no Python worker and no binlog.

Run after the snapshot and stream sections, in a fresh JVM of its own. It reads the rows those
sections landed in bronze (the snapshot's `r` rows and the burst's `c`/`u`/`d` changes), caches them,
and times binlake's own write functions on them into new tables:
- snapshot: `bronze.append_chunks` of every snapshot row in one commit, then `silver.insert_snapshot`,
  the better of two attempts into fresh tables (binlake commits per group of 16 chunks, with a JVM as
  cold as the first attempt's, so this is a lower bound on its write time);
- stream: `bronze.append_batch` of every change, then `silver.apply` into that silver, as the stream's
  single batch does;
- micro-batch: the two appends of a batch of BATCH_ROWS inserts (what each latency batch writes: two plain
  appends), averaged over BATCHES batches after WARM_BATCHES.

The best ratio binlake could reach with these writes is the floor's rate over the same run's baseline;
the lowest p99 latency is about two batches (a row waits for the batch running when it commits, then
its own).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import ROOT, WORK, Source, cli_env, rate

DATABASE, TABLE = "bench", "customer"
BATCH_ROWS = 400
WARM_BATCHES, BATCHES = 3, 10
SNAPSHOT_ATTEMPTS = 2


def lake_config() -> Path:
    """The configuration of the lake the stream section streamed into: the snapshot section's, or the
    stream section's own snapshot when it ran without the snapshot section."""
    configs = [WORK / name / "binlake.yml" for name in ("snapshot", "stream-snapshot")]
    streamed = [c for c in configs if (c.parent / "lake" / "_binlake" / "stream.json").is_file()]
    found = max(streamed, key=lambda c: (c.parent / "lake" / "_binlake" / "stream.json").stat().st_mtime,
                default=configs[0])
    if not found.is_file():
        raise RuntimeError(f"the floor section reads the rows the snapshot and stream sections landed, and there is "
                           f"no lake at {found.parent}: run them first (--only snapshot --only stream --only floor)")
    return found


def run(source: Source, results: dict[str, Any]) -> dict[str, Any]:
    began = time.monotonic()
    config = lake_config()
    log = WORK / "floor.log"
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, __file__, str(config), str(source.port)], check=False, cwd=ROOT,
                              env=cli_env(), stdout=subprocess.PIPE, stderr=out, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"the floor measurement exited {proc.returncode}; log {log}")
    f = json.loads(proc.stdout.strip().splitlines()[-1])
    snap_s = f["snapshot_bronze_s"] + f["snapshot_silver_s"]
    out: dict[str, Any] = {
        "session_start_s": f["session_s"],
        "snapshot_rows": f["snapshot_rows"],
        "snapshot_bronze_s": f["snapshot_bronze_s"],
        "snapshot_silver_s": f["snapshot_silver_s"],
        "snapshot_rows_per_s": rate(f["snapshot_rows"], snap_s),
        "stream_changes": f["stream_changes"],
        "stream_bronze_s": f.get("stream_bronze_s"),
        "stream_silver_s": f.get("stream_silver_s"),
        "stream_rows_per_s": (rate(f["stream_changes"], f["stream_bronze_s"] + f["stream_silver_s"])
                              if f["stream_changes"] else None),
        "batch_rows": BATCH_ROWS,
        "batch_s": f["batch_s"],
        "batch_bronze_s": f["batch_bronze_s"],
        "batch_silver_s": f["batch_silver_s"],
        "latency_p99_floor_s": round(2 * f["batch_s"], 2),
        "snapshot_attempts_s": f["snapshot_attempts_s"],
    }
    s, st = results.get("snapshot", {}), results.get("stream", {})
    if s.get("baseline_scan_rows_per_s"):
        out["snapshot_max_ratio"] = round(out["snapshot_rows_per_s"] / s["baseline_scan_rows_per_s"], 4)
        if s.get("in_process_rows_per_s"):
            out["snapshot_binlake_share"] = round(s["in_process_rows_per_s"] / out["snapshot_rows_per_s"], 3)
    if st.get("baseline_decode_rows_per_s") and out["stream_rows_per_s"]:
        out["stream_max_ratio"] = round(out["stream_rows_per_s"] / st["baseline_decode_rows_per_s"], 4)
        if st.get("in_process_rows_per_s"):
            out["stream_binlake_share"] = round(st["in_process_rows_per_s"] / out["stream_rows_per_s"], 3)
    out["section_s"] = round(time.monotonic() - began, 1)
    return out


def measure(config: str, port: str) -> dict[str, Any]:
    """In the child process: time binlake's writes on rows already cached in the JVM."""
    from pyspark.sql import functions as F

    from binlake.lake import bronze, silver
    from binlake.config import load
    from binlake.capture.context import Context

    began = time.monotonic()
    ctx = Context(load(config, [f"source.port={port}"]))  # this run's server, not the one that wrote config
    spark = ctx.session()
    session_s = time.monotonic() - began
    name = f"{DATABASE}.{TABLE}"
    schema = ctx.schemas()[name]
    landed = spark.read.format("delta").load(ctx.target.bronze(name).location)
    rows = landed.where(F.col("_op") == "r").persist()
    n = rows.count()
    changes = landed.where(F.col("_op").isin(*bronze.BINLOG_OPS)).persist()
    m = changes.count()
    root = Path(config).parent / "floor"
    shutil.rmtree(root, ignore_errors=True)
    out: dict[str, Any] = {"session_s": round(session_s, 2), "snapshot_rows": n, "stream_changes": m}

    # twice, into fresh tables: the first pays for the JVM's cold code as binlake's own run does, the
    # faster is the floor
    attempts = []
    for attempt in range(SNAPSHOT_ATTEMPTS):
        b, s = str(root / f"bronze-{attempt}"), str(root / f"silver-{attempt}")
        bronze.ensure_table(spark, b, schema)
        silver.ensure_table(spark, s, schema)
        t = time.monotonic()
        bronze.append_chunks(rows, b, [])
        bronze_s = time.monotonic() - t
        t = time.monotonic()
        silver.insert_snapshot(spark, schema, spark.read.format("delta").load(b).where(F.col("_op") == "r"), s, b)
        attempts.append((round(bronze_s, 2), round(time.monotonic() - t, 2)))
    out["snapshot_bronze_s"], out["snapshot_silver_s"] = min(attempts, key=sum)
    out["snapshot_attempts_s"] = [round(sum(a), 2) for a in attempts]

    if m:
        oldest = changes.agg(F.min("_seq")).first()[0]
        t = time.monotonic()
        bronze.append_batch(changes, b)
        out["stream_bronze_s"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        silver.apply(spark, schema, changes, s, b, oldest=oldest, bronze_may_be_newer=False)
        out["stream_silver_s"] = round(time.monotonic() - t, 2)

    # micro-batches of inserts into small tables, as each batch of the latency section writes them
    lb, ls = str(root / "batch-bronze"), str(root / "batch-silver")
    bronze.ensure_table(spark, lb, schema)
    silver.ensure_table(spark, ls, schema)
    sample = rows.limit(BATCH_ROWS).withColumn("_op", F.lit("c")).persist()
    sample.count()
    key = schema.key[0]
    times = []
    for i in range(WARM_BATCHES + BATCHES):
        batch = (sample.withColumn(key, F.col(key) + F.lit((i + 1) * 100_000_000))
                 .withColumn("_seq", F.col("_seq") + F.lit(i + 1)).persist())
        batch.count()
        t = time.monotonic()
        bronze.append_batch(batch, lb)
        bronze_s = time.monotonic() - t
        t = time.monotonic()
        silver.apply(spark, schema, batch, ls, lb, bronze_may_be_newer=False, inserts_only=True)
        times.append((bronze_s, time.monotonic() - t))
        batch.unpersist()
    measured = times[WARM_BATCHES:]
    out["batch_bronze_s"] = round(sum(x for x, _ in measured) / len(measured), 3)
    out["batch_silver_s"] = round(sum(y for _, y in measured) / len(measured), 3)
    out["batch_s"] = round(out["batch_bronze_s"] + out["batch_silver_s"], 3)
    return out


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])), flush=True)
