"""The source killed with SIGKILL, not stopped: once mid-snapshot and once mid-stream, each time
restarted on the same port after a few seconds, which means the server's own crash recovery
(InnoDB's redo, the binlog's). A continuous `binlake run` with a reconnect timeout rides both out;
writers keep going around the crashes (a transaction in flight at the kill may or may not have
committed: the source after recovery is the truth). At the end silver equals the source and bronze
has no duplicate (key, _seq).

The server runs with `sync_binlog=1` and `innodb_flush_log_at_trx_commit=1`, the settings a
crash-safe source has: without them a real crash can lose transactions the binlog already served,
which no reader can undo."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlake.config import load
from binlake.commands.devdb import DevDb
from binlake.lake.checkpoint import committed_offset
from binlake.lake.target import Target

from ..conftest import SERVERS
from .test_reconnect import caught_up, running, stop_cleanly, wait_for
from .workload import ReconnectingWriters, bronze_duplicates, create_table, silver_rows, source_rows, write_config

ROWS = 20_000
CHUNK = 250  # 80 chunks, a group each: the snapshot takes long enough to crash the server inside it


@pytest.fixture(params=SERVERS)
def crash_safe(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevDb]:
    db = DevDb(datadir=tmp_path_factory.mktemp(f"killed-{request.param}") / "db", server=request.param,
               server_id=61, extra_options=("--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1"))
    db.start()
    yield db
    db.stop()


def _crash(db: DevDb, port: int, down: float) -> threading.Thread:
    """SIGKILL the server now; start it again on its port after `down` seconds (in the background)."""
    db.kill()
    again = DevDb(datadir=db.datadir, port=port, server=db.server, server_id=db.server_id,
                  extra_options=db.extra_options)
    thread = threading.Thread(target=lambda: (time.sleep(down), again.start(timeout=120)))
    thread.start()
    return thread


def _commits(path: str) -> int:
    """Commits in a Delta table's log (a cheap poll: no Spark job)."""
    log = Path(path) / "_delta_log"
    return len(list(log.glob("*.json"))) if log.is_dir() else 0


def _landed(spark: Any, bronze: str) -> int:
    """Chunks whose rows bronze holds (a table planned whole records its chunks' statuses at its end)."""
    return spark.read.format("delta").load(bronze).where("_op = 'r'").select("_chunk").distinct().count()


@pytest.mark.slow
def test_source_killed_mid_snapshot_and_mid_stream(crash_safe: DevDb, spark: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # group by group, by Spark jobs, each group a commit to bronze: a table this small is otherwise
    # read whole in the driver and committed once
    monkeypatch.setenv("BINLAKE_ARROW_ROWS", "0")
    port = crash_safe.running_port()
    assert port is not None
    database = "crashed"
    with crash_safe.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    create_table(port, database, ROWS)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=CHUNK, group_size=1)
    target = Target.of(load(cfg_path))
    name = f"{database}.t"
    chunks = ROWS // CHUNK

    writers = ReconnectingWriters(port, database, ROWS, seed=61)
    writers.start()
    try:
        with running(cfg_path, "--set", "source.reconnect-timeout=180", "--set", "source.connect-timeout=2") as run:
            # bronze's commits: its creation, then one per landed group
            wait_for("a chunk to land", lambda: _commits(target.bronze(name).location) >= 2, run, timeout=600)
            crashed = _crash(crash_safe, port, down=3)
            landed = _landed(spark, target.bronze(name).location)
            assert 0 < landed < chunks, f"{landed} of {chunks} chunks had landed at the crash: not mid-snapshot"
            crashed.join()
            assert run.poll() is None, f"the run ended at the crash mid-snapshot: {run.stderr.read()[-3000:]}"
            wait_for("the stream to start", lambda: committed_offset(target.checkpoint) is not None, run)
            wait_for("the stream to catch up", caught_up(crash_safe, target.checkpoint), run)
            _crash(crash_safe, port, down=3).join()
            time.sleep(3)  # writers write again after recovery
            assert run.poll() is None, f"the run ended at the crash mid-stream: {run.stderr.read()[-3000:]}"
            writers.stop_flag.set()
            writers.join(timeout=60)
            wait_for("the stream to catch up after the crash", caught_up(crash_safe, target.checkpoint), run)
            err = stop_cleanly(run)
    finally:
        writers.stop_flag.set()
        writers.join(timeout=60)
    assert "Traceback" not in err, err[-3000:]
    assert writers.done > 500, f"only {writers.done} writes: the writers did not race the crashes"
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
