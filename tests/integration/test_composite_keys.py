"""A composite primary key of mixed types whose first column has one value for all 100k rows.

Planning must still cut chunks of about `chunk-size` rows (a split on the first column alone would
be one chunk of 100k rows), and each boundary query and chunk SELECT must read about that many
index entries: the expanded predicate `a > ? OR (a = ? AND (b > ? OR (b = ? AND c >= ?)))` has to
be a range on the primary key, which the executed plan shows (rows actually read: `r_rows` of
MariaDB's `ANALYZE FORMAT=JSON`, `actual_rows` of MySQL's `EXPLAIN ANALYZE FORMAT=JSON`).
Writers race the snapshot; silver must equal the source row by row.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.capture.chunking import boundary_query
from binlake.keys import range_predicate
from binlake.schema import qualified
from binlake.source.catalog import load_schema
from binlake.source.connection import connect as source_connect
from binlake.source.dialect import Dialect
from binlake.lake import split_state as state
from binlake.lake.target import Target

from .capture import connect, run_once, silver, write_config
from .helpers import params, seq

ROWS = 100_000
CHUNK = 10_000


def table_access(plan: Any, is_access: Any) -> dict[str, Any]:
    """The one table access of an executed plan, wherever the server nests it."""
    if isinstance(plan, dict):
        if is_access(plan):
            return plan
        plan = list(plan.values())
    for v in plan if isinstance(plan, list) else []:
        found = table_access(v, is_access)
        if found:
            return found
    return {}


def analyze(cur: Any, dialect: Dialect, sql: str, args: list[Any]) -> dict[str, Any]:
    """The statement's table access as MariaDB's `ANALYZE FORMAT=JSON` names it (`key`, `access_type`,
    `r_rows`); MySQL's `EXPLAIN ANALYZE FORMAT=JSON` (version 2) is mapped to those names."""
    if dialect.is_mariadb:  # query_block.nested_loop[0].table on MariaDB 10.11
        cur.execute("ANALYZE FORMAT=JSON " + sql, args)
        return table_access(json.loads(cur.fetchone()[0]),
                            lambda d: isinstance(d.get("table"), dict) and "access_type" in d["table"])["table"]
    cur.execute("SET SESSION explain_json_format_version = 2")
    cur.execute("EXPLAIN ANALYZE FORMAT=JSON " + sql, args)
    node = table_access(json.loads(cur.fetchone()[0]), lambda d: "index_access_type" in d)
    access = {"index_range_scan": "range", "index_scan": "index"}.get(node["index_access_type"],
                                                                      node["index_access_type"])
    return {"key": node.get("index_name"), "access_type": access,
            "r_rows": node["actual_rows"] * node["actual_loops"], "plan": node}


class Racer(threading.Thread):
    def __init__(self, port: int, database: str) -> None:
        super().__init__(daemon=True)
        self.port, self.database, self.ops = port, database, 0
        self.stop_flag = threading.Event()

    def run(self) -> None:
        rnd = random.Random(3)
        with connect(self.port, self.database) as conn, conn.cursor() as cur:
            while not self.stop_flag.is_set() and self.ops < 400:
                n = rnd.randrange(ROWS)
                op = rnd.random()
                if op < 0.4:
                    cur.execute("UPDATE ck SET v = v + 1 WHERE a = 1 AND b = %s", (f"K{n % 1000:04d}",))
                elif op < 0.6:
                    cur.execute("DELETE FROM ck WHERE a = 1 AND b = %s LIMIT 1", (f"k{n % 1000:04d}",))
                elif op < 0.8:
                    cur.execute("INSERT IGNORE INTO ck VALUES (1, %s, NOW(6), -1)", (f"k{n % 1000:04d}",))
                else:  # a key change inside the one first-column value
                    cur.execute("UPDATE IGNORE ck SET c = c + INTERVAL 1 MICROSECOND WHERE a = 1 AND b = %s "
                                "LIMIT 1", (f"k{n % 1000:04d}",))
                self.ops += 1
                time.sleep(0.01)


@pytest.mark.slow
def test_one_value_first_column_keeps_chunks_bounded(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE ck (a TINYINT NOT NULL, b VARCHAR(12) COLLATE utf8mb4_general_ci NOT NULL, "
                    "c DATETIME(6) NOT NULL, v INT, PRIMARY KEY (a, b, c)) CHARACTER SET utf8mb4")
        cur.execute(f"INSERT INTO ck SELECT 1, CONCAT(IF(seq % 2, 'k', 'K'), LPAD(seq % 1000, 4, '0')), "
                    f"'2024-01-01' + INTERVAL seq * 1001 MICROSECOND, seq FROM {seq(1, ROWS)}")
        cur.execute("ANALYZE TABLE ck")
    name = f"{database}.ck"
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.ck"], tmp_path / "lake", "6160-6164",
                            chunk_size=CHUNK, group_size=4)
    racer = Racer(port, database)
    racer.start()
    try:
        cfg = run_once(cfg_path)
    finally:
        racer.stop_flag.set()
        racer.join(timeout=30)
    assert racer.ops > 50, "the writer must have raced the snapshot"
    run_once(cfg_path)

    splits = state.load(spark, Target.of(cfg).split_state, 4)[name]
    assert all(s.status == "done" for s in splits)
    assert len(splits) in (ROWS // CHUNK, ROWS // CHUNK + 1), [s.rows for s in splits]
    # planned at exactly CHUNK rows each; the racing writes move a chunk by a few rows at most
    for s in splits[:-1]:
        assert abs((s.rows or 0) - CHUNK) <= 200, f"chunk {s.index} landed {s.rows} rows"
    assert (splits[-1].rows or 0) <= CHUNK + 200

    conn = source_connect(params(dev_db))
    try:
        schema, dialect = load_schema(conn, database, "ck"), Dialect.of(conn)
        with conn.cursor() as cur:
            for s in splits:
                plan = analyze(cur, dialect, *boundary_query(schema, s.start, CHUNK))
                assert plan["key"] == "PRIMARY" and plan["access_type"] in ("range", "index"), plan
                assert plan["r_rows"] <= CHUNK + 1, f"boundary query after chunk {s.index} read {plan['r_rows']} rows"
                where, args = range_predicate(schema, s.start, s.end)
                plan = analyze(cur, dialect, f"SELECT * FROM {qualified(database, 'ck')} WHERE {where}", args)
                assert plan["key"] == "PRIMARY" and plan["access_type"] == "range", plan
                assert plan["r_rows"] <= CHUNK + 200, f"chunk {s.index} SELECT read {plan['r_rows']} rows"
    finally:
        conn.close()

    with connect(port, database, time_zone="+00:00") as conn, conn.cursor() as cur:
        cur.execute("SELECT a, b, CAST(c AS CHAR), v FROM ck")  # a DATETIME key is its text in silver
        source = sorted(cur.fetchall())
    lake = sorted(tuple(r) for r in silver(spark, cfg, name).select("a", "b", "c", "v").collect())
    assert lake == source
