"""Two MySQL settings write row changes in forms mysql-replication does not hand over whole:

- `binlog_transaction_compression=ON`: a transaction's events arrive zstd-compressed inside one
  Transaction_payload event, which the library does not decode;
- `binlog_row_value_options=PARTIAL_JSON`: an update that changes part of a large JSON value logs
  only the change (a JSON diff); the library decodes one diff of possibly several.

Left out of the events binlake asks for, both were skipped without a word: their rows were lost. Now
a partial update that changed no JSON in place is read whole (the JSON it left alone is taken from
the before image); a JSON diff and a compressed transaction stop the read with one line saying what
to change. `binlake check` names both settings when they are on globally. A tagged GTID (8.4+),
which the library does not decode either, reaches the change as `uuid:tag:n`."""

from __future__ import annotations

import json

from typing import Any

import pytest

from binlake import config
from binlake.commands.devdb import DevDb
from binlake.errors import RuntimeFailure
from binlake.source.binlog_reader import read_changes
from binlake.source.dialect import binlog_head
from binlake.source.mysql_json import to_text
from binlake.source.validation import check

from .helpers import params
from .workload import run_cli


@pytest.fixture
def mysql(dev_db: DevDb, database: str) -> DevDb:
    if dev_db.server != "mysql":
        pytest.skip("MariaDB has neither binlog_transaction_compression nor PARTIAL_JSON")
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, j JSON, v INT)")
        cur.execute("INSERT INTO t VALUES (1, JSON_OBJECT('a', 1, 'big', REPEAT('x', 2000)), 0)")
    return dev_db


def _changes(db: DevDb, database: str, *statements: str, session: str) -> list[Any]:
    with db.connect(database) as conn, conn.cursor() as cur:
        cur.execute(session)
        start = binlog_head(conn)
        for s in statements:
            cur.execute(s)
        stop = binlog_head(conn)
    return list(read_changes(params(db), 7501, start, stop, lambda d, t: d == database))


def test_a_partial_update_is_read_whole_or_refused(mysql: DevDb, database: str) -> None:
    partial = "SET SESSION binlog_row_value_options='PARTIAL_JSON'"
    got = _changes(mysql, database, "UPDATE t SET v = 5 WHERE id = 1", session=partial)
    assert [c.op for c in got] == ["u"]
    assert got[0].after["j"] == got[0].before["j"] and json.loads(to_text(got[0].before["j"]))["big"] == "x" * 2000
    assert got[0].after["v"] == 5
    with pytest.raises(RuntimeFailure, match=rf"{database}.t has a partial JSON update .* column j,.*"
                                             r"binlog_row_value_options=''"):
        _changes(mysql, database, "UPDATE t SET j = JSON_SET(j, '$.a', 7) WHERE id = 1", session=partial)


def test_a_compressed_transaction_stops_a_run_with_one_line(mysql: DevDb, database: str, tmp_path: Any) -> None:
    port = mysql.running_port()
    cfg = tmp_path / "binlake.yml"
    cfg.write_text(f"source:\n  port: {port}\n  username: root\n  password: ''\n  tables: ['{database}\\.t']\n"
                   f"  server-id: 5750-5754\ntarget:\n  path: {tmp_path / 'lake'}\n")
    assert run_cli("run", "-c", str(cfg), "--until-caught-up").returncode == 0
    with mysql.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_transaction_compression=ON")
        cur.execute("INSERT INTO t VALUES (2, '[2]', 2)")
    done = run_cli("run", "-c", str(cfg), "--until-caught-up")
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("binlake:")]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "\tat org.apache" not in done.stderr, "a JVM trace reached the console: " + done.stderr[-3000:]
    assert "compressed transaction" in (tmp_path / "lake" / "_binlake" / "spark.log").read_text()
    assert "compressed transaction" in lines[0] and "binlog_transaction_compression=OFF" in lines[0], lines[0]


def test_check_names_both_settings(mysql: DevDb) -> None:
    cfg = config.load(None, [f"source.port={mysql.running_port()}"], env={})
    with mysql.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_transaction_compression=ON")
        cur.execute("SET GLOBAL binlog_row_value_options='PARTIAL_JSON'")
        try:
            found = check(cfg)
        finally:
            cur.execute("SET GLOBAL binlog_transaction_compression=OFF")
            cur.execute("SET GLOBAL binlog_row_value_options=''")
    assert any(p.startswith("binlog_transaction_compression is ON") for p in found), found
    assert any(p.startswith("binlog_row_value_options is PARTIAL_JSON") for p in found), found
    assert check(cfg) == []


def test_a_tagged_gtid_reaches_the_change(mysql: DevDb, database: str) -> None:
    """MySQL 8.4+ tags GTIDs (`uuid:tag:n`); mysql-replication leaves the tagged event undecoded."""
    got = _changes(mysql, database, "INSERT INTO t VALUES (3, '[3]', 3)", "SET gtid_next = 'AUTOMATIC'",
                   "INSERT INTO t VALUES (4, '[4]', 4)", session="SET gtid_next = 'AUTOMATIC:binlake_tag'")
    with mysql.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_uuid")
        uuid = cur.fetchone()[0]
    tagged, plain = got[0].gtid, got[1].gtid
    assert tagged.startswith(f"{uuid}:binlake_tag:") and tagged.rsplit(":", 1)[1].isdigit(), tagged
    assert plain.startswith(f"{uuid}:") and plain.count(":") == 1, plain
