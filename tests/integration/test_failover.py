"""Failover to a replica by GTID (binlake.failover): two private servers in real replication (a
primary and a replica, both writing their binlog, the replica logging what it applies), a continuous
`binlake run` reading the primary through a TCP proxy -- the DNS name an operator moves. Writers
change the primary; at the switch they pause until the replica holds everything, the primary is
killed, the replica promoted, the proxy pointed at it, and the writers go on against the replica.

binlake follows: the same history under other file names and positions, resumed from the GTID state
of its last committed batch. At the end silver equals the new primary's table, bronze has no
duplicate (key, _seq), and every change read on the replica ranks after every change read before.

A replica that lacks transactions binlake has already read is refused (it waits up to
source.reconnect-timeout for it to catch up first)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlake.config import load
from binlake.devdb import DevDb
from binlake.source.identity import Lineage
from binlake.spark.streaming import committed_offset
from binlake.target import Target

from ..conftest import SERVERS
from .faulty_network import Proxy
from .test_reconnect import running, stop_cleanly, wait_for
from .workload import ReconnectingWriters, bronze_duplicates, create_table, run_cli, silver_rows, source_rows

ROWS = 2000


def _sql(port: int, *statements: str, database: str | None = None) -> list[Any]:
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                         autocommit=True) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        return list(cur.fetchall())


def _replicate(server: str, replica: int, primary: int) -> None:
    if server == "mariadb":
        _sql(replica, f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary}, MASTER_USER='root', "
                      "MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos", "START SLAVE")
    else:
        _sql(replica, f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT={primary}, "
                      "SOURCE_USER='root', SOURCE_PASSWORD='', SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1",
             "START REPLICA")


def _promote(server: str, replica: int) -> None:
    if server == "mariadb":
        _sql(replica, "STOP SLAVE", "RESET SLAVE ALL")
    else:
        _sql(replica, "STOP REPLICA", "RESET REPLICA ALL")


def _holds_all(server: str, replica: int, primary: int) -> bool:
    if server == "mariadb":
        want = _sql(primary, "SELECT @@gtid_binlog_pos")[0][0]
        return bool(want) and _sql(replica, "SELECT @@gtid_slave_pos")[0][0] == want
    want = _sql(primary, "SELECT @@gtid_executed")[0][0]
    return bool(_sql(replica, f"SELECT GTID_SUBSET('{want}', @@gtid_executed)")[0][0])


def _wait(what: str, done: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(params=SERVERS)
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevDb, DevDb]]:
    server = request.param
    options = ("--log-slave-updates",) if server == "mariadb" else ()
    root = tmp_path_factory.mktemp(f"failover-{server}")
    primary = DevDb(datadir=root / "primary", server=server, server_id=81, extra_options=options)
    replica = DevDb(datadir=root / "replica", server=server, server_id=82, extra_options=options)
    primary.start()
    replica.start()
    _replicate(server, replica.running_port(), primary.running_port())  # type: ignore[arg-type]
    try:
        yield primary, replica
    finally:
        primary.stop()
        replica.stop()


def _config(path: Path, port: int, database: str, lake: Path) -> Path:
    path.write_text(
        f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
        f"  tables: ['{database}\\.t']\n  server-id: 5800-5803\n  reconnect-timeout: 60\n"
        f"target:\n  path: {lake}\n"
        "snapshot:\n  chunk-size: 500\n  group-size: 2\n  parallelism: 2\n"
        "stream:\n  trigger-seconds: 1\n"
    )
    return path


def _seeded(primary: DevDb, replica: DevDb, database: str, rows: int) -> tuple[int, int]:
    """The table made on the primary and copied to the replica; the two ports."""
    p, r = primary.running_port(), replica.running_port()
    assert p is not None and r is not None
    _sql(p, f"CREATE DATABASE {database}")
    create_table(p, database, rows)
    _wait("the replica to copy the table", lambda: _holds_all(primary.server, r, p))
    return p, r


@pytest.mark.slow
def test_failover_to_a_promoted_replica_with_writers(pair: tuple[DevDb, DevDb], spark: Any, tmp_path: Path) -> None:
    primary, replica = pair
    server = primary.server
    database = "failover"
    p, r = _seeded(primary, replica, database, ROWS)
    with Proxy(p) as proxy:
        cfg = _config(tmp_path / "binlake.yml", proxy.port, database, tmp_path / "lake")
        target = Target.of(load(cfg))
        name = f"{database}.t"
        writers = ReconnectingWriters(p, database, ROWS, seed=81)
        writers.start()
        try:
            with running(cfg) as run:
                wait_for("a few batches on the primary", lambda: (committed_offset(target.checkpoint) is not None
                                                                  and writers.done > 300), run)
                # the switch: the writers pause, the replica catches up, the primary goes away for good
                writers.stop_flag.set()
                writers.join(timeout=30)
                _wait("the replica to hold every transaction", lambda: _holds_all(server, r, p))
                before = committed_offset(target.checkpoint)
                assert before is not None and before.epoch == 0
                primary.kill()
                _promote(server, r)
                proxy.upstream_port = r
                proxy.cut()
                writers = ReconnectingWriters(r, database, ROWS, seed=82)
                writers.fresh = 20_000_000  # keys the first writers did not use
                writers.start()
                wait_for("batches on the replica", lambda: (committed_offset(target.checkpoint) or before).epoch == 1
                         and writers.done > 300, run, timeout=240)
                writers.stop_flag.set()
                writers.join(timeout=30)
                head = _sql(r, "SHOW BINARY LOG STATUS" if server == "mysql" else "SHOW BINLOG STATUS")[0]
                wait_for("the stream to reach the new primary's head", lambda: (
                    (c := committed_offset(target.checkpoint)) is not None and c.epoch == 1
                    and (c.key[1], c.pos) >= (int(str(head[0]).rsplit(".", 1)[1]), int(head[1]))), run, timeout=240)
                err = stop_cleanly(run)
        finally:
            writers.stop_flag.set()
    assert "failing over" in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lineage = Lineage.load(target.source_lineage)
    assert lineage is not None and lineage.epoch == 1 and lineage.identity.server_id == 82
    assert silver_rows(spark, target.silver(name).location) == source_rows(r, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
    # every change read on the replica ranks after every change read before
    bronze = spark.read.format("delta").load(target.bronze(name).location).where("_op IN ('c','u','d')")
    epochs = bronze.selectExpr("_seq >= 1e30 AS later", "_gtid").distinct()
    assert {r_["later"] for r_ in epochs.select("later").distinct().collect()} == {False, True}
    # and no transaction is in bronze twice: the replica's copies of those read before are skipped
    again = epochs.groupBy("_gtid").count().where("count > 1").count()
    assert again == 0, f"{again} transactions read on both servers"


@pytest.mark.slow
def test_a_replica_behind_is_refused(pair: tuple[DevDb, DevDb], spark: Any, tmp_path: Path) -> None:
    """binlake read transactions the replica never got (replication stopped before them): after the
    switch it waits for the replica, then refuses in one line; nothing is read from it."""
    primary, replica = pair
    server = primary.server
    database = "behind"
    p, r = _seeded(primary, replica, database, 500)
    _sql(r, "STOP SLAVE" if server == "mariadb" else "STOP REPLICA")
    _sql(p, "UPDATE t SET k = k + 1 WHERE id <= 100", database=database)
    cfg = _config(tmp_path / "binlake.yml", p, database, tmp_path / "lake")
    first = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert first.returncode == 0, first.stderr[-3000:]
    primary.stop()
    moved = _config(tmp_path / "binlake.yml", r, database, tmp_path / "lake")
    second = run_cli("run", "-c", str(moved), "--until-caught-up", env={"BINLAKE_SOURCE_RECONNECT_TIMEOUT": "3"})
    assert second.returncode == 1, second.stderr[-3000:]
    assert "a replica still behind after 3s" in second.stderr and "Traceback" not in second.stderr, second.stderr
    assert "waiting for it to catch up" in second.stderr
