"""Table sizes: planning that interleaves with reading and resumes after a crash, and the open last
chunk that grows while the snapshot runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymysql
import pytest
from pyspark.sql import functions as F

from binlake.capture import plan as plan_step
from binlake.config import load
from binlake.capture.plan import plan
from binlake.capture.run import run
from binlake.capture.snapshot import snapshot
from binlake.lake import split_state as state
from binlake.lake.target import Target

from .helpers import seq
from .workload import TailInserter, Writers, bronze_duplicates, create_table, run_cli, silver_rows, source_rows, write_config


def _status_rows(spark: Any, path: str, status: str) -> Any:
    return spark.read.format("delta").load(path).where(F.col("status") == status)


@pytest.mark.slow
def test_planning_interleaves_with_reading_and_resumes_after_kill(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """kill -9 after the third stored batch of planning: the groups of the first two batches were
    read by then (reading started before planning ended); the restart plans on from the first chunk
    not stored, and every chunk has exactly one planned row, with bounds that chain."""
    port = dev_db.running_port()
    rows = 1600
    create_table(port, database, rows)
    # a batch of four chunks is one group: each is read as soon as it is stored
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=100, group_size=4)
    cfg = load(cfg_path)
    target = Target.of(cfg)
    name = f"{database}.t"
    env = {"BINLAKE_PLAN_BATCH": "4", "BINLAKE_CRASH_AT": "mid_plan:3",
           "BINLAKE_CRASH_COUNTER": str(tmp_path / "crash-counter")}
    # fresh keys land past the max key, in the open last chunk, cut again at chunk-size when read:
    # a slow writer keeps that tail to a few chunks
    with Writers(port, database, rows, threads=1, pause=0.05) as writers:
        crashed = run_cli("-v", "run", "-c", str(cfg_path), "--until-caught-up", env=env)
        assert crashed.returncode == -9, crashed.stderr[-2000:]

        planned = sorted(int(r["chunk"]) for r in _status_rows(spark, target.split_state, "planned").collect())
        landed = {int(r["chunk"]) for r in _status_rows(spark, target.split_state, "landed").collect()}
        assert planned == list(range(12)), "three batches of four chunks were stored before the kill"
        assert landed == set(range(8)), "the first two batches were read while planning went on"

        env.pop("BINLAKE_CRASH_AT")
        resumed = run_cli("-v", "run", "-c", str(cfg_path), "--until-caught-up", env=env)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert writers.ops > 50, "the writer must have raced planning and reading"
    assert f"planning {name} resumes at chunk 12" in resumed.stderr
    run(cfg, until_caught_up=True)  # what the writer wrote after that run

    # a chunk has one planned row, or two when it was the open last chunk and was cut again before
    # its read (the open row, then the same index with a bound end): never two bound rows
    per_chunk = (_status_rows(spark, target.split_state, "planned").groupBy("chunk")
                 .agg(F.count("*").alias("rows"), F.sum(F.col("end").isNull().cast("int")).alias("open"))
                 .where("rows > 1 AND NOT (rows = 2 AND open = 1)").collect())
    assert per_chunk == [], f"chunks planned twice: {per_chunk}"
    splits = state.load(spark, target.split_state, 4)[name]
    assert [s.index for s in splits] == list(range(len(splits))) and len(splits) > 12
    assert splits[0].start is None and splits[-1].end is None
    assert all(a.end == b.start for a, b in zip(splits, splits[1:])), "bounds must chain without gap or overlap"
    assert all(s.status == "done" for s in splits)
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0


def test_run_reads_groups_before_planning_ends(dev_db, database, spark, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Without a crash: the first chunk lands before the last batch of splits is planned."""
    port = dev_db.running_port()
    create_table(port, database, 1200)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=100, group_size=4)
    monkeypatch.setattr(plan_step, "PLAN_BATCH", 8)  # two batches: 8 splits, then 5
    cfg = load(cfg_path)
    run(cfg, until_caught_up=True)
    target = Target.of(cfg)
    times = spark.read.format("delta").load(target.split_state).groupBy("status").agg(
        F.min("updated_at").alias("first"), F.max("updated_at").alias("last")).collect()
    by = {r["status"]: r for r in times}
    assert by["landed"]["first"] < by["planned"]["last"], "reading must start before planning ends"
    assert silver_rows(spark, target.silver(f"{database}.t").location) == source_rows(port, database)


def test_open_last_chunk_growing_during_the_snapshot_is_read_in_pieces(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    rows, chunk = 2000, 200
    create_table(port, database, rows)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=chunk, group_size=4)
    cfg = load(cfg_path)
    target = Target.of(cfg)
    name = f"{database}.t"
    plan(cfg)
    planned = state.load(spark, target.split_state, 4)[name]
    open_index = planned[-1].index
    assert planned[-1].end is None
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                         autocommit=True) as conn, conn.cursor() as cur:
        # the open last chunk grows to 16x chunk-size before the snapshot starts ...
        cur.execute(f"INSERT INTO t SELECT seq, seq % 97, CONCAT('late-', seq), seq / 7, NOW(6), NULL "
                    f"FROM {seq(rows + 1, rows + 3000)}")
    inserter = TailInserter(port, database, rows + 3001)
    inserter.start()  # ... and keeps growing while it runs
    try:
        snapshot(cfg)
    finally:
        inserter.stop()
    assert inserter.inserted > 0
    run(cfg, until_caught_up=True)  # hand over: the stream carries the rows inserted after the tail was read

    splits = state.load(spark, target.split_state, 4)[name]
    assert len(splits) > len(planned) + 10, "the tail must have been cut into chunk-size pieces"
    assert splits[open_index].end is not None, "the once open last chunk now has a bound end"
    sizes = [s.rows or 0 for s in splits]
    assert max(sizes) <= 3 * chunk, f"a tail piece held {max(sizes)} rows; chunk-size is {chunk}"
    assert sum(sizes) >= rows + 3000
    assert all(a.end == b.start for a, b in zip(splits, splits[1:]))
    assert all(s.status == "done" for s in splits)
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
