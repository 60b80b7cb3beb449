"""JSON documents of every shape, through both capture paths, equal to the server's own text.

MySQL logs JSON in a binary form, which binlake prints as the server prints the column
(`binlake.source.mysql_json`); MariaDB's JSON is text. The first test writes thousands of doubles of
every magnitude and compares the binlog's documents, as binlake prints them, with the server's text
of the same rows; the second captures documents of every shape through the snapshot and binlog
inserts and updates and compares silver, read with delta-rs, with the source.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from binlake.schema import Column
from binlake.source import binlog_reader  # noqa: F401 - the binlog reader's settings for the library

from .capture import connect, run_once, silver_rows, write_config

DOCUMENTS = [
    "'null'", "'true'", "'false'", "'0'", "'-1'", "'32767'", "'-32768'", "'65535'", "'2147483647'", "'4294967295'",
    "'-9223372036854775808'", "'18446744073709551615'", "'123456789012345678901234567890'", "'1.5e300'", "'1e-7'",
    "'0.1'", "'3.0'", "'-0.0'", "'1e21'", "'5e-324'", "'1.7976931348623157e308'", "'[1.0, 2.50, -0.5, 1e15, 1e16]'",
    "'\"a string \\\\n\\\\t\\\\u0001 \\\\\\\\ \\\\\"quoted\\\\\" / ü 😀\"'", "'\"\"'", "'[]'", "'{}'", "'[[], {}, [[]]]'",
    "'{\"b\": 1, \"a\": [1, 2, {\"ü😀\": null}], \"aa\": {}, \"\": [], \"long key with spaces\": \"v\"}'",
    "JSON_OBJECT('d', CAST('2024-01-02' AS DATE), 't', CAST('12:34:56.5' AS TIME(1)), 'neg', CAST('-01:02:03' AS TIME),"
    " 'dt', CAST('2024-01-02 03:04:05.123456' AS DATETIME(6)), 'dec', CAST(1.50 AS DECIMAL(5,2)),"
    " 'small', CAST(0.001 AS DECIMAL(10,4)), 'negdec', CAST(-12.345 AS DECIMAL(10,3)), 'f', CAST(1.5 AS FLOAT))",
    "JSON_ARRAY(CAST('838:59:59' AS TIME), CAST(x'00ff' AS BINARY), CAST('2024-01-02 03:04:05' AS DATETIME),"
    " CAST(123456789012345678901234567890.123 AS DECIMAL(40,3)))",
    # a document past 64 KiB: the large object and array forms, with 32-bit integers inline
    "JSON_OBJECT('big', REPEAT('x', 70000), 'n', 2147483647, 'm', -2147483648, 'arr', JSON_ARRAY(1, 70000, 'y'))",
    "JSON_ARRAY(REPEAT('z', 66000), 4294967295, -7, JSON_OBJECT('k', 'v'))",
]


def _doubles(rnd: random.Random) -> list[float]:
    out = [0.5, 1.0, 100.0, 1e15, 1e16, 1e-15, 1e-16, 123456789012345.0, 1234567890123456.0, 12345678901234567.0,
           0.000123, 1e-4, 9.999999999999999e14, 2.2250738585072014e-308, -1e-300]
    for _ in range(2000):
        kind = rnd.random()
        if kind < 0.4:
            out.append(rnd.uniform(-1, 1) * 10 ** rnd.randint(-30, 30))
        elif kind < 0.6:
            out.append(float(rnd.randint(-10**18, 10**18)) / 10 ** rnd.randint(0, 20))
        elif kind < 0.8:
            out.append(round(rnd.uniform(-1000, 1000), rnd.randint(0, 6)))
        else:
            out.append(struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0])
    return [d for d in out if d == d and abs(d) != float("inf")]


def test_doubles_and_documents_print_as_the_server_prints_them(dev_db, database) -> None:  # type: ignore[no-untyped-def]
    if dev_db.server != "mysql":
        pytest.skip("MariaDB's JSON is text: the binlog carries it as written")
    port = dev_db.running_port()
    doubles = _doubles(random.Random(29))
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOG STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute("CREATE TABLE j (id INT PRIMARY KEY, j JSON)")
        for i, doc in enumerate(DOCUMENTS):
            cur.execute(f"INSERT INTO j VALUES ({i}, {doc})")
        for i in range(0, len(doubles), 50):
            cur.executemany("INSERT INTO j VALUES (%s, JSON_ARRAY(%s))",
                            [(1000 + i + k, d) for k, d in enumerate(doubles[i:i + 50])])
        cur.execute("SELECT id, j FROM j")
        source = dict(cur.fetchall())
    column = Column("j", "json", "json")
    stream = BinLogStreamReader(connection_settings={"host": "127.0.0.1", "port": port, "user": "root", "passwd": ""},
                                server_id=6230, log_file=file, log_pos=pos, blocking=False,
                                only_events=[WriteRowsEvent])
    printed = {}
    try:
        for event in stream:
            if event.schema == database:
                for row in event.rows:
                    printed[row["values"]["id"]] = column.encode(row["values"]["j"])
    finally:
        stream.close()
    assert len(printed) == len(source)
    wrong = {i: (source[i][:200], (printed[i] or "")[:200]) for i in source if printed[i] != source[i]}
    assert not wrong, list(wrong.items())[:10]


def test_json_documents_through_snapshot_and_binlog(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if dev_db.server != "mysql":
        pytest.skip("MariaDB's JSON is text, captured as written (tests/integration/test_types.py)")
    port = dev_db.running_port()
    docs = DOCUMENTS
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE j (id INT PRIMARY KEY, j JSON)")
        for i, doc in enumerate(docs):
            cur.execute(f"INSERT INTO j VALUES ({i}, {doc})")
            cur.execute(f"INSERT INTO j VALUES ({2000 + i}, '[\"replaced later\"]')")
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.j"], tmp_path / "lake", "6231-6235",
                            chunk_size=8)
    cfg = run_once(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        for i, doc in enumerate(docs):
            cur.execute(f"INSERT INTO j VALUES ({1000 + i}, {doc})")  # binlog insert
            cur.execute(f"UPDATE j SET j = {doc} WHERE id = {2000 + i}")  # binlog update
    run_once(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, j FROM j")
        source = dict(cur.fetchall())
    lake = {r["id"]: r["j"] for r in silver_rows(cfg, f"{database}.j")}
    assert sorted(lake) == sorted(source)
    wrong = {i: (source[i][:120], (lake[i] or "")[:120]) for i in source if lake[i] != source[i]}
    assert not wrong, list(wrong.items())[:10]
