"""Identifiers that need quoting: reserved words, spaces, backticks and non-ASCII in database, table
and column names, through the snapshot and the binlog, into bronze and silver under the same names."""

from __future__ import annotations

import re
from pathlib import Path

from pyspark.sql import functions as F

from .capture import connect, run_once, silver, write_config
from .helpers import seq

COLUMNS = ["select", "two words", "ünï", "a`b", "group"]


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def test_odd_identifiers_end_to_end(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    db = f"{database} ö-sp"
    table = "order`s tbl"
    with connect(port) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {q(db)}")
        try:
            cur.execute(
                f"CREATE TABLE {q(db)}.{q(table)} ({q('select')} INT PRIMARY KEY, {q('two words')} VARCHAR(20), "
                f"{q('ünï')} INT, {q('a`b')} VARCHAR(5), {q('group')} DATE) CHARACTER SET utf8mb4"
            )
            cur.execute(f"INSERT INTO {q(db)}.{q(table)} SELECT seq, CONCAT('w ', seq), seq * 3, 'x', "
                        f"'2024-01-01' + INTERVAL seq DAY FROM {seq(1, 60)}")
            name = f"{db}.{table}"
            cfg_path = write_config(tmp_path / "binlake.yml", port, [re.escape(name)], tmp_path / "lake", "6130-6134",
                                    chunk_size=10, group_size=3)
            cfg = run_once(cfg_path)
            cur.execute(f"UPDATE {q(db)}.{q(table)} SET {q('two words')} = 'changed', {q('ünï')} = -1 "
                        f"WHERE {q('select')} % 4 = 0")
            cur.execute(f"DELETE FROM {q(db)}.{q(table)} WHERE {q('select')} % 9 = 0")
            cur.execute(f"UPDATE {q(db)}.{q(table)} SET {q('select')} = {q('select')} + 1000 WHERE {q('select')} = 5")
            cur.execute(f"INSERT INTO {q(db)}.{q(table)} VALUES (500, 'new', 1, 'y', NULL)")
            run_once(cfg_path)
            cur.execute(f"SELECT {', '.join(q(c) for c in COLUMNS)} FROM {q(db)}.{q(table)}")
            source = sorted(tuple(r) for r in cur.fetchall())
            df = silver(spark, cfg, name)
            assert [c for c in df.columns if not c.startswith("_")] == COLUMNS
            lake = sorted(tuple(r) for r in df.select(*[F.col(q(c)) for c in COLUMNS]).collect())
            assert lake == source
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS {q(db)}")
