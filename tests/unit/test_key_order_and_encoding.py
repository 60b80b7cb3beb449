"""Pure logic of key order under PAD SPACE collations and of the binlog value corrections."""

from __future__ import annotations

import datetime as dt

from binlake.source.binlog_reader import _image
from binlake.keys import PadSpaceWeight
from binlake.schema import Column, TableSchema

SPACE = b"\x00\x20"  # one space's weight in utf8mb4_general_ci


def w(*units: int, space: bytes = SPACE) -> PadSpaceWeight:
    return PadSpaceWeight(b"".join(u.to_bytes(2, "big") for u in units), space)


def test_trailing_spaces_are_equal_and_shorter_strings_pad_with_spaces() -> None:
    a, a_space, a_tab, a_b = w(0x41), w(0x41, 0x20, 0x20), w(0x41, 0x09), w(0x41, 0x42)
    assert a == a_space
    assert a_tab < a < a_b  # 'a\t' < 'a' = 'a ' < 'ab' under PAD SPACE
    assert sorted([a_b, a, a_tab]) == [a_tab, a, a_b]


def test_no_pad_collations_compare_as_prefixes() -> None:
    a, a_space, a_tab = w(0x41, space=b""), w(0x41, 0x20, space=b""), w(0x41, 0x09, space=b"")
    assert a < a_tab < a_space


def test_negative_fractional_time_from_the_binlog_is_corrected() -> None:
    # mysql-replication decodes -00:00:00.25 as -00:00:00.75 and -12:34:56.000789 as -12:34:56.999211
    row = {"values": {"t": -dt.timedelta(microseconds=750_000), "u": -dt.timedelta(hours=12, minutes=34, seconds=56,
                                                                                    microseconds=999_211),
                      "whole": -dt.timedelta(seconds=1), "s": None},
           "none_sources": {"s": "empty set"}}
    image = _image(row, "", ["t", "u", "whole"])
    assert image["t"] == -dt.timedelta(microseconds=250_000)
    assert image["u"] == -dt.timedelta(hours=12, minutes=34, seconds=56, microseconds=789)
    assert image["whole"] == -dt.timedelta(seconds=1)
    assert image["s"] == []  # the empty SET, not NULL


def test_encoding_of_float_year_and_zero_timestamp() -> None:
    f = Column("f", "float", "float")
    assert f.encode(3.141590118408203) == f.encode(3.14159) == "3.14159"
    assert f.encode(16777216.0) == "16777216.0"
    y = Column("y", "year", "year(4)")
    assert y.encode(1900) == y.encode(0) == "0" and y.encode(1901) == "1901"
    ts = Column("ts", "timestamp", "timestamp")
    assert ts.encode(dt.datetime(1970, 1, 1)) is None
    assert ts.encode(dt.datetime(1970, 1, 1, 0, 0, 1)) == "1970-01-01 00:00:01.000000+00:00"


def test_date_and_time_keys_order_the_same_from_a_bound_and_from_the_binlog() -> None:
    from binlake.keys import KeyOrder
    from binlake.schema import TableSchema

    cols = (Column("d", "date", "date"), Column("t", "time", "time(6)", fraction=6),
            Column("ts", "timestamp", "timestamp(6)", fraction=6), Column("dt", "datetime", "datetime(6)", fraction=6))
    order = KeyOrder(TableSchema("db", "t", cols, ("d", "t", "ts", "dt")))
    bound = ("0050-06-01", "-00:30:00.000000", "2024-01-01 00:00:00.000001+00:00", "2024-01-01 00:00:00.000000")
    same = [dt.date(50, 6, 1), -dt.timedelta(minutes=30), dt.datetime(2024, 1, 1, 0, 0, 0, 1), dt.datetime(2024, 1, 1)]
    assert order.bound_key(bound) == order.sort_key(same)
    # TIME orders by value, not by text: -01:00:00 < -00:30:00 < 00:00:00 < 100:00:00
    times = ["100:00:00", "-00:30:00.000000", "00:00:00", "-01:00:00"]
    ranked = sorted(times, key=lambda t: order.sort_key([dt.date(2000, 1, 1), t, "x", "y"]))
    assert ranked == ["-01:00:00", "-00:30:00.000000", "00:00:00", "100:00:00"]
    assert order.sort_key([same[0], dt.timedelta(hours=-1), same[2], same[3]]) < order.bound_key(bound)
    assert order.sort_key([dt.date(2024, 1, 1), dt.timedelta(0), same[2], same[3]]) > order.bound_key(bound)


def test_column_encoders_give_what_encode_gives() -> None:
    import decimal

    columns = [Column("i", "int", "int(11)"), Column("bu", "bigint", "bigint(20) unsigned"),
               Column("c", "char", "char(3)"), Column("e", "enum", "enum('a','b')"), Column("d", "double", "double"),
               Column("n", "decimal", "decimal(10,2)", precision=10, scale=2), Column("s", "set", "set('x','y')"),
               Column("b", "blob", "blob"), Column("t", "datetime", "datetime(6)", fraction=6)]
    values = [None, 0, -5, 2**64 - 1, True, "x", "", b"ab\xff", 1.5, float("nan"), decimal.Decimal("-1.50"),
              {"x", "y"}, set(), dt.datetime(2024, 1, 2, 3, 4, 5, 6)]
    checked = 0
    for c in columns:
        encode = c.encoder()
        for v in values:
            try:
                want = c.encode(v)
            except (TypeError, ValueError, AttributeError, OverflowError, MemoryError, decimal.InvalidOperation):
                continue  # a value this type never holds
            assert encode(v) == want, (c.name, v)
            checked += 1
    assert checked > 60


def test_json_from_the_mysql_binlog_encodes_as_the_server_prints_it() -> None:
    # mysql-replication gives MySQL's binary JSON with bytes keys and strings, keys in stored order
    j = Column("j", "json", "json")
    decoded = {b"a": [1, {b"b": "ü😀".encode()}], b"d": 1.5, b"n": None}
    assert j.encode(decoded) == '{"a": [1, {"b": "ü😀"}], "d": 1.5, "n": null}'
    assert j.encode([b"x", True, []]) == '["x", true, []]'
    assert j.encode(b'"str"') == '"str"'  # JSON as text (MariaDB's, a SELECT's) passes as it is


def test_a_table_with_a_column_binlake_cannot_map_is_refused_before_anything_is_read() -> None:
    def table(*cols: Column) -> TableSchema:
        return TableSchema("db", "t", (Column("id", "int", "int"), *cols), ("id",))

    assert table(Column("c", "varchar", "varchar(5)", collation="latin1_swedish_ci"),
                 Column("k", "char", "char(2)", collation="ujis_japanese_ci")).refusal() is None
    assert table(Column("c", "varchar", "varchar(5)", collation="klingon_general_ci")).refusal() == (
        "captured table db.t: column c is in character set klingon, which binlake cannot decode from the binlog; "
        "convert it (ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4), or leave the table out of source.tables")
    refusal = table(Column("h", "hologram", "hologram(3)")).refusal() or ""
    assert refusal.startswith("captured table db.t: column h is hologram(3), a type binlake does not capture")
