"""The chunk oracle (see `oracle.py`): every chunk `read_chunk` emits under 16 writers on hot keys and
a slowed fsync equals the binlog replayed independently up to the chunk's HW.

`test_every_chunk_equals_the_binlog_at_its_hw` is the CI form: BINLAKE_ORACLE_READS reads per
server (2000 unless set; `make soak` sets 20000). The mutation tests prove the oracle can fail: each
breaks one step of the read by monkeypatching the chunk reader and expects mismatches. They take a
few minutes, so they run only with BINLAKE_ORACLE_MUTATIONS=1 (`make soak` sets it), with
BINLAKE_ORACLE_MUTATION_READS reads each (400 unless set).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from binlake.devdb import DevDb, Server
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema
from binlake.source import chunk_reader
from binlake.source.catalog import load_schema
from binlake.source.connection import connect
from binlake.source.dialect import Dialect, binlog_head

from ..conftest import SERVERS
from . import oracle
from .helpers import params

READS = int(os.environ.get("BINLAKE_ORACLE_READS") or 2000)
MUTATION_READS = int(os.environ.get("BINLAKE_ORACLE_MUTATION_READS") or 400)
# a read phase that has not reached its count by then reports what it has (and fails)
READ_BUDGET = float(os.environ.get("BINLAKE_ORACLE_BUDGET_S") or 900)
WRITERS = 16
READER_IDS = [5401, 5402]  # one binlog replica id per reader thread (the fold opens a binlog dump)
REPLAY_ID = 5499

mutation = pytest.mark.skipif(not os.environ.get("BINLAKE_ORACLE_MUTATIONS"),
                              reason="mutation runs take minutes: set BINLAKE_ORACLE_MUTATIONS=1 (make soak)")


@dataclass
class Source:
    """A private server with a slowed fsync, and the empty table created at binlog position `p0`."""

    db: DevDb
    server: Server
    params: dict[str, Any]
    database: str
    schema: TableSchema
    p0: BinlogPosition


@pytest.fixture(params=SERVERS)
def source(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    """A server of its own (not the shared `dev_db`): every commit syncs the binlog and the redo log,
    and every sync is slowed by the LD_PRELOAD shim, which widens the window between a transaction
    reaching the binlog and becoming visible."""
    server: Server = request.param
    tmp = tmp_path_factory.mktemp(f"oracle-{server}")
    shim = oracle.build_shim(tmp)
    db = DevDb(datadir=tmp / "db", server=server, server_id=1,
               extra_options=("--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1"),
               env={"LD_PRELOAD": str(shim)})
    db.start()
    try:
        pid = db.pid()
        assert pid is not None and oracle.shim_loaded(pid, shim), f"{shim} is not mapped into {db.label}"
        database = "oracle"
        with db.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {database}")
            cur.execute(f"USE {database}")
            cur.execute(oracle.TABLE_DDL)
            p0 = binlog_head(conn)
            schema = load_schema(conn, database, oracle.TABLE)
        yield Source(db, server, params(db), database, schema, p0)
    finally:
        db.stop()


def run_oracle(source: Source, reads: int) -> oracle.Report:
    """Writers on, `reads` chunk reads with the real `read_chunk` (as patched by the test), writers
    off, then the binlog from P0 replayed and every read checked against it."""
    chunks = oracle.splits(source.database)
    port = source.db.running_port()
    assert port is not None
    with oracle.Writers(port, source.database, threads=WRITERS) as writers:
        time.sleep(1.0)  # the table starts empty: let the writers fill it first
        done = oracle.read_chunks(chunk_reader.read_chunk, source.params, source.schema, chunks, reads,
                                  READER_IDS, time.monotonic() + READ_BUDGET)
    assert not writers.errors, writers.errors[:3]
    with connect(source.params) as conn:
        end = Dialect.of(conn).head(conn)
    mismatched, events = oracle.check(done.observed, oracle.replay(source.params, source.database, source.p0,
                                                                   end, REPLAY_ID))
    report = oracle.Report(source.server, len(done.observed), mismatched, done.failures,
                           sum(1 for o in done.observed if o.folded), events, done.seconds,
                           writers.commits, writers.conflicts)
    print(f"\n{report}")
    return report


def test_every_chunk_equals_the_binlog_at_its_hw(source: Source) -> None:
    report = run_oracle(source, READS)
    assert report.chunks >= READS, str(report)
    assert not report.failures, str(report)
    assert not report.mismatched, str(report)


def _force_fold_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """MariaDB's exact read is a consistent snapshot with no fold; this sends it down the settled-LW
    path instead, whose settle is a no-op there -- binlake's old status-watermark read."""
    monkeypatch.setattr(Dialect, "snapshot_method", property(lambda self: "settled-gtids"))


@pytest.mark.slow
@mutation
def test_oracle_catches_a_skipped_fold(source: Source, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SELECT's rows emitted as the state at HW: every write between them is missed."""
    if source.server == "mariadb":
        _force_fold_path(monkeypatch)
    monkeypatch.setattr(chunk_reader, "_folded", lambda schema, values, member, changes: values)
    report = run_oracle(source, MUTATION_READS)
    assert report.mismatched, str(report)


@pytest.mark.slow
@mutation
def test_oracle_catches_the_status_watermark(source: Source, monkeypatch: pytest.MonkeyPatch) -> None:
    """LW from the status command alone, not settled: a transaction already in the binlog but not yet
    visible is in neither the SELECT nor the fold."""
    if source.server == "mariadb":
        _force_fold_path(monkeypatch)
    else:
        monkeypatch.setattr(Dialect, "settle", lambda self, conn, timeout: None)
    report = run_oracle(source, MUTATION_READS)
    assert report.mismatched, str(report)


@pytest.mark.slow
@mutation
def test_oracle_catches_a_low_watermark_taken_after_the_select(source: Source,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The read's low watermark re-pointed, once its SELECT has run, at the binlog head read then: a
    write committed after the SELECT's view and before that head is neither selected nor folded.

    The position object the read already holds is changed in place (BinlogPosition is frozen, so with
    object.__setattr__): the fold path's LW as `_low_watermark` returns it, or, on MariaDB's
    consistent read, the snapshot position the read builds (LW = HW there)."""
    pending = threading.local()
    real_low_watermark, real_select, real_position = (chunk_reader._low_watermark, chunk_reader._select,
                                                      chunk_reader.BinlogPosition)

    def low_watermark(params: dict[str, Any], conn: Any, dialect: Dialect, split: Any) -> BinlogPosition:
        pending.position = real_low_watermark(params, conn, dialect, split)
        return pending.position

    def position(file: str, pos: int) -> BinlogPosition:
        pending.position = real_position(file, pos)
        return pending.position

    def select(params: dict[str, Any], schema: TableSchema, split: Any, cur: Any = None) -> list[Any]:
        values = real_select(params, schema, split, cur)
        lw = getattr(pending, "position", None)
        if lw is not None:
            with connect(params) as conn:
                late = Dialect.of(conn).head(conn)
            object.__setattr__(lw, "file", late.file)
            object.__setattr__(lw, "pos", late.pos)
            pending.position = None
        return values

    monkeypatch.setattr(chunk_reader, "_low_watermark", low_watermark)
    monkeypatch.setattr(chunk_reader, "BinlogPosition", position)
    monkeypatch.setattr(chunk_reader, "_select", select)
    report = run_oracle(source, MUTATION_READS)
    assert report.mismatched, str(report)
