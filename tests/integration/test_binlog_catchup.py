"""A binlog read up to, or from, a position the server reported written a moment ago.

`SHOW ... STATUS` reports the binlog's written end, but a dump serves only what is synced; with
`sync_binlog=1` and a slow disk (every fsync of the server slowed by a shim) MySQL's dump ends short
of that position. That is a short wait, not a server restart (what binlake took it for before). The
reader treats error 1236 'position > file size' the same way, though a dump asked to start at the
written end did not get it in 200 tries here. A purged file is still reported as one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from binlake.commands.devdb import DevDb
from binlake.errors import PositionGoneError
from binlake.offsets import BinlogPosition
from binlake.source import binlog_dump
from binlake.source.binlog_reader import read_changes
from binlake.source.dialect import binlog_head

from .capture import connect
from ..conftest import SERVERS
from .oracle import build_shim, shim_loaded

WRITERS = 8


@pytest.fixture(scope="module", params=SERVERS)
def slow_disk(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevDb]:
    """A private server whose every fsync sleeps 20 ms, with sync_binlog=1: a busy disk."""
    root = tmp_path_factory.mktemp(f"catchup-{request.param}")
    shim = build_shim(root)
    db = DevDb(datadir=root / "db", server=request.param, server_id=31,
               extra_options=("--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1"),
               env={"LD_PRELOAD": str(shim), "BINLAKE_FSYNC_DELAY_US": "20000"})
    db.start()
    assert db.pid() is not None and shim_loaded(db.pid(), shim), "the fsync shim is not loaded"  # type: ignore[arg-type]
    yield db
    db.stop()


def _params(db: DevDb) -> dict[str, Any]:
    # plain TCP: a TLS handshake before each dump delays it past the sync that the early end races
    return {"host": "127.0.0.1", "port": db.running_port(), "user": "root", "password": "", "connect_timeout": 5,
            "read_timeout": 30, "tls": {"mode": "disabled"}}


class Inserts:
    """Writers inserting single rows, each in its own transaction, until stopped."""

    def __init__(self, port: int, database: str) -> None:
        self.port, self.database = port, database
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(WRITERS)]

    def __enter__(self) -> Inserts:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for t in self.threads:
            t.join()

    def _work(self) -> None:
        with connect(self.port, self.database) as conn, conn.cursor() as cur:
            while not self.done.is_set():
                cur.execute("INSERT INTO t (v) VALUES ('x')")


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every catch-up wait the reader makes (the real wait runs; this only counts it)."""
    seen: list[str] = []
    real = binlog_dump.Catchup.wait

    def counted(self: binlog_dump.Catchup, why: str) -> None:
        seen.append(why)
        real(self, why)

    monkeypatch.setattr(binlog_dump.Catchup, "wait", counted)
    return seen


def _table(db: DevDb, name: str) -> None:
    with connect(db.running_port()) as conn, conn.cursor() as cur:  # type: ignore[arg-type]
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute(f"CREATE TABLE `{name}`.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(8))")


def test_reads_to_a_just_written_position_wait_for_it(slow_disk: DevDb, waits: list[str]) -> None:
    """Reads from one reported position to the next, each started right after the second was
    reported: every read reaches its end with every insert between, and some had to wait."""
    p = _params(slow_disk)
    _table(slow_disk, "ahead")
    conn = connect(slow_disk.running_port())  # type: ignore[arg-type]
    reads = 0
    seen: list[tuple[int, BinlogPosition, BinlogPosition]] = []  # (id, its read's start, its read's stop)
    # before the writers start: a writer's insert committed before it would be in no read
    first = start = binlog_head(conn)
    with Inserts(slow_disk.running_port(), "ahead"):  # type: ignore[arg-type]
        while reads < 50 or (not waits and reads < 400):
            stop = binlog_head(conn)
            got = list(read_changes(p, 7001, start, stop, lambda d, t: d == "ahead"))
            assert all(start <= c.position < stop for c in got)
            seen += [(int(c.after["id"]), start, stop) for c in got]
            start, reads = stop, reads + 1
    conn.close()
    with connect(slow_disk.running_port(), "ahead") as check, check.cursor() as cur:  # type: ignore[arg-type]
        cur.execute("SELECT id FROM t")
        table = {int(r[0]) for r in cur.fetchall()}
    head = binlog_head(connect(slow_disk.running_port()))  # type: ignore[arg-type]
    seen += [(int(c.after["id"]), start, head) for c in read_changes(p, 7001, start, head, lambda d, t: d == "ahead")]
    ids = [i for i, _, _ in seen]
    if sorted(ids) != sorted(table):
        # where the binlog holds what the reads missed, by one read of the whole range
        whole = {int(c.after["id"]): c.position for c in read_changes(p, 7001, first, head, lambda d, t: d == "ahead")}
        missed = sorted(table - set(ids))
        twice = sorted({i for i in ids if ids.count(i) > 1})
        bounds = sorted({b for _, a, z in seen for b in (a, z)})
        pytest.fail(f"the reads lost {missed} (in one whole read at {[str(whole.get(i)) for i in missed]}) and "
                    f"repeated {twice}; read bounds near them: "
                    f"{[str(b) for b in bounds if any(w and abs(b.pos - w.pos) < 2000 for w in map(whole.get, missed))]}")
    if slow_disk.server == "mysql":  # MariaDB's dump serves the written end: it never ended short in 1,500 reads
        assert waits, f"no read in {reads} found the dump short of a reported position: the case was not reproduced"


def _purge_to(cur: Any, old: str, new: str) -> None:
    """PURGE until `old` is gone: MariaDB keeps a file a dump thread still has open (one the test
    before closed may not have ended yet on the server) and only warns."""
    deadline = time.monotonic() + 30
    while True:
        cur.execute(f"PURGE BINARY LOGS TO '{new}'")
        cur.execute("SHOW BINARY LOGS")
        if old not in {row[0] for row in cur.fetchall()}:
            return
        assert time.monotonic() < deadline, f"the server kept {old} after PURGE for 30 s"
        time.sleep(0.2)


def test_a_purged_file_is_still_reported_as_purged(slow_disk: DevDb) -> None:
    p = _params(slow_disk)
    conn = connect(slow_disk.running_port())  # type: ignore[arg-type]
    old = binlog_head(conn)
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        new = binlog_head(conn)
        _purge_to(cur, old.file, new.file)
    conn.close()
    with pytest.raises(PositionGoneError, match=f"binlog file {old.file} .* has been purged"):
        list(read_changes(p, 7003, BinlogPosition(old.file, old.pos), None, lambda d, t: True))
