"""source.columns end to end: the columns left out are never in the lake, a schema change touching
only them changes nothing downstream, and silver equals the source's selected columns.

- a list (a text column, a TEXT and a TIME, which neither row decoder reads, left out) under writers
  that change the selected and the left-out columns, a kill -9 once the stream has landed a batch,
  ALTERs of left-out columns while binlake is down (and under an include list a column added), a
  resume: silver against the source, every Parquet file of the lake searched for a left-out value,
  one schema version; an exclude list natively, an include list on the Python path (BINLAKE_NATIVE=0);
- an include list through a snapshot, verify with the left-out columns changed at the source, and a
  changed list, a key left out and an unknown column each refused in one line.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from binlake.capture.context import Context
from binlake.config import load
from binlake.errors import ConfigError
from binlake.lake.evolution import History
from binlake.lake.target import Target

from .helpers import execute, fetch, seq
from .workload import RandomStatements, killed_under_writers, run_cli

ROWS, KEYS = 200, 260
SECRET = "SECRET-"  # every value written to a left-out column starts so


class Writers(RandomStatements):
    """Two threads changing keys 1..KEYS: the selected columns and the left-out ones together, the
    left-out ones alone (an update that changes nothing captured), deletes and inserts."""

    keys = KEYS

    def statement(self, cur: Any, token: str, key: int, op: float) -> None:
        if op < 0.35:
            cur.execute("UPDATE t SET v = %s, n = n + 1, ssn = %s WHERE id = %s", (token, SECRET + token, key))
        elif op < 0.6:
            cur.execute("UPDATE t SET ssn = %s WHERE id = %s", (SECRET + token, key))
        elif op < 0.8:
            cur.execute("DELETE FROM t WHERE id = %s", (key,))
        else:
            cur.execute("INSERT IGNORE INTO t (id, v, n, ssn) VALUES (%s, %s, 0, %s)",
                        (key, token, SECRET + token))


def _config(path: Path, port: int, database: str, lake: Path, columns: str) -> Path:
    path.write_text(
        f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
        f"  tables: ['{database}\\.t']\n  server-id: 5810-5814\n  columns: {columns}\n"
        f"target:\n  path: {lake}\n"
        "snapshot:\n  chunk-size: 50\n  group-size: 2\n  parallelism: 2\n"
        "stream:\n  trigger-seconds: 1\n"
    )
    return path


def secrets_in(lake: Path) -> list[str]:
    """Every Parquet file of the lake whose string values hold a left-out value. A file Parquet cannot
    read (a write a kill -9 cut off: empty, or without its footer, never committed) is searched byte
    by byte."""
    found = []
    for path in lake.rglob("*.parquet"):
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError):
            if SECRET.encode() in path.read_bytes():
                found.append(str(path))
            continue
        for column in table.itercolumns():
            text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
            if text and any(SECRET in v for v in column.to_pylist() if v):
                found.append(str(path))
    return found


def _user_columns(spark: Any, location: str) -> list[str]:
    return [c for c in spark.read.format("delta").load(location).columns if not c.startswith("_")]


# each case takes about 2 minutes a server: both take turns in the slow tests' rotation (tests/conftest.py);
# test_row_decoding checks both encodings' stepping over every type every day
@pytest.mark.slow
@pytest.mark.parametrize("path, form", [("native", "exclude"), ("python", "include")])
def test_left_out_columns_under_writers_a_kill_and_alters(dev_db: Any, database: str, spark: Any, tmp_path: Path,
                                                          path: str, form: str, monkeypatch: Any) -> None:
    from binlake.commands.verify import verify

    if path == "python":
        monkeypatch.setenv("BINLAKE_NATIVE", "0")  # the CLI runs below inherit it
    port = dev_db.running_port()
    execute(dev_db, database,
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL, ssn VARCHAR(40), notes TEXT, "
            "tm TIME(3))",
            f"INSERT INTO t SELECT seq, CONCAT('r', seq), 0, CONCAT('{SECRET}', seq), CONCAT('{SECRET}n', seq), "
            f"'-12:00:00.5' FROM {seq(1, ROWS)}")
    lake = tmp_path / "lake"
    chosen = "{exclude: [ssn, NOTES, tm]}" if form == "exclude" else "{include: [v, N]}"  # the same columns
    cfg_path = _config(tmp_path / "binlake.yml", port, database, lake, f"{{{database}.t: {chosen}}}")
    cfg = load(cfg_path)
    target, name = Target.of(cfg), f"{database}.t"
    seed = int(os.environ.get("BINLAKE_KILL_SEED") or random.randrange(10**6))
    writers = Writers(port, database, seed)

    def alter() -> None:  # schema changes of left-out columns only, met by the resumed stream in binlog order
        execute(dev_db, database, "ALTER TABLE t MODIFY ssn VARCHAR(80)", "ALTER TABLE t DROP COLUMN notes")
        if form == "include":  # a column added later, which an include list does not name
            execute(dev_db, database, f"ALTER TABLE t ADD COLUMN extra VARCHAR(20) DEFAULT '{SECRET}x'")

    killed_under_writers(cfg_path, target.stream_progress, tmp_path / "run-1.log", writers, seed, alter)
    resumed = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    live = {int(i): (v, int(n)) for i, v, n in fetch(dev_db, database, "SELECT id, v, n FROM t")}
    rows = spark.read.format("delta").load(target.silver(name).location).collect()
    silver = {r["id"]: (r["v"], r["n"]) for r in rows}
    assert silver == live, f"seed {seed}: {sorted(set(silver.items()) ^ set(live.items()))[:6]}"
    assert _user_columns(spark, target.silver(name).location) == ["id", "v", "n"]
    assert _user_columns(spark, target.bronze(name).location) == ["id", "v", "n"]
    assert secrets_in(lake) == [], "a left-out value reached the lake"
    versions = History(target.captured_schema(name)).versions()
    assert len(versions) == 1, [v.at for v in versions]  # the ALTERs made no schema version
    bronze = spark.read.format("delta").load(target.bronze(name).location)
    assert bronze.where("_op = 's'").count() == 0 and bronze.where("_op = 'u'").count() > 0
    report = verify(cfg)
    assert report["ok"], report
    assert writers.done > 200
    print(f"{path} on {dev_db.server}: {writers.done} statements, {len(live)} rows (seed {seed})")


def test_an_include_list_through_a_snapshot_and_a_changed_or_bad_list_refused(dev_db: Any, database: str,
                                                                              spark: Any, tmp_path: Path) -> None:
    from binlake.commands.verify import verify

    execute(dev_db, database,
            "CREATE TABLE t (id INT PRIMARY KEY, total DECIMAL(10,2), tenant INT, secret BLOB, note VARCHAR(20))",
            f"INSERT INTO t SELECT seq, seq / 4, seq % 3, '{SECRET}', '{SECRET}' FROM {seq(1, 120)}")
    lake = tmp_path / "lake"
    cfg_path = _config(tmp_path / "binlake.yml", dev_db.running_port(), database, lake,
                       f"{{{database}.t: {{include: [total, Tenant]}}}}")
    ran = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert ran.returncode == 0, ran.stderr[-3000:]

    cfg = load(cfg_path)
    target, name = Target.of(cfg), f"{database}.t"
    live = sorted(fetch(dev_db, database, "SELECT id, total, tenant FROM t"))
    silver = sorted(tuple(r) for r in spark.read.format("delta").load(target.silver(name).location)
                    .select("id", "total", "tenant").collect())
    assert silver == live
    assert _user_columns(spark, target.silver(name).location) == ["id", "total", "tenant"]  # the key always
    assert secrets_in(lake) == []
    execute(dev_db, database, "UPDATE t SET secret = 'x', note = 'y'")  # verify compares the selected columns
    assert verify(cfg)["ok"]

    changed = load(cfg_path, [f"source.columns={{{database}.t: {{include: [total]}}}}"])
    with pytest.raises(ConfigError, match=rf"^source\.columns for {database}\.t is .*, but the table was captured "
                                          rf"with .*; .*binlake resnapshot {database}\.t\)$"):
        Context(changed).schemas()
    for columns, why in [(f"{{{database}.t: {{exclude: [id]}}}}", "leaves out key column 'id'"),
                         (f"{{{database}.t: {{exclude: [nope]}}}}", "names column 'nope', which the table does not have")]:
        fresh = load(cfg_path, [f"source.columns={columns}", f"target.path={tmp_path / 'other'}"])
        with pytest.raises(ConfigError, match=why):
            Context(fresh).schemas()
