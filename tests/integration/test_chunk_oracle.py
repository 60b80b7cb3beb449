"""The chunk oracle (see `oracle.py`): every chunk `read_chunk` emits under 16 writers on hot keys and
a slowed fsync equals the binlog replayed independently up to the chunk's HW.

`test_every_chunk_equals_the_binlog_at_its_hw` is the CI form: BINLAKE_ORACLE_READS reads per server
(CI_READS when unset; `make soak` sets 20000). The mutation tests prove the oracle can fail: each
breaks one step of the read by monkeypatching the chunk reader and expects mismatches. They take
minutes, so they run only with BINLAKE_ORACLE_MUTATIONS=1 (`make soak` sets it), with
BINLAKE_ORACLE_MUTATION_READS reads each (400 unless set).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from binlake.commands.devdb import DevDb, Server
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema
from binlake.source import chunk_reader
from binlake.source.catalog import load_schema
from binlake.source.connection import connect
from binlake.source.dialect import Dialect, binlog_head

from ..conftest import SERVERS
from . import oracle
from .helpers import params

# Reads per server in the CI form (issue 20 asks at least 2,000): about 12 reads/s on MariaDB and 10
# on MySQL under make test's load (a read that folds opens a binlog dump), so about 3 and 2 minutes. The
# status watermark these reads replace was wrong on about 1 MySQL read in 3 and 1 MariaDB read in
# 100; `make soak` runs 20,000.
CI_READS: dict[str, int] = {"mariadb": 2000, "mysql": 1000}
MUTATION_READS = int(os.environ.get("BINLAKE_ORACLE_MUTATION_READS") or 400)
WRITERS = 16
READER_IDS = [5401, 5402]  # one binlog replica id per reader thread (the fold opens a binlog dump)
REPLAY_ID = 5499


def read_budget(reads: int) -> float:
    """Seconds a read phase may take before it stops and reports what it has (and fails): generous,
    as other test sessions may share the machine."""
    return float(os.environ.get("BINLAKE_ORACLE_BUDGET_S") or 600 + 0.5 * reads)


# mysql-replication's own, once per binlog dump the fold opens
pytestmark = pytest.mark.filterwarnings("ignore:'db' is deprecated:DeprecationWarning")
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
                                  READER_IDS, time.monotonic() + read_budget(reads))
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


def reads_for(server: Server) -> int:
    return int(os.environ.get("BINLAKE_ORACLE_READS") or CI_READS[server])


@pytest.mark.long
def test_every_chunk_equals_the_binlog_at_its_hw(source: Source) -> None:
    """Zero mismatches, zero failed reads.

    A mismatch whose differing keys were last changed before LW points at the low watermark (the
    SELECT did not see a transaction the settled position claims); between LW and HW, at the fold.
    The report names each differing key's next change after HW too: a change just after HW that the
    chunk already holds points at a SELECT that saw past its HW."""
    reads = reads_for(source.server)
    report = run_oracle(source, reads)
    assert report.chunks >= reads, str(report)
    assert not report.failures, str(report)
    assert not report.mismatched, str(report)


@pytest.mark.slow
@mutation
def test_oracle_catches_a_skipped_fold(source: Source, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SELECT's rows emitted as the state at HW: every write between them is missed. Measured in two
    runs: MySQL 290 of 301 and 386 of 401 reads mismatched, MariaDB 220 of 301 and 254 of 401 (its
    read then folding up to its snapshot's position), and 259 of 401 with its settled read."""
    monkeypatch.setattr(chunk_reader, "_folded", lambda schema, values, member, changes: values)
    report = run_oracle(source, MUTATION_READS)
    assert report.mismatched, str(report)


@pytest.mark.slow
@mutation
def test_oracle_catches_the_status_watermark(source: Source, monkeypatch: pytest.MonkeyPatch) -> None:
    """binlake's read before the exact forms: LW from the status command alone, not settled, and a
    plain SELECT: a transaction already in the binlog but not yet visible is in neither the SELECT nor
    the fold. (With MariaDB's consistent-snapshot SELECT kept, 1501 unsettled reads found nothing
    here: the snapshot's start narrows the window too far to measure, though nothing proves it shut.)

    Measured here (3 ms fsync, 16 writers): MySQL 9.7 loses rows in a third to a half of the reads
    (107 of 301, 189 of 401); MariaDB 10.11 in about 1% (3 of 301, 14 of 1501 twice), so MariaDB reads
    1500 chunks (two to four minutes) for an expected 14 mismatches -- 400 would miss them all about
    once in fifty runs."""
    monkeypatch.setattr(Dialect, "settle", lambda self, conn, lw, timeout: None)
    monkeypatch.setattr(Dialect, "snapshot_select", property(lambda self: False))
    report = run_oracle(source, max(MUTATION_READS, 1500 if source.server == "mariadb" else 0))
    assert report.mismatched, str(report)


@pytest.mark.slow
@mutation
def test_oracle_catches_a_low_watermark_taken_after_the_select(source: Source,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The read's low watermark re-pointed, once its SELECT has run, at the binlog head read then: a
    write committed after the SELECT's view and before that head is neither selected nor folded.

    The position object the read already holds is changed in place (BinlogPosition is frozen, so with
    object.__setattr__): the LW `_low_watermark` returns. Measured in two runs: MySQL 301 of 301 and
    401 of 401 reads mismatched, MariaDB (then read by its snapshot's position) 299 of 301 and 401 of
    401, and 272 of 401 with its settled read."""
    class Pending(threading.local):
        position: BinlogPosition | None = None  # the position the read on this thread will use

    pending = Pending()
    real_low_watermark, real_select = chunk_reader._low_watermark, chunk_reader._select

    def low_watermark(params: dict[str, Any], conn: Any, dialect: Dialect, split: Any) -> BinlogPosition:
        lw = pending.position = real_low_watermark(params, conn, dialect, split)
        return lw

    def select(schema: TableSchema, split: Any, cur: Any) -> list[Any]:
        values = real_select(schema, split, cur)
        lw = pending.position
        if lw is not None:
            with connect(source.params) as conn:
                late = Dialect.of(conn).head(conn)
            object.__setattr__(lw, "file", late.file)
            object.__setattr__(lw, "pos", late.pos)
            pending.position = None
        return values

    monkeypatch.setattr(chunk_reader, "_low_watermark", low_watermark)
    monkeypatch.setattr(chunk_reader, "_select", select)
    report = run_oracle(source, MUTATION_READS)
    assert report.mismatched, str(report)
