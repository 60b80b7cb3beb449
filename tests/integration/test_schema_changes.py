"""Schema changes of captured tables under stream.schema-changes: fail: the pipeline stops with the
truth before writing any row under the wrong columns, and lets harmless DDL (an index, a table it does
not capture) pass. A chunk read stops at any change between its watermarks; on MariaDB none can land
there."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.source.chunk_reader import Hooks, read_chunk
from binlake.errors import RuntimeFailure, SchemaChangedError
from binlake.source.catalog import load_schema
from binlake.source.connection import connect as source_connect
from binlake.splits import Split

from .capture import connect, run_once, silver, with_stream, write_config
from .helpers import execute, params, seq


def _rows(port: int, database: str) -> list[tuple[int, int]]:
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t ORDER BY id")
        return [tuple(r) for r in cur.fetchall()]


def test_stream_stops_at_a_change_it_cannot_apply_and_passes_harmless_ddl(dev_db, database, spark,
                                                                             tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    name = f"{database}.t"
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "CREATE TABLE other (id INT PRIMARY KEY)",
            f"INSERT INTO t SELECT seq, seq FROM {seq(1, 50)}")
    cfg_path = with_stream(write_config(tmp_path / "binlake.yml", port, [f"{database}\\.t"], tmp_path / "lake",
                                        "6310-6314", chunk_size=20, group_size=4), schema_changes="fail")
    cfg = run_once(cfg_path)

    # harmless: an index on the captured table, any DDL on a table that is not captured
    execute(dev_db, database, "ALTER TABLE t ADD INDEX by_v (v)", "UPDATE t SET v = v + 100 WHERE id <= 10",
            "ALTER TABLE other ADD COLUMN x INT", "TRUNCATE other", "INSERT INTO t VALUES (51, 51)")
    run_once(cfg_path)
    lake = sorted(tuple(r) for r in silver(spark, cfg, name).select("id", "v").collect())
    assert lake == _rows(port, database)

    # a column added: the run fails naming the table and the change, and writes nothing past it
    before = lake
    execute(dev_db, database, "UPDATE t SET v = -1 WHERE id = 1", "ALTER TABLE t ADD COLUMN w INT DEFAULT 7",
            "INSERT INTO t (id, v) VALUES (52, 52)")
    with pytest.raises(RuntimeFailure) as failed:
        run_once(cfg_path)
    assert f"captured table {name} changed at binlog" in str(failed.value)
    assert "after ALTER TABLE" in str(failed.value) and f"binlake resnapshot {name}" in str(failed.value)
    assert sorted(tuple(r) for r in silver(spark, cfg, name).select("id", "v").collect()) == before
    with pytest.raises(RuntimeFailure):  # and again on restart: it never skips past the change
        run_once(cfg_path)


def test_a_change_undone_before_the_stream_reads_it_is_still_caught_by_the_row_events(
        dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", f"INSERT INTO t SELECT seq, seq FROM {seq(1, 30)}")
    cfg_path = with_stream(write_config(tmp_path / "binlake.yml", port, [f"{database}\\.t"], tmp_path / "lake",
                                        "6315-6319", chunk_size=20, group_size=4), schema_changes="fail")
    cfg = run_once(cfg_path)
    # while binlake is stopped: rows written with a column that is gone again by the time it reads them
    execute(dev_db, database, "ALTER TABLE t ADD COLUMN w INT", "UPDATE t SET w = id, v = 0 WHERE id < 5",
            "ALTER TABLE t DROP COLUMN w")
    with pytest.raises(RuntimeFailure, match="columns added: w"):
        run_once(cfg_path)
    # evolve types w from the rows' table map (the server has no w to ask), then drops it again
    run_once(with_stream(cfg_path, schema_changes="evolve"))
    assert sorted(tuple(r) for r in silver(spark, cfg, f"{database}.t").select("id", "v").collect()) == \
        _rows(port, database)
    assert "w" not in silver(spark, cfg, f"{database}.t").columns


def test_truncate_between_the_watermarks_of_a_chunk_stops_the_chunk_read(dev_db, database) -> None:  # type: ignore[no-untyped-def]
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", f"INSERT INTO t SELECT seq, seq FROM {seq(1, 30)}")
    p = params(dev_db)
    conn = source_connect(p)
    schema = load_schema(conn, database, "t")
    split = Split(f"{database}.t", 0, 0, None, None)
    # the SELECT (on MariaDB its consistent-snapshot transaction too) has ended before the hook runs,
    # so the TRUNCATE lands between the watermarks on both servers
    hooks = Hooks(after_select=lambda: execute(dev_db, database, "TRUNCATE t", "INSERT INTO t VALUES (1, 1)"))
    with pytest.raises(SchemaChangedError, match="TRUNCATE TABLE emptied it"):
        read_chunk(p, schema, split, server_id=6309, hooks=hooks)
    hooks = Hooks(after_low_watermark=lambda: execute(dev_db, database, "ALTER TABLE t MODIFY v BIGINT",
                                                      "UPDATE t SET v = 5000000000 WHERE id = 1"))
    with pytest.raises(SchemaChangedError, match="after ALTER TABLE"):
        read_chunk(p, schema, split, server_id=6309, hooks=hooks)
    hooks = Hooks(after_select=lambda: execute(dev_db, database, f"DROP DATABASE `{database}`"))
    with pytest.raises(SchemaChangedError, match="DROP DATABASE removed it"):
        read_chunk(p, schema, split, server_id=6309, hooks=hooks)
