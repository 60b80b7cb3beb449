"""Schema changes followed in binlog order with the data: columns added, renamed, retyped and dropped,
TRUNCATE, under each policy of stream.schema-changes, and across a crash in the middle of one."""

from __future__ import annotations

import datetime as dt
import decimal
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from binlake.config import Config
from binlake.errors import SchemaChangedError
from binlake.lake.target import Target

from .capture import run_once, silver, with_stream, write_config
from .helpers import execute, seq
from .test_new_tables import TableWriter
from .test_reconnect import caught_up, running, stop_cleanly, wait_for
from .workload import assert_quiet, bronze_duplicates


def plain(v: Any) -> Any:
    """A source value and its silver value in one comparable form."""
    if isinstance(v, (decimal.Decimal, int)) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=None)
    return v


def source_table(dev_db: Any, database: str, table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}` ORDER BY 1")
        names = [d[0] for d in cur.description]
        return names, [tuple(plain(v) for v in r) for r in cur.fetchall()]


def lake_table(spark: Any, cfg: Config, name: str, columns: list[str]) -> list[tuple[Any, ...]]:
    rows = silver(spark, cfg, name).select(*[F.col(f"`{c}`") for c in columns]).collect()
    return sorted((tuple(plain(v) for v in r) for r in rows), key=lambda r: r[0])


def data_columns(spark: Any, cfg: Config, name: str) -> list[str]:
    return [c for c in silver(spark, cfg, name).columns if not c.startswith("_")]


@pytest.mark.slow
def test_lenient_keeps_what_evolve_drops_ignore_keeps_silver_as_it_was_and_truncate_empties(
        dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    tables = ("le", "ig")
    for t in tables:
        execute(dev_db, database, f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                f"INSERT INTO {t} SELECT seq, seq, CONCAT('s', seq) FROM {seq(1, 30)}")
    execute(dev_db, database, "CREATE TABLE tr (id INT PRIMARY KEY, v INT)", f"INSERT INTO tr SELECT seq, seq FROM {seq(1, 30)}")
    cfgs = {}
    for i, (t, pattern) in enumerate((("le", "(le|tr)"), ("ig", "ig"))):
        cfg_path = with_stream(write_config(tmp_path / f"{t}.yml", port, [f"{database}\\.{pattern}"],
                                            tmp_path / f"lake_{t}", f"{6330 + 5 * i}-{6334 + 5 * i}", chunk_size=20,
                                            group_size=2), schema_changes="lenient" if t == "le" else "ignore")
        cfgs[t] = (cfg_path, run_once(cfg_path))
    for t in tables:
        execute(dev_db, database,
                f"ALTER TABLE {t} RENAME COLUMN s TO label", f"UPDATE {t} SET label = 'new' WHERE id = 1",
                f"ALTER TABLE {t} DROP COLUMN v", f"UPDATE {t} SET label = 'newer' WHERE id = 2",
                f"ALTER TABLE {t} ADD COLUMN w INT DEFAULT 3", f"INSERT INTO {t} (id, label, w) VALUES (31, 'x', 4)")
    execute(dev_db, database, "UPDATE tr SET v = -1 WHERE id = 1", "TRUNCATE tr", "INSERT INTO tr VALUES (7, 70), (40, 400)",
            "UPDATE tr SET v = 71 WHERE id = 7")
    for t in tables:
        run_once(cfgs[t][0])

    # lenient: the old columns stay with the values they had; the renamed column comes in new
    cfg = cfgs["le"][1]
    assert data_columns(spark, cfg, f"{database}.le") == ["id", "v", "s", "label", "w"]
    got = {r[0]: r for r in lake_table(spark, cfg, f"{database}.le", ["id", "v", "s", "label", "w"])}
    assert got[1] == (1, 1, None, "new", 3)  # rewritten after the rename, before the drop
    assert got[2] == (2, None, None, "newer", 3)  # rewritten after both
    assert got[5] == (5, 5, "s5", None, 3)  # untouched: what it had, and w's default
    assert got[31] == (31, None, None, "x", 4)
    _, source = source_table(dev_db, database, "le")
    assert lake_table(spark, cfg, f"{database}.le", ["id", "label", "w"]) == \
        [(i, label if i in (1, 2, 31) else None, w) for i, label, w in source]

    # ignore: silver keeps id, v, s; the values the source still has under those names
    cfg = cfgs["ig"][1]
    assert data_columns(spark, cfg, f"{database}.ig") == ["id", "v", "s"]
    got = {r[0]: r for r in lake_table(spark, cfg, f"{database}.ig", ["id", "v", "s"])}
    assert got[1] == (1, 1, None) and got[2] == (2, None, None)
    assert got[5] == (5, 5, "s5") and got[31] == (31, None, None)
    assert sorted(got) == [r[0] for r in source_table(dev_db, database, "ig")[1]]

    # ignore: a wider type would not fit the column silver keeps; binlake stops with the truth
    execute(dev_db, database, "ALTER TABLE ig MODIFY id BIGINT", "UPDATE ig SET w = 1")
    with pytest.raises(SchemaChangedError, match="column 'id' of captured table .* is now bigint"):
        run_once(cfgs["ig"][0])

    # TRUNCATE (lenient and evolve alike): silver holds exactly what was written after it
    names, rows = source_table(dev_db, database, "tr")
    assert lake_table(spark, cfgs["le"][1], f"{database}.tr", names) == rows == [(7, 71), (40, 400)]


@pytest.mark.slow
def test_columns_change_while_a_continuous_run_streams_through_a_crash(dev_db, database, spark, tmp_path: Path,
                                                                      monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The acceptance case: add, rename, retype and drop columns while a continuous `binlake run`
    streams and a writer races it; the run is killed inside the first change (bronze written, silver
    not yet altered) and started again. Silver equals the source row by row, bronze holds no row twice."""
    port = dev_db.running_port()
    name = f"{database}.t"
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(10), gone INT)",
            f"INSERT INTO t SELECT seq, seq, CONCAT('s', seq), seq FROM {seq(1, 300)}")
    lake = tmp_path / "lake"
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.t"], lake, "6340-6344", chunk_size=50,
                            group_size=2)
    cfg = run_once(cfg_path)
    target = Target.of(cfg)
    writer = TableWriter(port, database, "t")
    writer.start()
    try:
        monkeypatch.setenv("BINLAKE_CRASH_AT", "mid_evolve")
        monkeypatch.setenv("BINLAKE_CRASH_COUNTER", str(tmp_path / "crashes"))
        with running(cfg_path, "--set", "stream.trigger-seconds=1") as run:
            time.sleep(2)
            execute(dev_db, database, "ALTER TABLE t ADD COLUMN w INT NOT NULL", "UPDATE t SET w = 6 WHERE id < 20")
            run.wait(timeout=600)
        assert run.returncode == -9 and "mid_evolve" in (tmp_path / "crashes").read_text()
        monkeypatch.delenv("BINLAKE_CRASH_AT")
        with running(cfg_path, "--set", "stream.trigger-seconds=1") as run:
            execute(dev_db, database, "ALTER TABLE t RENAME COLUMN s TO label", "UPDATE t SET label = 'r' WHERE id < 30")
            time.sleep(2)
            execute(dev_db, database, "ALTER TABLE t MODIFY v BIGINT", "UPDATE t SET v = v + 5000000000 WHERE id < 10")
            execute(dev_db, database, "ALTER TABLE t DROP COLUMN gone", "UPDATE t SET w = 7 WHERE id BETWEEN 20 AND 40")
            time.sleep(3)
            writer.stop()
            # no row after it: the statement alone says what changed; older rows get the default
            execute(dev_db, database, "ALTER TABLE t ADD COLUMN later VARCHAR(5) DEFAULT 'd'")
            wait_for("the stream to reach the head", caught_up(dev_db, target.checkpoint), run)
            err = stop_cleanly(run)
    finally:
        writer.stop()
    assert writer.ops > 100
    assert "schema changed" in err, err[-3000:]
    assert_quiet(err)  # designed events, not crashes
    names, rows = source_table(dev_db, database, "t")
    assert names == ["id", "v", "label", "w", "later"] == data_columns(spark, cfg, name)
    assert lake_table(spark, cfg, name, names) == rows
    assert dict(silver(spark, cfg, name).dtypes)["v"] == "bigint"
    # bronze: each row image as written -- no w before the ADD COLUMN, label only after the rename
    log = spark.read.format("delta").load(target.bronze(name).location)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
    marks = [r["_seq"] for r in log.where("_op = 's'").orderBy("_seq").collect()]
    assert len(marks) == 5
    images = log.where("_op IN ('c', 'u')")
    assert images.where(F.col("_seq") < marks[0]).where("w IS NOT NULL").count() == 0
    assert images.where(F.col("_seq") > marks[0]).where("w IS NULL").count() == 0
    assert images.where(F.col("_seq") < marks[1]).where("label IS NOT NULL").count() == 0
    assert images.where(F.col("_seq") > marks[1]).where("s IS NOT NULL").count() == 0
