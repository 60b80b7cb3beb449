"""Many small tables, read several at once: each table planned whole is read by one of a few workers,
its bronze and silver created by their first write, its chunks' statuses recorded for many tables in
one append. Under a writer changing every table, a run is killed after some tables reached silver and
before their statuses were recorded; the next run ends with every silver equal to its source."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlake.capture.context import Context
from binlake.capture.run import run
from binlake.config import load
from binlake.lake import split_state
from binlake.lake.target import Target

from .helpers import seq
from .workload import bronze_duplicates, run_cli

TABLES = 8
ROWS = 40
COLUMNS = "id, k, v, amount"


def _connect(port: int, database: str) -> Any:
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database, autocommit=True)


class _Writer(threading.Thread):
    """Updates, inserts and deletes across every table until stopped."""

    def __init__(self, port: int, database: str) -> None:
        super().__init__(daemon=True)
        self.port, self.database = port, database
        self.done = threading.Event()
        self.ops = 0

    def run(self) -> None:
        rnd = random.Random(11)
        next_id = ROWS + 1
        with _connect(self.port, self.database) as conn, conn.cursor() as cur:
            while not self.done.is_set():
                t = f"t{rnd.randrange(TABLES)}"
                kind = rnd.random()
                if kind < 0.5:
                    cur.execute(f"UPDATE {t} SET k = k + 1, v = CONCAT(v, '+') WHERE id = %s", (rnd.randrange(1, ROWS),))
                elif kind < 0.8:
                    cur.execute(f"INSERT INTO {t} VALUES (%s, 1, 'new', 1.50)", (next_id,))
                    next_id += 1
                else:
                    cur.execute(f"DELETE FROM {t} WHERE id = %s", (rnd.randrange(1, ROWS),))
                self.ops += 1
                self.done.wait(0.01)


def _source(port: int, database: str, table: str) -> list[tuple[Any, ...]]:
    with _connect(port, database) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {COLUMNS} FROM {table} ORDER BY id")
        return [tuple(r) for r in cur.fetchall()]


@pytest.mark.slow
def test_small_tables_read_at_once_survive_a_kill_before_their_statuses_are_recorded(
        dev_db: Any, database: str, spark: Any, tmp_path: Path) -> None:
    port = dev_db.running_port()
    with _connect(port, database) as conn, conn.cursor() as cur:
        for t in range(TABLES):
            cur.execute(f"CREATE TABLE t{t} (id INT PRIMARY KEY, k INT, v VARCHAR(200), amount DECIMAL(8,2))")
            cur.execute(f"INSERT INTO t{t} SELECT seq, seq % 7, CONCAT('row-', seq), seq / 4 FROM {seq(1, ROWS)}")
    cfg_path = tmp_path / "binlake.yml"
    cfg_path.write_text(
        f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
        f"  tables: ['{database}\\..*']\n  server-id: 5700-5704\n"
        f"target:\n  path: {tmp_path / 'lake'}\n"
        "snapshot:\n  chunk-size: 16\n  group-size: 2\n  parallelism: 2\n"
    )
    counter = tmp_path / "crash-counter"
    writer = _Writer(port, database)
    writer.start()
    try:
        # the fourth table's chunks reach silver; no table's statuses are recorded yet (200 a time)
        crashed = run_cli("run", "-c", str(cfg_path), "--until-caught-up",
                          env={"BINLAKE_CRASH_AT": "after_silver_chunks:4", "BINLAKE_CRASH_COUNTER": str(counter)})
        assert crashed.returncode == -9, crashed.stderr[-2000:]
        target = Target.of(load(cfg_path))
        recorded = split_state.load(spark, target.split_state, 2)
        assert recorded and all(s.status == "planned" for ss in recorded.values() for s in ss)
        in_silver = [t for t in range(TABLES) if (Path(target.silver(f"{database}.t{t}").location) / "_delta_log").is_dir()]
        assert len(in_silver) >= 4, "the tables are read at once: four reached silver before the kill"
    finally:
        writer.done.set()
        writer.join()
    assert writer.ops > 20
    run(load(cfg_path), until_caught_up=True)

    from delta.tables import DeltaTable

    from binlake.lake.bronze import struct as bronze_struct
    from binlake.lake.silver import struct as silver_struct

    ctx = Context(load(cfg_path))

    splits = split_state.load(spark, target.split_state, 2)
    assert sorted(splits) == [f"{database}.t{t}" for t in range(TABLES)]
    by_delta_rs = 0
    for t in range(TABLES):
        name = f"{database}.t{t}"
        assert all(s.status == "done" for s in splits[name]), name
        silver = target.silver(name).location
        got = sorted(tuple(r) for r in spark.read.format("delta").load(silver).select(*COLUMNS.split(", ")).collect())
        assert got == _source(port, database, f"t{t}"), name
        assert bronze_duplicates(spark, target.bronze(name).location) == 0, name
        # small: created by binlake's own first commit, its rows committed by delta-rs, not by a Spark
        # job -- or, resumed after the kill, by Spark: with the snapshot's rows in its first commit, or
        # after binlake's, when the kill came between the table's creation and its rows
        made = {r["version"]: r for r in DeltaTable.forPath(spark, silver).history().collect()}
        first = (made[0]["operation"], made[0]["engineInfo"])
        if first == ("CREATE TABLE", "binlake"):
            resumed = t in in_silver and "Apache-Spark" in made[1]["engineInfo"]
            assert "delta-rs" in made[1]["engineInfo"] or resumed, (name, made[1]["engineInfo"])
            by_delta_rs += not resumed
        else:
            assert first[0] == "WRITE", (name, first)
        # with the columns, types and nullability a table created empty has
        schema = ctx.schemas()[name]
        for location, struct in ((silver, silver_struct(schema)), (target.bronze(name).location, bronze_struct(schema))):
            written = spark.read.format("delta").load(location).schema
            assert [(f.name, f.dataType, f.nullable) for f in written] == \
                [(f.name, f.dataType, f.nullable) for f in struct], location
    assert by_delta_rs >= 4, "the tables read before the kill were committed by delta-rs"
