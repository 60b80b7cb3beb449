"""The source stops and starts while a continuous `binlake run` streams: the stream reconnects with
backoff and continues without loss; SIGTERM then ends the run cleanly at a micro-batch boundary. A
source that stays away longer than source.reconnect-timeout ends the run with a one-line error.

The server here is a private one (its own data directory): stopping the session's server would
pull it from under the other tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from binlake.source.binlog_reader import RowChange, read_changes
from binlake.config import load
from binlake.commands.devdb import DevDb
from binlake.source.connection import connect
from binlake.source.dialect import binlog_head
from binlake.lake.checkpoint import committed_offset
from binlake.lake.target import Target

from .helpers import seq
from .workload import BINLAKE, CLI_ENV, ROOT, Writers, bronze_duplicates, create_table, silver_rows, source_rows, write_config


@pytest.fixture(scope="module")
def private_db(dev_db: DevDb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevDb]:
    db = DevDb(datadir=tmp_path_factory.mktemp(f"reconnect-{dev_db.server}") / "db", server_id=9,
               server=dev_db.server)
    db.start()
    try:
        yield db
    finally:
        db.stop()


def start_run(cfg_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ, **CLI_ENV)
    env.pop("BINLAKE_RUN_PGID", None)
    return subprocess.Popen([*BINLAKE, "run", "-c", str(cfg_path), *extra], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


@contextlib.contextmanager
def running(cfg_path: Path, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """A continuous `binlake run`, killed at the end if the test left it running."""
    run = start_run(cfg_path, *extra)
    try:
        yield run
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


def stop_cleanly(run: subprocess.Popen[str]) -> str:
    """SIGTERM: the run ends at a micro-batch boundary with exit code 0. Its stderr."""
    run.send_signal(signal.SIGTERM)
    _out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    return err


def wait_for(what: str, done: Callable[[], bool], run: subprocess.Popen[str], timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if run.poll() is not None:
            raise AssertionError(f"the run ended (rc {run.returncode}) before {what}: {run.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(run.pid, signal.SIGKILL)  # what it said is read once it has ended
            raise AssertionError(f"timed out waiting for {what}; the run said: {run.communicate()[1][-3000:]}")
        time.sleep(0.5)


def caught_up(db: DevDb, checkpoint: str) -> Callable[[], bool]:
    conn = connect({"host": "127.0.0.1", "port": db.running_port(), "user": "root", "password": ""})
    head = binlog_head(conn)
    conn.close()
    return lambda: (committed_offset(checkpoint) or head.__class__("x.0", 0)) >= head


def restart_later(db: DevDb, after: float) -> threading.Thread:
    port = db.running_port()
    db.stop()
    again = DevDb(datadir=db.datadir, port=port, server_id=9, server=db.server)
    thread = threading.Thread(target=lambda: (time.sleep(after), again.start()))
    thread.start()
    return thread


def test_binlog_read_survives_a_restart_mid_transaction(private_db: DevDb) -> None:
    """The reader loses the server in the middle of a transaction's rows (the consumer stops it
    there), waits with backoff, reopens at the transaction's start and skips what it yielded: the
    rows equal those of an uninterrupted read of the same range, none lost or repeated."""
    port = private_db.running_port()
    params = {"host": "127.0.0.1", "port": port, "user": "root", "password": "", "connect_timeout": 2}
    with private_db.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE mid")
        cur.execute("USE mid")
        cur.execute("CREATE TABLE mid.a (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE mid.b (id INT PRIMARY KEY, v INT)")
        start = binlog_head(conn)
        cur.execute(f"INSERT INTO mid.a SELECT seq, seq FROM {seq(1, 300)}")
        cur.execute("BEGIN")
        for i in range(20):  # one transaction, many statements and tables
            cur.execute("UPDATE mid.a SET v = v + 1 WHERE id BETWEEN %s AND %s", (i * 10, i * 10 + 30))
            cur.execute("INSERT INTO mid.b VALUES (%s, %s)", (i, i))
        cur.execute("COMMIT")
        cur.execute("DELETE FROM mid.a WHERE id > 250")
        stop = binlog_head(conn)

    def key(c: RowChange) -> tuple[object, ...]:
        return (c.table, c.op, c.file, c.pos, c.row, repr(c.before), repr(c.after), c.gtid)

    wanted = lambda d, t: d == "mid"  # noqa: E731
    clean = [key(c) for c in read_changes(params, 5650, start, stop, wanted)]
    assert len(clean) > 600
    # every row carries its transaction's GTID (MariaDB: domain-server-sequence, MySQL: source uuid:number);
    # one transaction, one GTID
    gtids = [k[-1] for k in clean]
    gtid = r"0-9-\d+" if private_db.server == "mariadb" else r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}:\d+"
    assert all(re.fullmatch(gtid, str(g)) for g in gtids), gtids[:3]
    assert len(set(gtids)) == 3

    got: list[tuple[object, ...]] = []
    restarted = None
    for change in read_changes(params, 5651, start, stop, wanted, reconnect_timeout=120):
        got.append(key(change))
        if len(got) == 450:  # inside the transaction's updates
            restarted = restart_later(private_db, 3)
    assert restarted is not None
    restarted.join()
    assert got == clean


@pytest.mark.slow
def test_source_restart_while_streaming(private_db: DevDb, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = private_db.running_port()
    assert port is not None
    database = "shop"
    with private_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    rows = 200
    create_table(port, database, rows)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=200, group_size=4)
    cfg = load(cfg_path)
    target = Target.of(cfg)
    name = f"{database}.t"

    with running(cfg_path, "--set", "source.reconnect-timeout=120", "--set", "source.connect-timeout=2") as run:
        with Writers(port, database, rows, threads=1, pause=0.02):
            wait_for("a first micro-batch", lambda: committed_offset(target.checkpoint) is not None, run)
            time.sleep(2)
        private_db.stop()
        time.sleep(4)  # a few failed attempts, with backoff
        assert run.poll() is None, run.stderr.read()[-3000:] if run.stderr else ""
        DevDb(datadir=private_db.datadir, port=port, server_id=9, server=private_db.server).start()
        with Writers(port, database, rows, threads=1, pause=0.02) as after:
            time.sleep(4)
        assert after.ops > 20  # (its inserts may collide with the first writers' fresh ids: same seed)
        wait_for("the stream to catch up after the restart", caught_up(private_db, target.checkpoint), run)
        stop_cleanly(run)

    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0

    # a source gone for longer than source.reconnect-timeout: the run fails loudly, exit code 1
    with running(cfg_path, "--set", "source.reconnect-timeout=3", "--set", "source.connect-timeout=2") as run:
        with private_db.connect(database) as conn, conn.cursor() as cur:
            # an insert of a new key always writes an event (an update of a row the writers deleted would not)
            cur.execute("INSERT INTO t VALUES (999999999, 1, 'streaming', 1, NOW(6), NULL)")
        # the position is newer than anything committed so far: reached only once this run streams
        wait_for("the restarted run to stream", caught_up(private_db, target.checkpoint), run)
        private_db.stop()
        out, err = run.communicate(timeout=600)
    assert run.returncode == 1, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("binlake:")]
    assert len(lines) == 1 and "source.reconnect-timeout=3" in lines[0] and f":{port}" in lines[0], err[-3000:]
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
