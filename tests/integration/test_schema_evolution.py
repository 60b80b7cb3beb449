"""Schema changes followed in binlog order with the data: columns added, renamed, retyped and dropped,
TRUNCATE, under each policy of stream.schema-changes, and across a crash in the middle of one."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from binlake.config import Config

from .capture import run_once, silver, with_stream, write_config
from .helpers import execute, fetch


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


def test_evolve_follows_each_column_change_in_binlog_order(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    name = f"{database}.t"
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(10), gone INT)",
            "INSERT INTO t SELECT seq, seq, CONCAT('s', seq), seq FROM seq_1_to_60")
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.t"], tmp_path / "lake", "6320-6324",
                            chunk_size=20, group_size=2)
    cfg = run_once(cfg_path)
    execute(dev_db, database,
            "UPDATE t SET v = v + 1000 WHERE id <= 5",
            "ALTER TABLE t ADD COLUMN w INT NOT NULL DEFAULT 7",  # older rows get 7 in the source
            "INSERT INTO t (id, v, s, gone, w) VALUES (100, 1, 'x', 1, 70)",
            "UPDATE t SET w = 8 WHERE id = 2",
            "ALTER TABLE t RENAME COLUMN s TO label",
            "UPDATE t SET label = 'renamed' WHERE id = 3",
            "ALTER TABLE t MODIFY v BIGINT",
            "UPDATE t SET v = 5000000000 WHERE id = 4",
            "ALTER TABLE t DROP COLUMN gone",
            "DELETE FROM t WHERE id = 5",
            "ALTER TABLE t ADD COLUMN later VARCHAR(5) DEFAULT 'd'")  # no row after it: the statement alone
    run_once(cfg_path)
    names, rows = source_table(dev_db, database, "t")
    assert names == ["id", "v", "label", "w", "later"]
    assert data_columns(spark, cfg, name) == names
    assert lake_table(spark, cfg, name, names) == rows
    assert dict(silver(spark, cfg, name).dtypes)["v"] == "bigint"

    # bronze keeps every row image as it was written, under the columns it had then
    log = spark.read.format("delta").load(str(tmp_path / "lake" / "bronze" / f"{database}__t"))
    assert {"s", "label", "gone", "w"} <= set(log.columns)
    two = log.where("id = 2 AND _op = 'u'").orderBy("_seq").select("s", "label", "w").collect()
    assert [tuple(r) for r in two] == [("s2", None, None), ("s2", None, 8)]  # before and after ADD COLUMN w
    assert log.where("_op = 's'").count() == 5

    # the next run reads on under the newest version, and a replay of it changes nothing
    execute(dev_db, database, "UPDATE t SET later = 'e', w = 9 WHERE id = 6", "INSERT INTO t (id, v) VALUES (101, 2)")
    run_once(cfg_path)
    names, rows = source_table(dev_db, database, "t")
    assert lake_table(spark, cfg, name, names) == rows
