"""The server behind source.hostname is replaced: binlake never reads on from its stored position in
the new server's binlog (binlake.source.identity).

- A new data directory on the same port, with the same server id (and on MySQL the same server_uuid,
  as a rebuilt server that kept its auto.cnf has), whose binlog has an event starting exactly at the
  stored position in a file of the same name: so nothing fails by accident. A continuous run stops
  with one line when the server comes back as the new one; a new run refuses at its start; under
  `stream.on-source-change: resnapshot` it snapshots the new server's tables instead.
- A restore from an older backup (the data directory copied while stopped, written after): the run
  refuses at its start.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlake.config import load
from binlake.commands.devdb import DevDb
from binlake.offsets import BinlogPosition
from binlake.source.connection import connect
from binlake.source.dialect import binlog_head
from binlake.lake.checkpoint import committed_offset
from binlake.lake.target import Target

from ..conftest import SERVERS
from .test_reconnect import running, wait_for
from .workload import create_table, run_cli, silver_rows, source_rows

REFUSAL = "no longer holds the binlog history binlake's stored position belongs to"


def _config(path: Path, port: int, database: str, lake: Path) -> Path:
    path.write_text(
        f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
        f"  tables: ['{database}\\.t']\n  server-id: 5700-5703\n  reconnect-timeout: 120\n"
        f"target:\n  path: {lake}\n"
        "snapshot:\n  chunk-size: 500\n  group-size: 2\n  parallelism: 2\n"
        "stream:\n  trigger-seconds: 1\n"
    )
    return path


def _sql(port: int, *statements: str, database: str | None = None) -> None:
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                         autocommit=True) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _head(port: int) -> BinlogPosition:
    conn = connect({"host": "127.0.0.1", "port": port, "user": "root", "password": ""})
    try:
        return binlog_head(conn)
    finally:
        conn.close()


def _fill_to(port: int, database: str, target: BinlogPosition) -> None:
    """Write transactions until the server's binlog head is exactly `target` (same file name): each
    inserts REPEAT('x', n) with a five-digit n, so a transaction's size is n plus a constant (MariaDB
    annotates the statement, whose text then has a constant length too)."""
    _sql(port, "CREATE TABLE pad (id INT AUTO_INCREMENT PRIMARY KEY, v LONGTEXT)", database=database)

    def insert(n: int) -> int:
        before = _head(port)
        _sql(port, f"INSERT INTO pad (v) VALUES (REPEAT('x', {n}))", database=database)
        after = _head(port)
        assert after.file == before.file == target.file, (before, after, target)
        return after.pos - before.pos - n

    constant = insert(10_000)
    while target.pos - _head(port).pos - constant > 60_000:
        insert(40_000)
    gap = target.pos - _head(port).pos - constant
    assert 10_000 <= gap <= 60_000, (gap, target, _head(port))
    insert(gap)
    assert _head(port) == target


def _event_at(port: int, at: BinlogPosition) -> bool:
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="") as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{at.file}' FROM {at.pos} LIMIT 1")
        row = cur.fetchone()
    return row is not None and int(row[1]) == at.pos


def _bronze_count(spark: Any, location: str) -> int:
    return spark.read.format("delta").load(location).count()


def _one_line_refusal(stderr: str) -> None:
    assert REFUSAL in stderr, stderr[-3000:]
    assert "Traceback" not in stderr and "\tat " not in stderr, stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("server", SERVERS)
def test_replaced_data_directory_is_refused_then_resnapshotted(server: str, spark: Any, tmp_path: Path) -> None:
    old = DevDb(datadir=tmp_path / "old", server=server, server_id=71)
    port = old.start()
    database = "identity"
    _sql(port, f"CREATE DATABASE {database}")
    create_table(port, database, 2000)  # one large transaction: the stored position lies well past 100 KB
    cfg = _config(tmp_path / "binlake.yml", port, database, tmp_path / "lake")
    target = Target.of(load(cfg))
    name = f"{database}.t"
    with running(cfg) as run:
        wait_for("the snapshot and a first batch", lambda: committed_offset(target.checkpoint) is not None, run)
        _sql(port, "UPDATE t SET k = k + 1 WHERE id <= 300", "DELETE FROM t WHERE id BETWEEN 301 AND 320",
             "INSERT INTO t (id, k) VALUES (5001, 1), (5002, 2)", database=database)
        head = _head(port)
        wait_for("the changes", lambda: (committed_offset(target.checkpoint) or BinlogPosition(head.file, 0)) >= head,
                 run)
        stored = committed_offset(target.checkpoint)
        assert stored == head
        assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
        bronze_before = _bronze_count(spark, target.bronze(name).location)

        # the new server, built on another port: the same server id (and server_uuid), and an event
        # starting exactly at the stored position
        new = DevDb(datadir=tmp_path / "new", server=server, server_id=71)
        if server == "mysql":
            new._initialise()
            shutil.copy(old.data_path / "auto.cnf", new.data_path / "auto.cnf")
        other = new.start()
        _sql(other, f"CREATE DATABASE {database}")
        create_table(other, database, 300)
        _fill_to(other, database, stored)
        new.stop()
        old.stop()
        time.sleep(1.1)  # the new server's next binlog file must not share a second with the old one's
        moved = DevDb(datadir=tmp_path / "new", server=server, server_id=71, port=port)
        moved.start()
        assert _event_at(port, stored)
        _out, err = run.communicate(timeout=300)
        assert run.returncode == 1, err[-3000:]
    _one_line_refusal(err)
    assert _bronze_count(spark, target.bronze(name).location) == bronze_before

    again = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert again.returncode == 1, again.stderr[-3000:]
    _one_line_refusal(again.stderr)
    assert _bronze_count(spark, target.bronze(name).location) == bronze_before
    shown = run_cli("status", "-c", str(cfg))
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "server_id 71" in shown.stdout and REFUSAL in shown.stdout, shown.stdout

    fresh = run_cli("run", "-c", str(cfg), "--until-caught-up", env={"BINLAKE_STREAM_ON_SOURCE_CHANGE": "resnapshot"})
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert "stream.on-source-change is resnapshot" in fresh.stderr
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    shown = run_cli("status", "-c", str(cfg))
    assert "holding the stored positions' history" in shown.stdout, shown.stdout + shown.stderr[-2000:]
    moved.stop()


@pytest.mark.slow
@pytest.mark.parametrize("server", SERVERS)
def test_restore_from_an_older_backup_is_refused(server: str, spark: Any, tmp_path: Path) -> None:
    db = DevDb(datadir=tmp_path / "db", server=server, server_id=72)
    port = db.start()
    database = "restored"
    _sql(port, f"CREATE DATABASE {database}")
    create_table(port, database, 500)
    cfg = _config(tmp_path / "binlake.yml", port, database, tmp_path / "lake")
    target = Target.of(load(cfg))
    name = f"{database}.t"
    first = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert first.returncode == 0, first.stderr[-3000:]

    db.stop()
    shutil.copytree(db.datadir, tmp_path / "backup")
    db = DevDb(datadir=tmp_path / "db", server=server, server_id=72, port=port)
    db.start()
    _sql(port, "UPDATE t SET k = k + 1 WHERE id <= 200", "DELETE FROM t WHERE id > 450", database=database)
    second = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert second.returncode == 0, second.stderr[-3000:]
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    bronze_before = _bronze_count(spark, target.bronze(name).location)

    db.stop()
    shutil.rmtree(db.datadir)
    shutil.copytree(tmp_path / "backup", db.datadir)
    time.sleep(1.1)
    db.start()
    _sql(port, "UPDATE t SET v = 'after the restore' WHERE id <= 400", database=database)
    third = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert third.returncode == 1, third.stderr[-3000:]
    _one_line_refusal(third.stderr)
    assert _bronze_count(spark, target.bronze(name).location) == bronze_before
    db.stop()
