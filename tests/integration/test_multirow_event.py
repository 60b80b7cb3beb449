"""kill -9 of the stream in the middle of one multi-row binlog event: a single UPDATE of 50k rows,
written as ONE row event (a server of its own with a large binlog_row_event_max_size; the default
8 KiB cuts a statement into many events). The restart neither loses nor repeats a row."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from binlake.config import load
from binlake.commands.devdb import DevDb
from binlake.capture.run import run
from binlake.source.dialect import binlog_head
from binlake.capture.arrow_batches import BATCH_ROWS
from binlake.lake.target import Target

from .workload import bronze_duplicates, create_table, run_cli, silver_rows, source_rows, write_config

ROWS = 50_000


@pytest.fixture(scope="module")
def one_event_db(dev_db: DevDb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevDb]:
    db = DevDb(datadir=tmp_path_factory.mktemp(f"one-event-db-{dev_db.server}"), server=dev_db.server,
               extra_options=("--binlog-row-event-max-size=268435456",))
    db.start()
    yield db
    db.stop()


def _row_events(db: DevDb, after: tuple[str, int]) -> list[Any]:
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{after[0]}' FROM {after[1]}")
        return [r for r in cur.fetchall() if str(r[2]).startswith("Update_rows")]


@pytest.mark.slow
def test_kill_inside_one_50k_row_event_then_restart(one_event_db: DevDb, spark: Any, tmp_path: Path) -> None:
    db = one_event_db
    port = db.running_port()
    assert port is not None
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE big")
    create_table(port, "big", ROWS)
    cfg_path = write_config(tmp_path / "binlake.yml", port, "big", tmp_path / "lake", chunk_size=10_000, group_size=4)
    cfg = load(cfg_path)
    run(cfg, until_caught_up=True)

    with db.connect("big") as conn, conn.cursor() as cur:
        before = binlog_head(conn)
        cur.execute("UPDATE t SET k = k + 1, note = 'one event'")
    events = _row_events(db, (before.file, before.pos))
    assert len(events) == 1, f"the UPDATE must be a single row event, got {len(events)}"
    assert ROWS > 2 * BATCH_ROWS, "the event must span several of the source's Arrow batches"

    # killed after the source handed Spark the 2nd Arrow batch of the event (rows 8192..16383 of 50k)
    counter = tmp_path / "counter-a"
    env = {"BINLAKE_CRASH_AT": "binlog_batch_handed:2", "BINLAKE_CRASH_COUNTER": str(counter)}
    crashed = run_cli("run", "-c", str(cfg_path), "--until-caught-up", env=env)
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    assert len(counter.read_text().splitlines()) == 2

    target = Target.of(cfg)
    b = target.bronze("big.t").location

    def event_rows() -> Any:
        # nothing else writes to the table: every update in bronze is a row of the one event
        return spark.read.format("delta").load(b).where(F.col("_op") == "u")

    assert event_rows().count() == 0, "a micro-batch lands whole or not at all"

    # killed again once the replayed micro-batch is in bronze, before silver has it
    counter = tmp_path / "counter-b"
    env = {"BINLAKE_CRASH_AT": "mid_stream", "BINLAKE_CRASH_COUNTER": str(counter)}
    crashed = run_cli("run", "-c", str(cfg_path), "--until-caught-up", env=env)
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    landed = event_rows().groupBy("_file", "_pos").count().collect()
    assert [r["count"] for r in landed] == [ROWS], f"{landed}; the event: {events[0]}"

    run(cfg, until_caught_up=True)
    seen = event_rows().agg(F.count("*").alias("n"), F.countDistinct("_seq").alias("seqs"),
                            F.countDistinct("id").alias("ids"), F.min("_seq").alias("lo"),
                            F.max("_seq").alias("hi")).first()
    assert (seen["n"], seen["seqs"], seen["ids"]) == (ROWS, ROWS, ROWS), "each row of the event exactly once"
    assert event_rows().where(F.col("note") != "one event").count() == 0
    # _file and _pos are the event's own start, as the server lists it
    assert [(r["_file"], r["_pos"]) for r in landed] == [(events[0][0], int(events[0][1]))]
    # row slots 1, 3, ..., 2 * 49_999 + 1 of the one event position
    assert int(seen["hi"]) - int(seen["lo"]) == 2 * (ROWS - 1)
    assert bronze_duplicates(spark, b) == 0
    assert silver_rows(spark, target.silver("big.t").location) == source_rows(port, "big")
