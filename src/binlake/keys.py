"""Chunk keys: how the server orders their values, and the SQL that selects a range of them.

Both capture paths need the server's order: planning and the chunk `SELECT` put it in SQL
(`range_predicate`, `lexicographic`), and the binlog's handover and the chunk read's fold compare a
change's key with split bounds in Python (`KeyOrder`), which must agree with the server's comparison
exactly: under `utf8mb4_general_ci`, 'a' = 'A', and a Python comparison routes rows to the wrong chunk.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import Any

import pymysql

from binlake import valuetypes
from binlake.schema import Column, TableSchema, quote, zero_date_key
from binlake.splits import Bound


def lexicographic(columns: Sequence[str], op: str) -> str:
    """SQL for `(c1, c2, ...) op (?, ?, ...)`, expanded so every server uses the index.

    op is one of '<', '>=', '>'. For (a, b) >= (x, y): `a > x OR (a = x AND b >= y)`.
    Parameters are the bound values in `lexicographic_params` order.
    """
    strict = ">" if op in (">=", ">") else "<"
    cols = [quote(c) for c in columns]
    sql = f"{cols[-1]} {op} %s"
    for c in reversed(cols[:-1]):
        sql = f"({c} {strict} %s OR ({c} = %s AND {sql}))"
    return sql


def lexicographic_params(values: Sequence[Any]) -> list[Any]:
    params: list[Any] = []
    for v in values[:-1]:
        params += [v, v]
    params.append(values[-1])
    return params


def range_predicate(schema: TableSchema, start: Bound | None, end: Bound | None) -> tuple[str, list[Any]]:
    """`WHERE` text (without the keyword) and parameters selecting `[start, end)`."""
    key = schema.split_key
    cols = [schema.column(k) for k in key]
    parts: list[str] = []
    params: list[Any] = []
    if start is not None:
        parts.append(lexicographic(key, ">="))
        params += lexicographic_params(decode_bound(cols, start))
    if end is not None:
        parts.append(lexicographic(key, "<"))
        params += lexicographic_params(decode_bound(cols, end))
    return (" AND ".join(f"({p})" for p in parts) or "TRUE"), params


def decode_bound(cols: Sequence[Column], bound: Bound) -> list[Any]:
    return [c.decode(v) for c, v in zip(cols, bound)]


def encode_key(cols: Sequence[Column], values: Sequence[Any]) -> Bound:
    out = tuple(c.encode(v) for c, v in zip(cols, values))
    if any(v is None for v in out):
        raise ValueError(f"chunk key {[c.name for c in cols]} has a NULL value; chunk keys must be NOT NULL")
    return out  # type: ignore[return-value]


@functools.total_ordering
class PadSpaceWeight:
    """A collation weight that compares as if both strings were padded with spaces to any length.

    Under a PAD SPACE collation (every MariaDB collation but the `*_nopad_*` ones) the server
    compares 'a' = 'a ', and 'a\t' < 'a' because the shorter string is padded with spaces, whose
    weight is above the tab's. MariaDB's `WEIGHT_STRING` neither strips nor pads trailing spaces, so
    comparing its raw bytes gets both wrong. Here trailing space weights are dropped and the shorter
    weight is compared against space weights where it ends.
    """

    __slots__ = ("weight", "space")

    def __init__(self, weight: bytes, space: bytes) -> None:
        while space and weight.endswith(space) and len(weight) % len(space) == 0:
            weight = weight[: -len(space)]
        self.weight, self.space = weight, space

    def _cmp(self, other: PadSpaceWeight) -> int:
        a, b = self.weight, other.weight
        n = min(len(a), len(b))
        if a[:n] != b[:n]:
            return -1 if a[:n] < b[:n] else 1
        if len(a) == len(b):
            return 0
        rest = (a if len(a) > len(b) else b)[n:]
        pad = self.space * (len(rest) // max(len(self.space), 1) + 1)
        longer_is_less = rest < pad[: len(rest)]
        return (-1 if longer_is_less else 1) * (1 if len(a) > len(b) else -1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PadSpaceWeight) and self._cmp(other) == 0

    def __lt__(self, other: PadSpaceWeight) -> bool:
        return self._cmp(other) < 0

    def __hash__(self) -> int:
        return hash(self.weight)

    def __repr__(self) -> str:
        return f"PadSpaceWeight({self.weight.hex()})"


TEMPORAL_TYPES = {"date", "datetime", "timestamp", "time"}


def temporal_sort_key(col: Column, value: Any) -> Any:
    """A date/time key value in a form that orders as the server orders it, whichever side it came
    from: a split bound decodes to text ('2024-01-01 00:00:00.000000'), the binlog gives a
    datetime/date/timedelta. DATE, DATETIME and TIMESTAMP compare as their fixed-width encoded
    text; TIME as signed microseconds (its text does not order: '-01:00:00' > '-00:30:00')."""
    if col.data_type == "time":
        if isinstance(value, dt.timedelta):
            return value // dt.timedelta(microseconds=1)
        text = str(value)
        sign = -1 if text.startswith("-") else 1
        hms, _, frac = text.lstrip("-").partition(".")
        h, m, s = (int(x) for x in hms.split(":"))
        return sign * (((h * 60 + m) * 60 + s) * 1_000_000 + int((frac or "0").ljust(6, "0")[:6]))
    if isinstance(value, str):  # a bound, or a zero date the binlog gave as text ('2020-00-15 10:00:00')
        text = zero_date_key(col.data_type, value) if col.in_key else value
    else:
        text = col.encode(value)
    return (text or "").removesuffix("+00:00")


class KeyOrder:
    """Orders chunk-key values the way the server does, so a binlog key finds its split.

    Integer and decimal keys compare in Python exactly as in MySQL; date/time keys by
    `temporal_sort_key`, so a bound (text) and a binlog value (datetime, timedelta) compare. String
    keys compare by their collation's weight (`WEIGHT_STRING`), fetched from the server once per
    distinct value, with the collation's trailing-space rule applied (`PadSpaceWeight`). BINARY(n)
    keys compare zero-padded to n bytes (the binlog drops the padding), ENUM keys by member index,
    MariaDB's UUID, INET4 and INET6 keys by their stored bytes (`valuetypes.text_form_sort_key`).
    """

    def __init__(self, schema: TableSchema, conn: pymysql.connections.Connection | None = None) -> None:
        self.cols = [schema.column(k) for k in schema.split_key]
        self.conn = conn
        self.needs_server = any(c.is_string and c.data_type != "enum" for c in self.cols)
        self._weight = functools.lru_cache(maxsize=100_000)(self._fetch_weight)
        self._spaces: dict[str, bytes] = {}

    def _space(self, collation: str) -> bytes:
        """The weight of one space under a PAD SPACE collation; b'' under NO PAD."""
        if collation not in self._spaces:
            charset = collation.split("_", 1)[0]
            conv = f"CONVERT(%s USING {charset}) COLLATE {collation}"
            with self._cursor() as cur:
                cur.execute(f"SELECT {conv} = {conv}, WEIGHT_STRING({conv})", ("a", "a ", " "))
                pads, space = cur.fetchone()
            self._spaces[collation] = bytes(space) if pads else b""
        return self._spaces[collation]

    def _cursor(self) -> Any:
        if self.conn is None:
            raise RuntimeError("string chunk keys need a server connection to compare")
        return self.conn.cursor()

    def _fetch_weight(self, collation: str, value: str) -> PadSpaceWeight:
        charset = collation.split("_", 1)[0]
        with self._cursor() as cur:
            cur.execute(f"SELECT WEIGHT_STRING(CONVERT(%s USING {charset}) COLLATE {collation})", (value,))
            return PadSpaceWeight(bytes(cur.fetchone()[0]), self._space(collation))

    def sort_key(self, values: Sequence[Any]) -> tuple[Any, ...]:
        out: list[Any] = []
        for c, v in zip(self.cols, values):
            if c.is_string and isinstance(v, bytes):
                v = c.text(v)  # the binlog's stored bytes
            if c.data_type == "enum":
                out.append(c.members.index(v) + 1 if v in c.members else 0)
            elif c.is_string and c.collation:
                out.append(self._weight(c.collation, v if isinstance(v, str) else str(v)))
            elif c.is_string and isinstance(v, str):
                out.append(v.rstrip(" ").encode("utf-8"))
            elif c.data_type in TEMPORAL_TYPES:
                out.append(temporal_sort_key(c, v))
            elif c.data_type in valuetypes.TEXT_FORM_SIZES:
                # a bound is the server's text, a binlog value the bytes: both to the server's order
                out.append(valuetypes.text_form_sort_key(c.data_type, v))
            elif c.is_binary:
                # the binlog drops BINARY(n)'s trailing zero bytes, and gives an all-zero value as ''
                b = v.encode("utf-8") if isinstance(v, str) else bytes(v)
                out.append(b.ljust(c.length, b"\x00") if c.data_type == "binary" and c.length else b)
            else:
                out.append(v)
        return tuple(out)

    def bound_key(self, bound: Bound) -> tuple[Any, ...]:
        return self.sort_key(decode_bound(self.cols, bound))

    def key_values(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[c.name] for c in self.cols)

    def normalised(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """Key values as the driver and the binlog both render them (for dictionary keys)."""
        return tuple(c.encode(v) for c, v in zip(self.cols, values))

