"""Pure logic of key order under PAD SPACE collations and of the binlog value corrections."""

from __future__ import annotations

import datetime as dt

from binlake.binlog_reader import _image
from binlake.chunking import PadSpaceWeight
from binlake.schema import Column

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
    assert image["s"] == set()


def test_encoding_of_float_year_and_zero_timestamp() -> None:
    f = Column("f", "float", "float")
    assert f.encode(3.141590118408203) == f.encode(3.14159) == "3.14159"
    assert f.encode(16777216.0) == "16777216.0"
    y = Column("y", "year", "year(4)")
    assert y.encode(1900) == y.encode(0) == "0" and y.encode(1901) == "1901"
    ts = Column("ts", "timestamp", "timestamp")
    assert ts.encode(dt.datetime(1970, 1, 1)) is None
    assert ts.encode(dt.datetime(1970, 1, 1, 0, 0, 1)) == "1970-01-01 00:00:01.000000+00:00"
