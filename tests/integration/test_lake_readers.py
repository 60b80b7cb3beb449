"""Silver and bronze stay readable by delta-rs (the `deltalake` package, which Polars and many
services read Delta through) after every schema change binlake follows: a column added, renamed,
dropped, widened (integer and decimal), and a change of the primary key. Under the default
`target.type-changes: rewrite` no table keeps Delta's type-widening feature, which delta-rs refuses.
silver, read by delta-rs, equals the source after each change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deltalake
import pyarrow
import pytest

from binlake.config import Config
from binlake.lake.target import Target

from .capture import run_once, write_config
from .helpers import execute, seq

CHANGES = [
    ("add", ["ALTER TABLE rd ADD COLUMN w INT DEFAULT 3", "UPDATE rd SET w = 7 WHERE id = 1"]),
    ("rename", ["ALTER TABLE rd RENAME COLUMN s TO label", "UPDATE rd SET label = 'renamed' WHERE id = 2"]),
    ("drop", ["ALTER TABLE rd DROP COLUMN w", "UPDATE rd SET label = 'dropped' WHERE id = 3"]),
    ("widen int", ["ALTER TABLE rd MODIFY v BIGINT", "INSERT INTO rd (id, v, label, d) VALUES (100, 5000000000, 'big', 1.25)"]),
    ("widen decimal", ["ALTER TABLE rd MODIFY d DECIMAL(12,2)", "UPDATE rd SET d = 1234567890.12 WHERE id = 4"]),
    ("key", ["ALTER TABLE rd DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)", "INSERT INTO rd (id, v, label, d) VALUES (100, 6, 'key', 2.5)",
             "DELETE FROM rd WHERE id = 5"]),
]


def _source(dev_db: Any, database: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM rd ORDER BY id, v")
        return [d[0] for d in cur.description], [tuple(r) for r in cur.fetchall()]


def _read(location: str) -> pyarrow.Table:
    """The table as delta-rs reads it (its SQL engine: its plain reader refuses deletion vectors)."""
    table = deltalake.DeltaTable(location)
    return pyarrow.table(deltalake.QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())


def _features(location: str) -> set[str]:
    protocol = deltalake.DeltaTable(location).protocol()
    return set(protocol.reader_features or []) | set(protocol.writer_features or [])


def _check(cfg: Config, dev_db: Any, database: str, step: str) -> None:
    target = Target.of(cfg)
    name = f"{database}.rd"
    columns, rows = _source(dev_db, database)
    for location in (target.silver(name).location, target.bronze(name).location):
        assert "typeWidening" not in _features(location), (step, location)
    silver = _read(target.silver(name).location).select(columns).to_pylist()
    got = sorted((tuple(r[c] for c in columns) for r in silver), key=lambda r: (r[0], r[1]))
    assert got == rows, step
    bronze = _read(target.bronze(name).location)
    assert set(columns) <= set(bronze.column_names), (step, bronze.column_names)
    types = {f.name: f.type for f in bronze.schema}
    if step.startswith("widen int"):
        assert types["v"] == pyarrow.int64(), types
    if step.startswith("widen decimal"):
        assert types["d"] == pyarrow.decimal128(12, 2), types


@pytest.mark.slow  # two minutes a server; what it checks is the lake side, which no server changes
def test_delta_rs_reads_silver_and_bronze_after_each_schema_change(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    execute(dev_db, database, "CREATE TABLE rd (id INT PRIMARY KEY, v INT, s VARCHAR(10), d DECIMAL(6,2))",
            f"INSERT INTO rd SELECT seq, seq, CONCAT('s', seq), seq / 4 FROM {seq(1, 40)}")
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.rd"], tmp_path / "lake", "6480-6484",
                            chunk_size=10, group_size=2)
    cfg = run_once(cfg_path)
    _check(cfg, dev_db, database, "snapshot")
    for step, statements in CHANGES:
        execute(dev_db, database, *statements)
        cfg = run_once(cfg_path)
        _check(cfg, dev_db, database, step)
