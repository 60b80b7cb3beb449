"""source.row-filter end to end: silver holds exactly the source's rows that match the filter now.

- writers on hot keys move rows into and out of the filter (and to NULL, which matches nothing),
  update and delete them, while `binlake run` snapshots and streams, with a column left out too; a
  kill -9 once the stream has landed a batch, a row moved out and one moved in while binlake is
  down, a resume: silver's live rows against the source's `WHERE tenant = 7`, `verify` agrees, and
  the left-out column is nowhere in the lake. With soft deletes and history together (the shape the
  issue asks for) silver's versions and tombstones are also checked against the binlog replayed by
  mysql-replication (tests/integration/test_silver_history.py's truth, with the filter);
- a scripted story for each of soft deletes, history and both: a row updated out of the filter and
  back in, a delete of a row in it and of one out of it, inserts again in and out of it; silver
  against a table written by hand, the source, the binlog, and against itself after every binlog
  change is replayed and after a silver rebuilt from bronze with the snapshot rows arriving last;
- the predicate is Spark SQL, evaluated the same way on snapshot rows and binlog changes and never
  pushed down: under a case- and space-insensitive collation the server would take 'EU' and 'eu '
  for 'eu', Spark does not, and silver follows Spark on both paths; an invalid predicate is refused.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from binlake.capture.context import Context
from binlake.config import load
from binlake.errors import ConfigError
from binlake.lake.silver_shape import PLAIN, Shape
from binlake.lake.target import Target
from binlake.source.dialect import binlog_head

from .helpers import execute, fetch, seq
from .test_column_selection import secrets_in
from .test_silver_history import check_deletes, check_history, kept_rows, replay
from .workload import RandomStatements, killed_under_writers, run_cli

ROWS, KEYS = 200, 260
TENANTS = (6, 7, 8, None)
IMAGE = ("v", "n", "tenant")  # what tells a row's versions apart: every write changes v or n


def in_filter(image: tuple[Any, ...]) -> bool:
    """`tenant = 7`, as Spark reads it: NULL matches nothing."""
    return image[2] == 7


class Movers(RandomStatements):
    """Three threads changing keys 1..KEYS: a row's tenant (into, out of the filter, to NULL), its values,
    deletes and inserts; every statement changes `v` or `n`, so each version of a row is told by its image."""

    keys = KEYS
    threads_count = 3

    def statement(self, cur: Any, token: str, key: int, op: float) -> None:
        tenant = self.rnd.choice(TENANTS)
        if op < 0.35:
            cur.execute("UPDATE t SET tenant = %s, n = n + 1 WHERE id = %s", (tenant, key))
        elif op < 0.6:
            cur.execute("UPDATE t SET v = %s, n = n + 1, ssn = %s WHERE id = %s", (token, "SECRET-" + token, key))
        elif op < 0.8:
            cur.execute("DELETE FROM t WHERE id = %s", (key,))
        else:
            cur.execute("INSERT IGNORE INTO t VALUES (%s, %s, 0, %s, %s)", (key, token, tenant, "SECRET-" + token))


def _config(path: Path, port: int, database: str, lake: Path, row_filter: str, columns: str = "{}",
            shape: Shape = PLAIN) -> Path:
    path.write_text(
        f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
        f"  tables: ['{database}\\.t']\n  server-id: 5820-5824\n  columns: {columns}\n"
        f"  row-filter: {{{database}.t: \"{row_filter}\"}}\n"
        f"target:\n  path: {lake}\n"
        "snapshot:\n  chunk-size: 50\n  group-size: 2\n  parallelism: 2\n"
        "stream:\n  trigger-seconds: 1\n"
        f"silver:\n  deletes: {shape.deletes}\n  history: {shape.history}\n"
    )
    return path


def _silver(spark: Any, location: str, *names: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(location).select(*names).collect())


def _user_columns(spark: Any, location: str) -> list[str]:
    return [c for c in spark.read.format("delta").load(location).columns if not c.startswith("_")]


def live_rows(rows: list[dict[str, Any]], shape: Shape) -> dict[int, tuple[Any, ...]]:
    """Silver's rows that are the source's now (current versions, not deleted), by key."""
    return {r["id"]: tuple(r[c] for c in IMAGE) for r in rows
            if (not shape.versions or r["__END_AT"] is None) and not (shape.soft and r["_deleted"])}


SHAPES = {"plain": PLAIN, "soft": Shape("soft", 1), "history": Shape("hard", 2), "both": Shape("soft", 2)}


# each case takes about 4 minutes a server: both take turns in the slow tests' rotation (tests/conftest.py);
# tests/unit/test_row_filter.py checks every shape's rule in any order of arrival every day
@pytest.mark.slow
@pytest.mark.parametrize("which", ["plain", "both"])
def test_rows_moving_into_and_out_of_the_filter_under_writers_and_a_kill(dev_db: Any, database: str, spark: Any,
                                                                         tmp_path: Path, which: str) -> None:
    """`both` is the shape issue 41 asks for: one table with a column left out, a tenant filter, soft
    deletes and history, under writers and a kill -9."""
    from binlake.commands.verify import verify

    shape, port = SHAPES[which], dev_db.running_port()
    execute(dev_db, database,
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL, tenant INT, ssn VARCHAR(40))")
    with dev_db.connect(database) as conn:
        start = binlog_head(conn)  # before the first row: the replay sees every version of every key
    execute(dev_db, database,
            f"INSERT INTO t SELECT seq, CONCAT('r', seq), 0, NULLIF(6 + seq % 4, 9), CONCAT('SECRET-', seq) "
            f"FROM {seq(1, ROWS)}")
    lake = tmp_path / "lake"
    cfg_path = _config(tmp_path / "binlake.yml", port, database, lake, "tenant = 7",
                       f"{{{database}.t: {{exclude: [ssn]}}}}", shape)
    cfg = load(cfg_path)
    target, name = Target.of(cfg), f"{database}.t"
    seed = int(os.environ.get("BINLAKE_KILL_SEED") or random.randrange(10**6))
    writers = Movers(port, database, seed)
    killed_under_writers(cfg_path, target.stream_progress, tmp_path / "run-1.log", writers, seed)
    inside = fetch(dev_db, database, "SELECT MIN(id) FROM t WHERE tenant = 7")[0][0]
    outside = fetch(dev_db, database, "SELECT MIN(id) FROM t WHERE tenant <> 7 OR tenant IS NULL")[0][0]
    execute(dev_db, database, f"UPDATE t SET tenant = 8, n = n + 1 WHERE id = {inside}",  # out of the filter
            f"UPDATE t SET tenant = 7, n = n + 1 WHERE id = {outside}")  # into it
    resumed = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    live = {int(i): (v, int(n), t) for i, v, n, t in fetch(dev_db, database, "SELECT id, v, n, tenant FROM t "
                                                                           "WHERE tenant = 7")}
    rows = kept_rows(spark, target.silver(name).location)
    now = live_rows(rows, shape)
    assert now == live, f"seed {seed}: {sorted(set(now.items()) ^ set(live.items()))[:6]}"
    assert outside in now and inside not in now
    assert _user_columns(spark, target.silver(name).location) == _user_columns(spark, target.bronze(name).location) \
        == ["id", "v", "n", "tenant"]
    assert secrets_in(lake) == []
    report = verify(cfg)
    assert report["ok"], report
    versions = tombstones = 0
    if not shape.plain:
        truth = replay(port, database, start, IMAGE)
        versions = check_history(rows, truth, live, shape, IMAGE, in_filter) if shape.versions else 0
        tombstones = check_deletes(rows, truth, shape, IMAGE, in_filter) if shape.soft else 0
        assert versions > len(live) and tombstones > 0
    assert writers.done > 200 and len(live) > 10
    print(f"{which} on {dev_db.server}: {writers.done} statements, {len(live)} rows match, {versions} versions "
          f"and {tombstones} tombstones as the binlog has them (seed {seed})")


# The story: rows before the snapshot (id, v, tenant), then two rounds of changes, each streamed
FIRST = {1: 7, 2: 7, 3: 8, 4: 7, 5: 8, 6: 7, 7: None, 8: 7, 9: 7, 10: 7, 11: 8, 14: 7}
ROUND_1 = ["UPDATE t SET tenant = 8, v = 'o1', n = n + 1 WHERE id = 1",  # out of the filter ...
           "DELETE FROM t WHERE id = 2",  # a delete of a row in the filter
           "DELETE FROM t WHERE id = 3",  # and of one out of it
           "DELETE FROM t WHERE id = 4", "DELETE FROM t WHERE id = 6",
           "UPDATE t SET tenant = 7, v = 'i5', n = n + 1 WHERE id = 5",  # into it
           "UPDATE t SET v = 'u7', n = n + 1 WHERE id = 7",  # NULL stays out
           "UPDATE t SET tenant = NULL, v = 'o8', n = n + 1 WHERE id = 8",  # out, to NULL
           "UPDATE t SET tenant = 8, v = 'o9', n = n + 1 WHERE id = 9",
           "INSERT INTO t VALUES (12, 'c12', 0, 7), (13, 'c13', 0, 8)"]
ROUND_2 = ["UPDATE t SET tenant = 7, v = 'b1', n = n + 1 WHERE id = 1",  # ... and back in
           "INSERT INTO t VALUES (4, 'b4', 0, 7)",  # inserted again in the filter
           "INSERT INTO t VALUES (6, 'b6', 0, 8)",  # and out of it: its tombstone goes too
           "DELETE FROM t WHERE id = 9",  # a delete of a row that left the filter
           "UPDATE t SET v = 'b14', n = n + 1 WHERE id = 14"]
# Written by hand: under soft deletes and history, each key's versions (v, deleted) by _seq, and whether
# its last one is current. History alone keeps the versions not deleted (current if the last is); soft
# deletes alone, the current version.
STORY_SILVER = {1: ([("a1", False), ("b1", False)], True), 2: ([("a2", False), ("a2", True)], True),
                4: ([("a4", False), ("a4", True), ("b4", False)], True), 5: ([("i5", False)], True),
                6: ([("a6", False), ("a6", True)], False), 8: ([("a8", False)], False), 9: ([("a9", False)], False),
                10: ([("a10", False)], True), 12: ([("c12", False)], True),
                14: ([("a14", False), ("b14", False)], True)}


def story_silver(shape: Shape) -> dict[int, tuple[list[tuple[str, bool]], bool]]:
    """STORY_SILVER as `shape` keeps it."""
    if shape.soft and shape.versions:
        return STORY_SILVER
    if shape.soft:
        return {k: (versions[-1:], True) for k, (versions, current) in STORY_SILVER.items() if current}
    return {k: ([v for v in versions if not v[1]], current and not versions[-1][1])
            for k, (versions, current) in STORY_SILVER.items()}


def held(rows: list[dict[str, Any]], shape: Shape) -> dict[int, tuple[list[tuple[str, bool]], bool]]:
    """Silver's rows as STORY_SILVER writes them."""
    out: dict[int, tuple[list[tuple[str, bool]], bool]] = {}
    for r in sorted(rows, key=lambda r: (r["id"], r["_seq"])):
        versions = out.get(r["id"], ([], False))[0]
        versions.append((r["v"], bool(r.get("_deleted"))))
        out[r["id"]] = (versions, not shape.versions or r["__END_AT"] is None)
    return out


