"""Values of the column types whose binlog and `SELECT` forms differ most: spatial types, MySQL's
VECTOR, MariaDB's UUID, INET4 and INET6.

Each function takes what either capture path gives -- the driver's value of a `SELECT`, or
mysql-replication's value from a row event -- and returns the one encoded text `Column.encode`
hands on (see `binlake.schema`):

- spatial (GEOMETRY, POINT, ... GEOMETRYCOLLECTION): both servers store, send and log a geometry as
  a 4-byte little-endian SRID followed by the WKB. The text is `"<srid>:<base64 of the WKB>"`, which
  the Spark adapter turns into `struct<wkb: binary, srid: int>` -- Debezium's `Geometry`.
- VECTOR(n): n little-endian single-precision floats. The text is a JSON array of the shortest
  decimals that read back as the same floats; Spark reads it as `array<float>`.
- UUID, INET4, INET6 (MariaDB): a `SELECT` gives the text the server prints; the binlog gives the
  16 or 4 bytes with trailing zero bytes dropped (an all-zero value as ''). The text is the
  server's, rebuilt from the bytes exactly as MariaDB prints it.
"""

from __future__ import annotations

import base64
import ipaddress
import struct
from typing import Any

SPATIAL_TYPES = frozenset({
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection", "geomcollection",
})
# the fixed-size binary types MariaDB prints as text
TEXT_FORM_SIZES = {"uuid": 16, "inet4": 4, "inet6": 16}
SPATIAL_SPARK_TYPE = "struct<wkb:binary,srid:int>"
VECTOR_SPARK_TYPE = "array<float>"


def float32_text(v: float) -> str:
    """The shortest decimal text that reads back as the same single-precision value."""
    packed = struct.pack("<f", v)
    exact = struct.unpack("<f", packed)[0]
    for digits in range(6, 10):
        text = f"{exact:.{digits}g}"
        if struct.pack("<f", float(text)) == packed:
            return repr(float(text))
    return repr(exact)


def _bytes(v: Any) -> bytes:
    return v.encode("latin-1") if isinstance(v, str) else bytes(v)


def geometry_text(v: Any) -> str:
    """`"<srid>:<base64 WKB>"` from the server's internal form (SRID, little-endian, then WKB)."""
    b = _bytes(v)
    return f"{int.from_bytes(b[:4], 'little')}:{base64.b64encode(b[4:]).decode('ascii')}"


def vector_text(v: Any) -> str:
    """A VECTOR's floats as a JSON array, each the shortest decimal of its single-precision value."""
    b = _bytes(v)
    floats = struct.unpack(f"<{len(b) // 4}f", b[: len(b) // 4 * 4])
    return "[" + ",".join(float32_text(f) for f in floats) + "]"


def _padded(data_type: str, v: Any) -> bytes:
    """The full-width bytes: the binlog drops trailing zero bytes, and gives an all-zero value as ''."""
    return _bytes(v).ljust(TEXT_FORM_SIZES[data_type], b"\x00")


def inet6_text(b: bytes) -> str:
    """An IPv6 address as MariaDB prints it (`Inet6::to_string`): the first longest run of zero
    groups, even a single one, becomes '::'; an IPv4-compatible or IPv4-mapped address ends in
    dotted IPv4. Python's `ipaddress` differs: it never shortens a single zero group, and prints
    '::ffff:1.2.3.4' as '::ffff:102:304'."""
    words = struct.unpack(">8H", b)
    gap_pos, gap_len, run_pos, run_len = -1, 0, -1, 0
    for i, w in enumerate(words):
        if w:
            if run_pos >= 0 and run_len > gap_len:
                gap_pos, gap_len = run_pos, run_len
            run_pos, run_len = -1, 0
        elif run_pos >= 0:
            run_len += 1
        else:
            run_pos, run_len = i, 1
    if run_pos >= 0 and run_len > gap_len:
        gap_pos, gap_len = run_pos, run_len
    out = ""
    i = 0
    while i < 8:
        if i == gap_pos:
            out += "::" if i == 0 else ":"
            i += gap_len
            continue
        if i == 6 and gap_pos == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
            return out + ".".join(str(x) for x in b[12:])
        out += f"{words[i]:x}" + (":" if i < 7 else "")
        i += 1
    return out


def text_form(data_type: str, v: Any) -> str:
    """A UUID, INET4 or INET6 value as the server prints it."""
    if isinstance(v, str) and v:
        return v  # a SELECT: the server's own text
    b = _padded(data_type, v)
    if data_type == "uuid":
        h = b.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if data_type == "inet4":
        return ".".join(str(x) for x in b)
    return inet6_text(b)


def text_form_sort_key(data_type: str, v: Any) -> bytes:
    """Bytes that order as the server orders the values: INET4 and INET6 by their bytes; a UUID by
    its stored form, in which MariaDB puts the segments of an RFC 4122 UUID of version 1 to 5 in
    reverse order (node first, time-low last) so that time-based UUIDs index in time order."""
    if isinstance(v, str) and v:
        b = uuid_bytes(v) if data_type == "uuid" else ipaddress.ip_address(v).packed
    else:
        b = _padded(data_type, v)
    if data_type == "uuid" and 0 < b[6] < 0x60 and b[8] & 0x80:
        return b[10:16] + b[8:10] + b[6:8] + b[4:6] + b[0:4]
    return b


def uuid_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace("-", ""))
