"""Spatial types, MySQL's VECTOR, MariaDB's UUID, INET4 and INET6, and zero dates in values and keys,
through both capture paths on each server that has the type.

Each test writes rows before the snapshot (several chunks), runs binlake once, then changes the table
through the binlog -- inserts, updates, key changes, deletes -- and runs it again. Silver must then
equal the source value by value, the expected value read from the server by its own functions
(`ST_SRID`, `ST_AsBinary`, `VECTOR_TO_STRING`, the printed text), not by binlake's decoding.
Silver's values are read with delta-rs (`capture.silver_rows`), not with binlake's Spark code; its
column types with Spark's reader.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from binlake.keys import KeyOrder
from binlake.source.catalog import load_schema
from binlake.source.connection import connect as source_connect

from .capture import connect, run_once, silver, silver_rows, write_config
from .helpers import params


def capture(dev_db: Any, database: str, tmp_path: Path, tables: list[str], create: list[str], before: list[str],
            after: list[str], server_ids: str, sql_mode: str | None = None, chunk_size: int = 3) -> Any:
    """Create and fill the tables, snapshot them, apply `after` through the binlog, catch up: the config."""
    port = dev_db.running_port()
    session = {"sql_mode": sql_mode} if sql_mode is not None else {}
    with connect(port, database, **session) as conn, conn.cursor() as cur:
        for sql in create + before:
            cur.execute(sql)
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.({'|'.join(tables)})"],
                            tmp_path / "lake", server_ids, chunk_size=chunk_size)
    run_once(cfg_path)
    with connect(port, database, **session) as conn, conn.cursor() as cur:
        for sql in after:
            cur.execute(sql)
    return run_once(cfg_path)


def source(dev_db: Any, database: str, sql: str) -> list[tuple[Any, ...]]:
    with connect(dev_db.running_port(), database, time_zone="+00:00") as conn, conn.cursor() as cur:
        cur.execute(sql)
        return sorted(tuple(r) for r in cur.fetchall())


# --- spatial types --------------------------------------------------------------------------------

SPATIAL = [("g", "GEOMETRY"), ("p", "POINT"), ("ls", "LINESTRING"), ("pg", "POLYGON"), ("mp", "MULTIPOINT"),
           ("ml", "MULTILINESTRING"), ("mpg", "MULTIPOLYGON"), ("gc", "GEOMETRYCOLLECTION")]
SHAPES = [
    "ST_GeomFromText('POINT(1 2)', {srid})", "ST_GeomFromText('POINT(-71.06 42.36)', {srid})",
    "ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0.5)', {srid})",
    "ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 4, 0 0), (1 1, 2 1, 2 2, 1 1))', {srid})",
    "ST_GeomFromText('MULTIPOINT((1 1), (2 2))', {srid})",
    "ST_GeomFromText('MULTILINESTRING((0 0, 1 1), (2 2, 3 3))', {srid})",
    "ST_GeomFromText('MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)), ((5 5, 6 5, 6 6, 5 5)))', {srid})",
    "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))', {srid})",
]


def spatial_value(name: str, i: int, srid: int) -> str:
    """Row i's value of column `name`: a shape of the column's type, or NULL every fifth row."""
    if i % 5 == 4:
        return "NULL"
    kind = dict(SPATIAL)[name]
    pick = {"POINT": [0, 1], "LINESTRING": [2], "POLYGON": [3], "MULTIPOINT": [4], "MULTILINESTRING": [5],
            "MULTIPOLYGON": [6], "GEOMETRYCOLLECTION": [7], "GEOMETRY": list(range(8))}[kind]
    shape = SHAPES[pick[i % len(pick)]]
    if kind == "POINT":
        shape = f"ST_GeomFromText('POINT({i % 90} {i / 4})', {{srid}})"  # a latitude within range
    return shape.format(srid=srid)


def test_spatial_types_keep_wkb_and_srid(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    mysql = dev_db.server == "mysql"
    # MySQL keeps a column's declared SRID; MariaDB keeps the SRID each value carries
    srids = {"p": 4326, "g": 0, "ls": 3857} if mysql else {"p": 4326, "g": 3857, "ls": 0}
    ddl = ", ".join(f"{n} {t}" + (f" SRID {srids[n]}" if mysql and n in srids else "") for n, t in SPATIAL)

    def row(i: int) -> str:
        return f"({i}, " + ", ".join(spatial_value(n, i, srids.get(n, 0)) for n, _ in SPATIAL) + ")"

    def sets(i: int) -> str:
        return ", ".join(f"{n} = {spatial_value(n, i, srids.get(n, 0))}" for n, _ in SPATIAL)

    cfg = capture(dev_db, database, tmp_path, ["geo"], [f"CREATE TABLE geo (id INT PRIMARY KEY, {ddl})"],
                  [f"INSERT INTO geo VALUES {', '.join(row(i) for i in range(12))}"],
                  [f"INSERT INTO geo VALUES {', '.join(row(i) for i in range(100, 106))}",
                   f"UPDATE geo SET {sets(7)} WHERE id = 1", f"UPDATE geo SET {sets(2)} WHERE id = 104",
                   "UPDATE geo SET id = 50 WHERE id = 3", "DELETE FROM geo WHERE id IN (5, 101)"],
                  "6200-6204")
    # the stored axis order (x first): MySQL's ST_AsBinary swaps a geographic SRS's axes unless told not to
    wkb = "ST_AsBinary({c}, 'axis-order=long-lat')" if mysql else "ST_AsBinary({c})"
    cols = ", ".join(f"ST_SRID({n}), {wkb.format(c=n)}" for n, _ in SPATIAL)
    want = source(dev_db, database, f"SELECT id, {cols} FROM geo")

    df = silver(spark, cfg, f"{database}.geo")
    assert {c: t for c, t in df.dtypes if c in dict(SPATIAL)} == {n: "struct<wkb:binary,srid:int>" for n, _ in SPATIAL}
    got = []
    for r in silver_rows(cfg, f"{database}.geo"):
        values: list[Any] = [r["id"]]
        for n, _ in SPATIAL:
            v = r[n]
            values += [None, None] if v is None else [v["srid"], bytes(v["wkb"])]
        got.append(tuple(values))
    assert sorted(got) == want
    assert {r[k] for r in want for k in range(1, len(r), 2)} == {0, 3857, 4326, None}  # every SRID was there


# --- MySQL's VECTOR --------------------------------------------------------------------------------

def vector(i: int, n: int) -> str:
    if i % 6 == 5:
        return "NULL"
    values = [(-1) ** k * (i + 1) * 10.0 ** (k % 7 - 3) / 3 for k in range(n)]
    return f"STRING_TO_VECTOR('{json.dumps(values)}')"


def test_vector_is_an_array_of_floats(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if dev_db.server != "mysql":
        pytest.skip("VECTOR is MySQL's type (9.0 and later); MariaDB's VECTOR came with 11.7")
    cfg = capture(dev_db, database, tmp_path, ["vec"],
                  ["CREATE TABLE vec (id INT PRIMARY KEY, v VECTOR(5), w VECTOR(1), t TIME)"],
                  [f"INSERT INTO vec VALUES ({i}, {vector(i, 5)}, {vector(i + 1, 1)}, '01:02:03')" for i in range(12)],
                  [*(f"INSERT INTO vec VALUES ({i}, {vector(i, 5)}, {vector(i, 1)}, NULL)" for i in range(100, 106)),
                   f"UPDATE vec SET v = {vector(40, 5)} WHERE id = 1", "UPDATE vec SET id = 60 WHERE id = 2",
                   "UPDATE vec SET v = NULL WHERE id = 102", "DELETE FROM vec WHERE id IN (4, 103)"],
                  "6210-6214")
    # VECTOR_TO_STRING prints 6 significant digits; the stored floats are the vector's own bytes
    raw = source(dev_db, database, "SELECT id, CAST(v AS BINARY), CAST(w AS BINARY), VECTOR_TO_STRING(v) FROM vec")
    want = [(i, *(None if b is None else list(struct.unpack(f"<{len(b) // 4}f", b)) for b in (v, w)))
            for i, v, w, _ in raw]
    df = silver(spark, cfg, f"{database}.vec")
    assert dict(df.dtypes)["v"] == "array<float>"
    got = sorted((r["id"], r["v"], r["w"]) for r in silver_rows(cfg, f"{database}.vec"))
    assert got == want
    printed = {i: text for i, _, _, text in raw}
    for i, v, _ in got:  # the server's own rendering agrees to its 6 digits
        assert (v is None) == (printed[i] is None)
        if v is not None:
            assert [float(x) for x in printed[i].strip("[]").split(",")] == pytest.approx(v, rel=1e-5)


# --- MariaDB's UUID, INET4, INET6 --------------------------------------------------------------------

UUIDS = [
    "00000000-0000-0000-0000-000000000000", "123e4567-e89b-12d3-a456-426655440000",
    "ffffffff-0000-4000-8000-000000000001", "11111111-2222-3333-c444-555555555555",
    "aaaaaaaa-bbbb-1ccc-9ddd-eeeeeeeeeeee", "6ba7b810-9dad-11d1-80b4-00c04fd43000",
    "01890000-0000-7000-8000-000000000000", "00000000-0000-0000-0000-000000000100",
    "f47ac10b-58cc-4372-a567-0e02b2c3d479", "0e02b2c3-d479-4372-0567-f47ac10b58cc",
]
INET4S = ["0.0.0.0", "10.0.0.1", "255.255.255.255", "1.0.0.0", "192.168.0.0", "127.0.0.1", "8.8.0.0", "0.0.0.1"]
INET6S = ["::", "::1", "::1.2.3.4", "::ffff:1.2.3.4", "1:0:0:1::1", "1::1:0:1:0:1:0", "2001:db8::1",
          "fe80::1:0:0:0", "1:2:3:4:5:6:7:8", "::2:0:0:0:0:0", "ffff::", "2001:db8:0:0:1::"]


def test_uuid_and_inet_are_their_text_also_as_keys(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if dev_db.server != "mariadb":
        pytest.skip("UUID, INET4 and INET6 are MariaDB's types (10.7 and 10.10)")

    def uu(i: int, k: int = 0) -> str:
        return (f"('{UUIDS[i % len(UUIDS)][:-2]}{i:02x}', '{INET4S[(i + k) % len(INET4S)]}', "
                f"'{INET6S[(i + k) % len(INET6S)]}', {i})")

    before = [f"INSERT INTO uu VALUES {', '.join(uu(i) for i in range(20))}",
              "INSERT INTO uu VALUES ('10000000-0000-0000-0000-000000000000', NULL, NULL, -1)",
              "INSERT INTO ip VALUES " + ", ".join(f"('{a}', '{b}', {j})" for j, (a, b) in enumerate(
                  (a, b) for a in INET4S[:4] for b in INET6S[:6]))]
    after = [f"INSERT INTO uu VALUES {', '.join(uu(i, 3) for i in range(30, 40))}",
             f"UPDATE uu SET i4 = '{INET4S[2]}', i6 = '{INET6S[4]}' WHERE n = 5",
             f"UPDATE uu SET u = '{UUIDS[1][:-2]}ff' WHERE n = 6",
             "UPDATE uu SET u = '00000000-0000-0000-0000-000000000001' WHERE n = 0",
             "UPDATE uu SET u = '00000000-0000-0000-0000-000000000000' WHERE n = -1",
             "DELETE FROM uu WHERE n IN (7, 33)",
             f"INSERT INTO ip VALUES ('{INET4S[5]}', '{INET6S[9]}', 100), ('0.0.0.1', '::', 101)",
             f"UPDATE ip SET b = '{INET6S[10]}' WHERE n = 3", "UPDATE ip SET a = '8.8.0.0' WHERE n = 8",
             "DELETE FROM ip WHERE n = 9"]
    create = ["CREATE TABLE uu (u UUID PRIMARY KEY, i4 INET4, i6 INET6, n INT)",
              "CREATE TABLE ip (a INET4 NOT NULL, b INET6 NOT NULL, n INT, PRIMARY KEY (a, b))"]
    cfg = capture(dev_db, database, tmp_path, ["uu", "ip"], create, before, after, "6220-6224")

    for table, cols in (("uu", "u, i4, i6, n"), ("ip", "a, b, n")):
        want = source(dev_db, database, f"SELECT {cols} FROM {table}")
        df = silver(spark, cfg, f"{database}.{table}")
        names = [c.strip() for c in cols.split(",")]
        assert all(t == ("int" if c == "n" else "string") for c, t in df.dtypes if c in names)
        assert sorted(tuple(r[c] for c in names) for r in silver_rows(cfg, f"{database}.{table}")) == want, table

    # a split bound (the server's text) and a binlog key (the stored bytes) both order as the server does
    conn = source_connect(params(dev_db))
    try:
        for table, key in (("uu", "u"), ("ip", "a, b")):
            order = KeyOrder(load_schema(conn, database, table), conn)
            with conn.cursor() as cur:
                cur.execute(f"SELECT {key}, {', '.join(f'CAST({k} AS BINARY(16))' for k in key.split(', '))} "
                            f"FROM {database}.{table} ORDER BY {key}")
                rows = cur.fetchall()
            width = len(rows[0]) // 2
            texts = [order.sort_key(r[:width]) for r in rows]
            stored = [order.sort_key([b.rstrip(b"\x00")[: (4 if k == "a" else 16)] for k, b in
                                      zip(key.split(", "), r[width:])]) for r in rows]
            assert texts == sorted(texts) and len(set(texts)) == len(texts), table
            assert stored == texts, table
    finally:
        conn.close()


# --- zero dates ------------------------------------------------------------------------------------

DATES = ["0000-00-00", "2020-00-15", "2020-02-00", "0000-01-01", "2020-01-15", "1999-12-31", "2020-00-00",
         "0001-01-01", "0000-12-00"]
DATETIMES = ["0000-00-00 00:00:00", "2020-00-15 10:00:00.5", "2020-00-15 10:00:00.25", "2020-00-15 10:00:00",
             "2020-01-15 10:00:00.75", "0000-01-01 00:00:01", "2020-02-00 23:59:59.99", "1999-12-31 00:00:00"]
TIMESTAMPS = ["0000-00-00 00:00:00", "1970-01-01 00:00:01", "2020-01-15 10:00:00.000001", "2038-01-19 03:14:07.5"]


def key_text(kind: str, v: Any) -> Any:
    """The silver text of a key DATE/DATETIME/TIMESTAMP from the server's own text (CAST AS CHAR, UTC):
    every fraction to 6 digits, a TIMESTAMP marked as UTC."""
    if kind == "date":
        return v
    whole, _, fraction = v.partition(".")
    return f"{whole}.{fraction.ljust(6, '0')}" + ("+00:00" if kind == "timestamp" else "")


def plain(v: Any) -> Any:
    """A value column's silver value for the driver's value: a zero date (which the driver gives as
    text) is NULL."""
    return None if isinstance(v, str) else v


def test_zero_dates_stay_distinct_keys_and_null_values(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    zk = [f"('{DATES[i % len(DATES)]}', '{DATETIMES[i % len(DATETIMES)]}', '{i % 3}:00:00', "
          f"'{DATES[(i + 1) % len(DATES)]}', '{DATETIMES[(i + 2) % len(DATETIMES)]}', '{TIMESTAMPS[i % 4]}', {i})"
          for i in range(24)]
    zd = [f"('{d}', '{t}', {i})" for i, (d, t) in enumerate((d, t) for d in DATES[:5] for t in DATETIMES[:4])]
    zt = [f"('{t}', {i})" for i, t in enumerate(TIMESTAMPS)]
    create = [
        # TIME makes its row events mysql-replication's to decode; zd's and zt's are binlake's own decoder's
        "CREATE TABLE zk (d DATE NOT NULL, dt DATETIME(3) NOT NULL, t TIME NOT NULL, vd DATE, vdt DATETIME(2), "
        "vts TIMESTAMP(6) NULL, n INT, PRIMARY KEY (d, dt, t))",
        "CREATE TABLE zd (d DATE NOT NULL, dt DATETIME(2) NOT NULL, n INT, PRIMARY KEY (d, dt))",
        "CREATE TABLE zt (ts TIMESTAMP(6) NOT NULL PRIMARY KEY, n INT)",
    ]
    after = [
        "INSERT INTO zk VALUES ('0000-00-00', '2020-00-15 10:00:00.125', '05:00:00', '0000-00-00', "
        "'0000-00-00 00:00:00', '0000-00-00 00:00:00', 100), ('2020-00-15', '0000-00-00 00:00:00', '-01:00:00', "
        "'2020-01-01', '2020-01-01 00:00:00.5', '2020-01-01 00:00:00', 101)",
        "UPDATE zk SET vd = '2020-00-01', vdt = '2020-05-05 00:00:00', vts = '0000-00-00 00:00:00' WHERE n = 3",
        "UPDATE zk SET d = '0000-00-00', dt = '0000-00-00 00:00:00', t = '07:00:00' WHERE n = 4",
        "UPDATE zk SET dt = '2020-00-15 10:00:00.5', t = '08:00:00' WHERE n = 0",
        "DELETE FROM zk WHERE n IN (1, 9)",
        "INSERT INTO zd VALUES ('0000-00-00', '2020-00-15 10:00:00.12', 100), ('2020-00-00', '0000-00-00 00:00:00', 101)",
        "UPDATE zd SET d = '0000-12-00' WHERE n = 5", "UPDATE zd SET n = -n WHERE d = '2020-00-15'",
        "DELETE FROM zd WHERE n IN (0, 1)",
        "INSERT INTO zt VALUES ('2001-01-01 00:00:00', 100)", "UPDATE zt SET ts = '2002-02-02 00:00:00' WHERE n = 1",
        "DELETE FROM zt WHERE n = 0", "INSERT INTO zt VALUES ('0000-00-00 00:00:00', 101)",
    ]
    cfg = capture(dev_db, database, tmp_path, ["zk", "zd", "zt"], create,
                  [f"INSERT INTO zk VALUES {', '.join(zk)}", f"INSERT INTO zd VALUES {', '.join(zd)}",
                   f"INSERT INTO zt VALUES {', '.join(zt)}"], after, "6230-6234", sql_mode="", chunk_size=2)

    def compare(table: str, key: dict[str, str], rest: list[str]) -> list[tuple[Any, ...]]:
        """Silver's rows, once checked equal to the source's: key columns as the server prints them."""
        # TIME as the server prints it too, which is silver's text for it
        cols = ", ".join([f"CAST({k} AS CHAR)" for k in key] + [f"CAST({c} AS CHAR)" if c == "t" else c for c in rest])
        want = [tuple(key_text(kind, v) for kind, v in zip(key.values(), r[:len(key)])) +
                tuple(v if c == "t" else plain(v) for c, v in zip(rest, r[len(key):]))
                for r in source(dev_db, database, f"SELECT {cols} FROM {table}")]
        df = silver(spark, cfg, f"{database}.{table}")
        assert all(t == "string" for c, t in df.dtypes if c in key), df.dtypes
        # by repr: a broken path may give NULL keys, which must fail the comparison, not the sort
        # a TIMESTAMP comes back from delta-rs as an aware UTC datetime, the driver's (UTC session) naive
        got = sorted((tuple(r[c].replace(tzinfo=None) if c == "vts" and r[c] is not None else r[c]
                            for c in [*key, *rest]) for r in silver_rows(cfg, f"{database}.{table}")), key=repr)
        assert got == sorted(want, key=repr), table
        return got

    compare("zk", {"d": "date", "dt": "datetime"}, ["t", "vd", "vdt", "vts", "n"])
    zd_keys = [r[:2] for r in compare("zd", {"d": "date", "dt": "datetime"}, ["n"])]
    assert {("2020-00-00", "0000-00-00 00:00:00.000000"), ("0000-00-00", "2020-00-15 10:00:00.120000")} <= set(zd_keys)
    assert ("0000-00-00 00:00:00.000000+00:00", 101) in compare("zt", {"ts": "timestamp"}, ["n"])
