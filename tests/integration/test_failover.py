"""Failover to a replica by GTID (binlake.capture.failover): two private servers in real replication (a
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

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlake.config import load
from binlake.commands.devdb import DevDb
from binlake.errors import SourceChangedError
from binlake.source.identity import Lineage
from binlake.lake.checkpoint import committed_offset
from binlake.lake.target import Target

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


def _end_offset(query: Any) -> dict[str, Any] | None:
    progress = query.lastProgress
    if not progress or not progress["sources"] or not progress["sources"][0].get("endOffset"):
        return None
    end = progress["sources"][0]["endOffset"]
    return json.loads(end) if isinstance(end, str) else dict(end)


def _pipeline_job(spark: Any, port: int, database: str, tmp_path: Path) -> tuple[Any, Any]:
    """The table planned and snapshotted, and the binlog source's job as the Lakeflow pipeline builds it."""
    from binlake.capture.context import Context
    from binlake.capture.plan import plan
    from binlake.capture.snapshot import snapshot
    from binlake.databricks import stream_job
    from binlake.spark.sources import register

    cfg = load(_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake"))
    plan(cfg)
    snapshot(cfg)
    register(spark)
    ctx = Context(cfg)
    return ctx, stream_job.build(ctx)


def _read(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[dict[str, Any]]:
    """The row changes a batch from `start` to `end` hands to Spark, as the source's reader gives them."""
    from binlake.capture.binlog_batches import BinlogRange

    rows = [row for batch in reader.read(BinlogRange(start, end)) for row in batch.to_pylist()]
    return [row for row in rows if row["_op"] in ("c", "u", "d")]


def test_a_pipeline_batch_planned_on_the_primary_is_read_on_the_replica_by_gtid(
        pair: tuple[DevDb, DevDb], spark: Any, tmp_path: Path) -> None:
    """The pipeline's binlog source (no record files: the GTID state in its offsets), driven call by call
    as Spark drives it. A batch planned on the primary, which is then killed and the replica promoted,
    is read on the replica: exactly the transactions the primary gave for it, by GTID. The next batch
    fails over (the next epoch) and holds exactly the transactions after it, wherever written."""
    from binlake.capture.binlog_batches import BinlogReader

    primary, replica = pair
    server = primary.server
    database = "planned"
    p, r = _seeded(primary, replica, database, 200)
    update = "UPDATE t SET v = %s WHERE id = %s"
    with Proxy(p) as proxy:
        _ctx, job = _pipeline_job(spark, proxy.port, database, tmp_path)
        reader = BinlogReader(job.options())
        first = reader.initialOffset()
        assert first["gtids"] and first["complete"], first
        with pymysql.connect(host="127.0.0.1", port=p, user="root", password="", database=database,
                             autocommit=True) as conn, conn.cursor() as cur:
            for i in range(1, 41):
                cur.execute(update, (f"in-batch-{i}", i))
            cur.execute("DELETE FROM t WHERE id = 41")
            cur.execute("INSERT INTO t (id, k, v, amount, updated, note) VALUES (9001, 1, 'in-batch-new', 1, NOW(6), 'i')")
            planned = reader.latestOffset(first, None)
            for i in range(51, 71):
                cur.execute(update, (f"after-{i}", i))  # past the batch's end, on the primary
        on_primary = _read(reader, first, planned)
        assert len(on_primary) == 42
        _wait("the replica to hold every transaction", lambda: _holds_all(server, r, p))
        primary.kill()
        _promote(server, r)
        proxy.upstream_port = r
        proxy.cut()
        _sql(r, *(f"UPDATE t SET v = 'replica-{i}' WHERE id = {i}" for i in range(101, 111)), database=database)

        with pytest.raises(SourceChangedError, match="keeps no GTID state at the stored position"):
            BinlogReader(job.options()).latestOffset()  # Spark before 4.2, restarted: not told where it stands
        again = BinlogReader(job.options())  # a driver restarted after the switch, as a pipeline's flow is
        on_replica = _read(again, first, planned)
        fields = ("_table", "_op", "_gtid", "_vals")
        assert [tuple(x[f] for f in fields) for x in on_replica] == [tuple(x[f] for f in fields) for x in on_primary]
        assert all(x["_seq"] >= 10**30 for x in on_replica)  # positions on the replica: the next epoch
        following = again.latestOffset(planned, None)
        assert following["epoch"] == 1 and following["lineage"]["identity"]["server_id"] == 82, following
        assert following["lineage"]["failover"]["applied"] == planned["gtids"]
        after = _read(again, planned, following)
        values = sorted(x["_vals"][2] for x in after)  # the columns id, k, v, ...
        assert values == sorted([f"after-{i}" for i in range(51, 71)] + [f"replica-{i}" for i in range(101, 111)])
        assert not {x["_gtid"] for x in after} & {x["_gtid"] for x in on_primary}
        assert all(x["_seq"] >= 10**30 for x in after)
        assert again.latestOffset(following, None) == following  # nothing new: no batch


class Flow:
    """A streaming query restarted after a failure, as a Lakeflow pipeline retries a failed flow."""

    def __init__(self, start: Any) -> None:
        self.start, self.query, self.failures = start, start(), []

    def until(self, what: str, done: Any, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if not self.query.isActive:
                failure = str(self.query.exception())
                if len(self.failures) >= 3:
                    raise AssertionError(f"the query ended before {what}: {failure}")
                self.failures.append(failure)
                self.query = self.start()
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.5)

    def restart(self) -> None:
        self.query.stop()
        self.query = self.start()


@pytest.mark.slow
def test_the_pipeline_source_fails_over_by_the_gtids_in_its_offsets(pair: tuple[DevDb, DevDb], spark: Any,
                                                                     tmp_path: Path) -> None:
    """The Lakeflow pipeline's binlog source, as stream_job builds it, keeps no files of its own: the GTID
    state travels in the offsets Spark checkpoints. Read through the proxy into a Delta table (the
    pipeline's binlake_changes), with writers on; the primary killed, the replica promoted and the proxy
    pointed at it mid-query: the running query follows, a restarted one (a new pipeline update, the same
    job) knows the new server from its checkpoint, and the snapshot plus every change read equals the new
    primary's table, no transaction read twice."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from binlake.lake import bronze

    primary, replica = pair
    server = primary.server
    database = "pipefail"
    p, r = _seeded(primary, replica, database, ROWS)
    with Proxy(p) as proxy:
        ctx, job = _pipeline_job(spark, proxy.port, database, tmp_path)
        sink, checkpoint = str(tmp_path / "changes"), str(tmp_path / "checkpoint")

        def start() -> Any:
            return (spark.readStream.format("binlake_binlog").options(**job.options()).load()
                    .writeStream.format("delta").option("checkpointLocation", checkpoint)
                    .trigger(processingTime="1 second").start(sink))

        writers = ReconnectingWriters(p, database, ROWS, seed=91)
        writers.start()
        flow = Flow(start)
        try:
            flow.until("a few batches on the primary", lambda: writers.done > 300 and _end_offset(flow.query) is not None)
            writers.stop_flag.set()
            writers.join(timeout=30)
            _wait("the replica to hold every transaction", lambda: _holds_all(server, r, p))
            primary.kill()
            _promote(server, r)
            proxy.upstream_port = r
            proxy.cut()
            writers = ReconnectingWriters(r, database, ROWS, seed=92)
            writers.fresh = 20_000_000
            writers.start()
            flow.until("batches on the replica", lambda: int((_end_offset(flow.query) or {}).get("epoch") or 0) == 1
                       and writers.done > 300)
            flow.restart()  # the same job, whose lineage still names the primary
            flow.until("more batches after the restart", lambda: writers.done > 600)
            writers.stop_flag.set()
            writers.join(timeout=30)
            head = _sql(r, "SHOW BINARY LOG STATUS" if server == "mysql" else "SHOW BINLOG STATUS")[0]
            flow.until("the query to reach the new primary's head", lambda: (
                (end := _end_offset(flow.query)) is not None and int(end.get("epoch") or 0) == 1
                and (int(end["file"].rsplit(".", 1)[1]), end["pos"]) >= (int(str(head[0]).rsplit(".", 1)[1]),
                                                                        int(head[1]))))
            end = _end_offset(flow.query)
        finally:
            writers.stop_flag.set()
            flow.query.stop()
    # a batch cut mid-read by the switch fails, and is read again from the new server by GTID
    assert all("read again, from the new server by GTID" in f for f in flow.failures), flow.failures
    assert end is not None and end["lineage"]["identity"]["server_id"] == 82 and end["gtids"], end
    assert end["lineage"]["failover"]["from"]["server_id"] == 81
    name = f"{database}.t"
    schema = ctx.schemas()[name]
    changes = spark.read.format("delta").load(sink)
    typed = bronze.typed(changes.where(F.col("_table") == name), schema)
    snapshot = spark.read.format("delta").load(ctx.target.bronze(name).location).where("_op = 'r'")
    every = typed.unionByName(snapshot.select(*typed.columns))
    last = every.withColumn("n", F.row_number().over(Window.partitionBy("id").orderBy(F.col("_seq").desc())))
    state = last.where("n = 1 AND _op != 'd'").select("id", "k", "v", "amount", "updated", "note")
    assert sorted(tuple(x) for x in state.collect()) == source_rows(r, database)
    assert typed.groupBy("id", "_seq", "_op").count().where("count > 1").count() == 0
    epochs = typed.selectExpr("_seq >= 1e30 AS later", "_gtid").distinct()
    assert {x["later"] for x in epochs.select("later").distinct().collect()} == {False, True}
    again = epochs.groupBy("_gtid").count().where("count > 1").count()
    assert again == 0, f"{again} transactions read on both servers"
