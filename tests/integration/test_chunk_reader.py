"""The chunk read against the real server: a chunk read equals the chunk's state at its HW.

On both servers the racing writes land between a settled LW and HW (MariaDB selects inside a
consistent snapshot) and the fold replays them, so the rows are the state at HW, which here (no write
after the read) is the table's state when the read returns."""

from __future__ import annotations

import pytest

from binlake.source.catalog import load_schema
from binlake.source.chunk_reader import Hooks, read_chunk
from binlake.source.connection import Connections, connect
from binlake.source.dialect import binlog_head, transactions_between
from binlake.splits import Split

from .helpers import execute, fetch, params, seq


def _state(dev_db, database, lo, hi):  # type: ignore[no-untyped-def]
    rows = fetch(dev_db, database, f"SELECT id, v FROM t WHERE id >= {lo} AND id < {hi} ORDER BY id")
    return [(str(i), v) for i, v in rows]


def test_fold_between_watermarks_gives_state_at_hw(dev_db, database):  # type: ignore[no-untyped-def]
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
            f"INSERT INTO t SELECT seq, CONCAT('v', seq) FROM {seq(1, 100)}")
    p = params(dev_db)
    conn = connect(p)
    schema = load_schema(conn, database, "t")
    split = Split(f"{database}.t", 0, 1, ("10",), ("50",))

    def racing(*sqls: str):  # type: ignore[no-untyped-def]
        return lambda: execute(dev_db, database, *sqls)

    hooks = Hooks(
        after_low_watermark=racing("UPDATE t SET v = 'after-lw' WHERE id = 11",
                                   "DELETE FROM t WHERE id = 12", "INSERT INTO t VALUES (200, 'outside')"),
        after_select=racing("INSERT INTO t VALUES (12, 're-inserted')", "UPDATE t SET id = 555 WHERE id = 13",
                            "UPDATE t SET id = 14000 WHERE id = 14", "DELETE FROM t WHERE id = 15",
                            "UPDATE t SET id = 15 WHERE id = 60", "DELETE FROM t WHERE id = 15"),
        before_high_watermark=racing("UPDATE t SET v = 'multi' WHERE id BETWEEN 20 AND 30",
                                     "INSERT INTO t VALUES (15, 'back')", "UPDATE t SET id = 16 WHERE id = 70"),
    )
    execute(dev_db, database, "DELETE FROM t WHERE id = 16")
    result = read_chunk(p, schema, split, server_id=5499, hooks=hooks)
    got = sorted(((r["id"], r["v"]) for r in result.rows), key=lambda x: int(x[0]))
    assert result.hw > result.lw
    assert result.folded_events > 0
    assert got == _state(dev_db, database, 10, 50)
    assert ("12", "re-inserted") in got and ("15", "back") in got and ("16", "v70") in got
    assert all(k not in {"13", "14"} for k, _ in got)


def test_chunk_without_concurrent_writes_has_equal_watermarks(dev_db, database):  # type: ignore[no-untyped-def]
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
            f"INSERT INTO t SELECT seq, 'x' FROM {seq(1, 30)}")
    p = params(dev_db)
    schema = load_schema(connect(p), database, "t")
    result = read_chunk(p, schema, Split(f"{database}.t", 0, 0, None, ("20",)), server_id=5499)
    assert result.hw == result.lw and result.folded_events == 0
    assert sorted(int(r["id"]) for r in result.rows) == list(range(1, 20))


def test_the_binlog_between_two_positions_holds_a_transaction_or_only_file_events(dev_db, database):  # type: ignore[no-untyped-def]
    """What MariaDB's settle asks when the committed end has not reached the head for a while: whether
    a transaction lies between them, or only a rotation and the next file's header."""
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY)")
    conn = connect(params(dev_db))
    try:
        before = binlog_head(conn)
        execute(dev_db, database, "INSERT INTO t VALUES (1)")
        after = binlog_head(conn)
        assert transactions_between(conn, before, after)
        with conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
        rotated = binlog_head(conn)
        assert rotated.file != after.file
        assert not transactions_between(conn, after, rotated)
        assert transactions_between(conn, before, rotated)
    finally:
        conn.close()


def _opened(dev_db) -> int:  # type: ignore[no-untyped-def]
    """Connections the server has accepted so far, this look's own included."""
    return int(fetch(dev_db, "mysql", "SHOW GLOBAL STATUS LIKE 'Connections'")[0][1])


def test_a_reader_keeps_its_connections_across_chunks(dev_db, database, monkeypatch):  # type: ignore[no-untyped-def]
    """A snapshot reader reads its chunks on two held connections (a TLS handshake each where the
    server offers TLS), lends the control one to the fold's binlog reader, opens them again when the
    server has dropped them, and after a failed read starts from new ones."""
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
            f"INSERT INTO t SELECT seq, 'x' FROM {seq(1, 100)}")
    p = params(dev_db)
    schema = load_schema(connect(p), database, "t")
    chunks = [Split(f"{database}.t", 0, i, (str(i * 20),) if i else None, (str(i * 20 + 20),)) for i in range(5)]
    held = Connections(p)
    before = _opened(dev_db)
    for split in chunks + chunks:  # ids 1 to 100, cut at 20, 40, ...
        assert len(read_chunk(p, schema, split, server_id=5498, held=held).rows) == (19 if split.index == 0 else 20)
    assert _opened(dev_db) - before - 1 == 2  # ten reads, no write: the control and the bulk connection

    before = _opened(dev_db)
    write = Hooks(after_select=lambda: execute(dev_db, database, "UPDATE t SET v = 'folded' WHERE id = 25"))
    result = read_chunk(p, schema, chunks[1], server_id=5498, hooks=write, held=held)
    assert result.folded_events == 1 and ("25", "folded") in [(r["id"], r["v"]) for r in result.rows]
    # the hook's own connection and the binlog dump's: mysql-replication's control connection is lent
    assert _opened(dev_db) - before - 1 == 2

    monkeypatch.setattr(Connections, "IDLE", 0.0)  # ping before every use
    for conn in (held.control(), held.bulk()):
        execute(dev_db, database, f"KILL {conn.thread_id()}")
    got = read_chunk(p, schema, chunks[2], server_id=5498, held=held)
    assert sorted(int(r["id"]) for r in got.rows) == list(range(40, 60))

    def fail() -> None:
        raise RuntimeError("cut off")

    with pytest.raises(RuntimeError, match="cut off"):
        read_chunk(p, schema, chunks[3], server_id=5498, hooks=Hooks(after_select=fail), held=held)
    assert not held._held  # both closed: a retry starts from new connections
    assert len(read_chunk(p, schema, chunks[3], server_id=5498, held=held).rows) == 20
    held.close()
