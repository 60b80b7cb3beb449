"""The pure parts of the late types: zero-date keys, the table-map metadata filter, UUID order.
The values themselves are checked against real servers in tests/integration/test_more_types.py."""

from __future__ import annotations

import datetime as dt

from binlake.keys import temporal_sort_key
from binlake.schema import Column
from binlake.source.binlog_types import _date, _datetime, known_metadata_only
from binlake.valuetypes import text_form, text_form_sort_key


def test_a_zero_date_key_orders_the_same_from_the_binlog_and_from_a_bound() -> None:
    key = Column("dt", "datetime", "datetime", in_key=True)
    # the binlog gives a DATETIME(0) zero date without a fraction, a bound always has six digits
    assert temporal_sort_key(key, "2020-00-15 10:00:00") == temporal_sort_key(key, "2020-00-15 10:00:00.000000")
    assert temporal_sort_key(key, "2020-00-15 10:00:00") < temporal_sort_key(key, dt.datetime(2020, 1, 1))
    ts = Column("ts", "timestamp", "timestamp(6)", fraction=6, in_key=True)
    assert ts.encode(dt.datetime(1970, 1, 1)) == "0000-00-00 00:00:00.000000+00:00"
    assert ts.spark_type() == "string" and Column("ts", "timestamp", "timestamp").spark_type() == "timestamp"
    assert Column("d", "date", "date").encode("2020-00-15") is None  # a value column: NULL


def test_the_binlog_gives_a_zero_date_as_its_text() -> None:
    assert _date(0) == "0000-00-00"
    assert _date(2020 << 9 | 15) == "2020-00-15"
    assert _date(2020 << 9 | 1 << 5 | 15) == dt.date(2020, 1, 15)
    assert _datetime((2020 * 13) << 22 | 15 << 17 | 10 << 12, 500000, 1) == "2020-00-15 10:00:00.500000"
    assert _datetime(0, 0, 0) == "0000-00-00 00:00:00"


def test_table_map_metadata_of_unknown_types_is_dropped_whole() -> None:
    fields = bytes([4, 2, 1, 0x61]) + bytes([30, 3, 9, 9, 9]) + bytes([12, 1, 0x80])
    assert known_metadata_only(fields, 0, len(fields), {4, 12}) == bytes([4, 2, 1, 0x61, 12, 1, 0x80])


def test_uuid_and_inet_text_from_the_binlog_bytes() -> None:
    assert text_form("uuid", b"\x12>Eg\xe8\x9b\x12\xd3\xa4VBfUD") == "123e4567-e89b-12d3-a456-426655440000"
    assert text_form("inet4", "") == "0.0.0.0"  # an all-zero value comes as ''
    assert text_form("inet6", bytes(10) + b"\xff\xff\x01\x02\x03\x04") == "::ffff:1.2.3.4"
    # MariaDB shortens the first longest run of zero groups, even a single one
    assert text_form("inet6", b"\x00\x01\x00\x00" * 3 + b"\x00\x01") == "1::1:0:1:0:1:0"
    assert text_form("inet6", b"\x00\x01\x00\x00\x00\x01") == "1:0:1::"
    # an RFC 4122 UUID of version 1-5 orders by its node first, the others by their bytes
    v1 = text_form_sort_key("uuid", "123e4567-e89b-12d3-a456-426655440000")
    assert v1 == bytes.fromhex("426655440000a45612d3e89b123e4567")
    assert text_form_sort_key("uuid", bytes(16)) == bytes(16)
