"""source.row-filter end to end: silver holds exactly the source's rows that match the filter now.

- writers on hot keys move rows into and out of the filter (and to NULL, which matches nothing),
  update and delete them, while `binlake run` snapshots and streams, with a column left out too; a
  kill -9 once the stream has landed a batch, a row moved out and one moved in while binlake is
  down, a resume: silver against the source's `WHERE tenant = 7`, and `verify` agrees;
- the predicate is Spark SQL, evaluated the same way on snapshot rows and binlog changes and never
  pushed down: under a case- and space-insensitive collation the server would take 'EU' and 'eu '
  for 'eu', Spark does not, and silver follows Spark on both paths; an invalid predicate is refused.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.capture.context import Context
from binlake.config import load
from binlake.errors import ConfigError
from binlake.lake.target import Target

from .helpers import execute, fetch, seq
from .test_column_selection import secrets_in
from .test_silver_history import _killed_once_streaming
from .workload import RandomStatements, run_cli

ROWS, KEYS = 200, 260
TENANTS = (6, 7, 8, None)


class Movers(RandomStatements):
    """Two threads changing keys 1..KEYS: a row's tenant (into, out of the filter, to NULL), its values,
    deletes and inserts."""

    keys = KEYS

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


def _config(path: Path, port: int, database: str, lake: Path, row_filter: str, columns: str = "{}") -> Path:
    path.write_text(
        f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
        f"  tables: ['{database}\\.t']\n  server-id: 5820-5824\n  columns: {columns}\n"
        f"  row-filter: {{{database}.t: \"{row_filter}\"}}\n"
        f"target:\n  path: {lake}\n"
        "snapshot:\n  chunk-size: 50\n  group-size: 2\n  parallelism: 2\n"
        "stream:\n  trigger-seconds: 1\n"
    )
    return path


def _silver(spark: Any, location: str, *names: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(location).select(*names).collect())


@pytest.mark.slow
def test_rows_moving_into_and_out_of_the_filter_under_writers_and_a_kill(dev_db: Any, database: str, spark: Any,
                                                                         tmp_path: Path) -> None:
    from binlake.commands.verify import verify

    port = dev_db.running_port()
    execute(dev_db, database,
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL, tenant INT, ssn VARCHAR(40))",
            f"INSERT INTO t SELECT seq, CONCAT('r', seq), 0, NULLIF(6 + seq % 4, 9), CONCAT('SECRET-', seq) "
            f"FROM {seq(1, ROWS)}")
    lake = tmp_path / "lake"
    cfg_path = _config(tmp_path / "binlake.yml", port, database, lake, "tenant = 7",
                       f"{{{database}.t: {{exclude: [ssn]}}}}")
    cfg = load(cfg_path)
    target, name = Target.of(cfg), f"{database}.t"
    seed = int(os.environ.get("BINLAKE_KILL_SEED") or random.randrange(10**6))
    writers = Movers(port, database, seed)
    writers.start()
    try:
        _killed_once_streaming(cfg_path, target.stream_progress, tmp_path / "run-1.log", seed)
        time.sleep(2)  # the writers go on while binlake is down
    finally:
        writers.stop()
    inside = fetch(dev_db, database, "SELECT MIN(id) FROM t WHERE tenant = 7")[0][0]
    outside = fetch(dev_db, database, "SELECT MIN(id) FROM t WHERE tenant <> 7 OR tenant IS NULL")[0][0]
    execute(dev_db, database, f"UPDATE t SET tenant = 8 WHERE id = {inside}",  # out of the filter
            f"UPDATE t SET tenant = 7 WHERE id = {outside}")  # into it
    resumed = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    live = sorted(fetch(dev_db, database, "SELECT id, v, n, tenant FROM t WHERE tenant = 7"))
    silver = _silver(spark, target.silver(name).location, "id", "v", "n", "tenant")
    assert silver == live, f"seed {seed}: {sorted(set(silver) ^ set(live))[:6]}"
    ids = {r[0] for r in silver}
    assert outside in ids and inside not in ids
    assert secrets_in(lake) == []
    report = verify(cfg)
    assert report["ok"], report
    assert writers.done > 200 and len(live) > 10
    print(f"{dev_db.server}: {writers.done} statements, {len(live)} rows match (seed {seed})")


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
