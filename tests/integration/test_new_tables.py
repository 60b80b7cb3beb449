"""Tables that come to match source.tables: one created while a continuous `binlake run` streams (the
micro-batch that meets its CREATE is replayed with the table captured, its rows then read beside the
stream), and an existing table added to the config (snapshotted beside the stream, with no plan for it
or a second one for the others)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest
from pyspark.sql import functions as F

from binlake.config import load
from binlake.errors import NewTableError
from binlake.capture import side_state
from binlake.capture.context import Context
from binlake.capture.stream import capture_new_tables, stream
from binlake.lake import split_state as state
from binlake.lake.checkpoint import committed_offset
from binlake.lake.target import Target

from .capture import run_once, silver, write_config
from .helpers import execute, fetch, seq
from .test_reconnect import caught_up, running, stop_cleanly, wait_for
from .workload import assert_quiet


class TableWriter(threading.Thread):
    """Inserts, updates and deletes rows of one table until stopped."""

    def __init__(self, port: int, database: str, table: str) -> None:
        super().__init__(daemon=True)
        self.port, self.database, self.table = port, database, table
        self.stop_flag = threading.Event()
        self.ops = 0

    def run(self) -> None:
        rnd = random.Random(7)
        with pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", database=self.database,
                             autocommit=True) as conn, conn.cursor() as cur:
            while not self.stop_flag.is_set():
                key = rnd.randint(1, 400)
                op = rnd.random()
                if op < 0.5:
                    cur.execute(f"INSERT INTO {self.table} (id, v) VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = v + 1",
                                (key, self.ops))
                elif op < 0.8:
                    cur.execute(f"UPDATE {self.table} SET v = v + 7 WHERE id BETWEEN %s AND %s", (key, key + 5))
                else:
                    cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (key,))
                self.ops += 1
                time.sleep(0.01)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=30)


def rows(dev_db: Any, database: str, table: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in fetch(dev_db, database, f"SELECT id, v FROM {table}"))


def lake_rows(spark: Any, cfg: Any, name: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in silver(spark, cfg, name).select("id", "v").collect())


@pytest.mark.slow
def test_a_table_created_while_streaming_and_one_added_to_the_config(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    execute(dev_db, database, "CREATE TABLE t1 (id INT PRIMARY KEY, v INT)", f"INSERT INTO t1 SELECT seq, seq FROM {seq(1, 40)}",
            "CREATE TABLE extra (id INT PRIMARY KEY, v INT)", f"INSERT INTO extra SELECT seq, seq FROM {seq(1, 30)}")
    lake = tmp_path / "lake"
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.(t1|n_.*)"], lake, "6170-6174",
                            chunk_size=10, group_size=2)
    cfg = run_once(cfg_path)
    target = Target.of(cfg)
    before = committed_offset(target.checkpoint)

    with running(cfg_path, "--set", "stream.trigger-seconds=1") as run:
        execute(dev_db, database, "UPDATE t1 SET v = -1 WHERE id = 1")
        wait_for("a micro-batch of the running stream", lambda: committed_offset(target.checkpoint) != before, run)
        # created while the stream runs, written to before and while it is snapshotted
        execute(dev_db, database, "CREATE TABLE n_1 (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO n_1 SELECT seq, seq FROM {seq(1, 200)}", "UPDATE t1 SET v = -2 WHERE id = 2")
        writer = TableWriter(port, database, "n_1")
        writer.start()
        try:
            new_silver = Path(target.silver(f"{database}.n_1").location) / "_delta_log"
            wait_for("the new table's silver", new_silver.is_dir, run)
            time.sleep(3)
        finally:
            writer.stop()
        assert writer.ops > 50
        execute(dev_db, database, "CREATE TABLE n_gone (id INT PRIMARY KEY)", "INSERT INTO n_gone VALUES (1)",
                "DROP TABLE n_gone")  # matched, and gone again by the time the stream looks: nothing to capture
        wait_for("the stream to reach the head", caught_up(dev_db, target.checkpoint), run)
        wait_for("the new table's snapshot beside the stream", lambda: getattr(
            side_state.states(target.side_snapshots).get(f"{database}.n_1"), "status", None) == "done", run)
        err = stop_cleanly(run)
    assert "capturing new tables" in err and f"{database}.n_1" in err, err[-3000:]
    assert_quiet(err)  # a designed event, not a crash
    assert lake_rows(spark, cfg, f"{database}.n_1") == rows(dev_db, database, "n_1")
    assert lake_rows(spark, cfg, f"{database}.t1") == rows(dev_db, database, "t1")
    assert not (lake / "silver" / f"{database}__n_gone").exists()

    # created while streaming: snapshotted beside the stream, which passed its changes before; none planned
    beside = side_state.states(target.side_snapshots)[f"{database}.n_1"]
    assert beside.reason == "created while streaming" and beside.fresh and beside.chunks >= 20, beside
    assert f"{database}.n_1" not in state.load(spark, target.split_state, 2)

    # an existing table added to the config: snapshotted beside the stream; t1 and n_1 are not planned again
    planned = spark.read.format("delta").load(target.split_state).where(F.col("status") == "planned")
    counts = {r["table"]: r["count"] for r in planned.groupBy("table").count().collect()}
    execute(dev_db, database, "UPDATE t1 SET v = -3 WHERE id = 3", "UPDATE extra SET v = -4 WHERE id = 4")
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.(t1|n_.*|extra)"], lake, "6170-6174",
                            chunk_size=10, group_size=2)
    stream(load(cfg_path), until_caught_up=True)  # caught up once its snapshot beside the stream is done
    cfg = run_once(cfg_path)
    planned = spark.read.format("delta").load(target.split_state).where(F.col("status") == "planned")
    after = {r["table"]: r["count"] for r in planned.groupBy("table").count().collect()}
    assert after == counts
    extra = side_state.states(target.side_snapshots)[f"{database}.extra"]
    assert extra.status == "done" and extra.chunks == 3 and extra.rows == 30, extra
    for table in ("t1", "n_1", "extra"):
        assert lake_rows(spark, cfg, f"{database}.{table}") == rows(dev_db, database, table), table


def test_a_new_table_gone_again_before_it_is_captured_is_passed_once(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The guard saw the table on the server, but it was dropped before the stream could list it:
    the stream replays (where the guard now finds it missing); the same table met twice is an error."""
    execute(dev_db, database, "CREATE TABLE t1 (id INT PRIMARY KEY)")
    cfg = load(write_config(tmp_path / "binlake.yml", dev_db.running_port(), [f"{database}\\.(t1|n_.*)"],
                            tmp_path / "lake", "6175-6179"))
    ctx = Context(cfg)
    assert list(ctx.schemas()) == [f"{database}.t1"]
    gone = NewTableError(f"table {database}.n_gone was created at binlog mysql-bin.000001:4 and matches source.tables")
    capture_new_tables(ctx, gone)  # nothing new on the server: no plan, no snapshot, no session
    assert ctx.spark is None
    with pytest.raises(NewTableError, match="n_gone"):
        capture_new_tables(ctx, gone)
