"""Invisible and generated columns (virtual and stored) through the snapshot and the stream.

A `SELECT *` leaves out invisible columns, and a virtual column has no stored value: silver must
hold every column the source shows by name, with the values a SELECT of those names returns,
whether the row came from a chunk read or from the binlog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .capture import connect, run_once, silver, write_config
from .helpers import seq

COLUMNS = ["id", "a", "v", "s", "hidden"]


def _source(port: int, database: str) -> list[tuple[Any, ...]]:
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(COLUMNS)} FROM g ORDER BY id")
        return [tuple(r) for r in cur.fetchall()]


def test_invisible_and_generated_columns_reach_silver(dev_db: Any, database: str, spark: Any, tmp_path: Path) -> None:
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE g (id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL, s INT AS (a * 3) STORED, "
                    "hidden INT INVISIBLE DEFAULT 7)")
        cur.execute(f"INSERT INTO g (id, a) SELECT seq, seq FROM {seq(1, 60)}")
        cur.execute("UPDATE g SET hidden = id WHERE id % 2 = 0")
    name = f"{database}.g"
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.g"], tmp_path / "lake", "6160-6164",
                            chunk_size=16, group_size=2)
    cfg = run_once(cfg_path)
    assert sorted(tuple(r) for r in silver(spark, cfg, name).select(*COLUMNS).collect()) == _source(port, database)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO g (id, a, hidden) VALUES (100, 5, 11), (101, 6, NULL)")
        cur.execute("UPDATE g SET a = a + 100 WHERE id % 3 = 0")
        cur.execute("UPDATE g SET hidden = -1 WHERE id % 5 = 0")
        cur.execute("DELETE FROM g WHERE id % 7 = 0")
    run_once(cfg_path)
    assert sorted(tuple(r) for r in silver(spark, cfg, name).select(*COLUMNS).collect()) == _source(port, database)