def _table(spark: Any, location: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in spark.read.format("delta").load(location).collect()), key=repr)


@pytest.mark.slow  # a snapshot and five streams a case: in the slow tests' turns, the unit tests every day
@pytest.mark.parametrize("which", ["soft", "history", "both"])
def test_kept_deletes_and_history_of_rows_leaving_and_entering_the_filter(dev_db: Any, database: str, spark: Any,
                                                                          tmp_path: Path, which: str) -> None:
    from binlake.capture.run import run
    from binlake.capture.stream import stream
    from binlake.commands.verify import verify
    from binlake.lake import silver

    shape, port = SHAPES[which], dev_db.running_port()
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL, tenant INT)")
    with dev_db.connect(database) as conn:
        start = binlog_head(conn)
    execute(dev_db, database, "INSERT INTO t VALUES " + ", ".join(
        f"({k}, 'a{k}', 0, {'NULL' if t is None else t})" for k, t in FIRST.items()))
    cfg = load(_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", "tenant = 7", shape=shape))
    target, name = Target.of(cfg), f"{database}.t"
    for statements in ([], ROUND_1, ROUND_2):
        execute(dev_db, database, *statements)
        run(cfg, until_caught_up=True)

    location, log = target.silver(name).location, target.bronze(name).location
    rows = kept_rows(spark, location)
    assert held(rows, shape) == story_silver(shape)
    live = {int(i): (v, int(n), t) for i, v, n, t in fetch(dev_db, database, "SELECT id, v, n, tenant FROM t "
                                                                           "WHERE tenant = 7")}
    assert live_rows(rows, shape) == live
    assert verify(cfg)["ok"]
    truth = replay(port, database, start, IMAGE)
    if shape.versions:
        check_history(rows, truth, live, shape, IMAGE, in_filter)
    if shape.soft:
        check_deletes(rows, truth, shape, IMAGE, in_filter)

    # every binlog change since the snapshot again (a new checkpoint): older than silver's, none revives a key
    kept = _table(spark, location)
    shutil.rmtree(target.checkpoint)
    stream(cfg, until_caught_up=True)
    assert _table(spark, location) == kept
    # silver built again from bronze: the binlog's later changes, its earlier ones, the later ones again,
    # and the snapshot rows last, after every change of their keys
    schema = Context(cfg).schemas()[name]
    changes = spark.read.format("delta").load(log)
    binlog = changes.where("_op IN ('c', 'u', 'd')")
    cut = sorted(r["_seq"] for r in binlog.select("_seq").collect())[binlog.count() // 2]
    early, late = binlog.where(binlog["_seq"] < cut), binlog.where(binlog["_seq"] >= cut)
    rebuilt = str(tmp_path / "rebuilt")
    silver.ensure_table(spark, rebuilt, schema, shape)
    for piece in (late, early, late, changes.where("_op = 'r'")):
        silver.apply(spark, schema, piece, rebuilt, log, shape=shape)
    assert _table(spark, rebuilt) == kept


@pytest.mark.slow  # three CLI runs: in the slow tests' turns, beside the unit tests' every day
def test_the_filter_is_spark_sql_on_both_paths_and_an_invalid_one_is_refused(dev_db: Any, database: str,
                                                                            spark: Any, tmp_path: Path) -> None:
    from binlake.commands.verify import verify

    execute(dev_db, database,
            "CREATE TABLE t (id INT PRIMARY KEY, region VARCHAR(10) COLLATE utf8mb4_general_ci, n INT)",
            "INSERT INTO t VALUES (1, 'eu', 1), (2, 'EU', 1), (3, 'eu ', 1), (4, NULL, 1), (5, 'us', 1), "
            "(6, 'eu', NULL)")
    # the server's own reading of the predicate takes 'EU' and 'eu ' for 'eu': pushed down, the snapshot
    # would keep rows the binlog path drops
    assert [r[0] for r in fetch(dev_db, database, "SELECT id FROM t WHERE region = 'eu' ORDER BY id")] == [1, 2, 3, 6]
    cfg_path = _config(tmp_path / "binlake.yml", dev_db.running_port(), database, tmp_path / "lake",
                       "region = 'eu' AND n > 0")
    first = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert first.returncode == 0, first.stderr[-3000:]
    cfg = load(cfg_path)
    location = Target.of(cfg).silver(f"{database}.t").location
    assert _silver(spark, location, "id") == [(1,)]  # NULL matches nothing
    execute(dev_db, database,
            "INSERT INTO t VALUES (11, 'eu', 1), (12, 'EU', 1), (13, 'eu ', 1), (14, NULL, 1)",
            "UPDATE t SET n = 0 WHERE id = 1",  # out of the filter
            "UPDATE t SET region = 'eu' WHERE id IN (2, 3)",  # into it
            "UPDATE t SET n = 2 WHERE id = 6")  # from NULL into it
    second = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert second.returncode == 0, second.stderr[-3000:]
    assert _silver(spark, location, "id") == [(2,), (3,), (6,), (11,)]
    assert verify(cfg)["ok"]

    from binlake.lake import row_filter

    bad = run_cli("run", "-c", str(cfg_path), "--set", f"source.row-filter={{{database}.t: 'nope = 1'}}",
                  "--set", f"target.path={tmp_path / 'other'}", "--until-caught-up")
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert re.fullmatch(rf"binlake: source\.row-filter for {database}\.t is 'nope = 1' \(.*\); binlake needs one "
                        rf"Spark SQL predicate over the table's captured columns \(id, region, n\), like tenant_id = 7: "
                        "fix the predicate", bad.stderr.strip().splitlines()[-1]), bad.stderr[-2000:]
    schema = Context(cfg).schemas()[f"{database}.t"]
    for predicate, why in [("region = ", r"is 'region = ' \(.*\); binlake needs one Spark SQL predicate"),
                           ("n + 1", r"is 'n \+ 1', a int value, not true or false")]:
        with pytest.raises(ConfigError, match=why):
            row_filter.check(spark, dataclasses.replace(schema, row_filter=predicate))
