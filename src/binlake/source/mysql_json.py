"""MySQL's binary JSON, as the text a `SELECT` of the column gives.

MySQL logs a JSON column in its binary form (MariaDB's JSON is text and needs none of this). The
snapshot reads the server's own text of the document, so the binlog's bytes must print as that text
exactly: keys in stored order (by length, then bytes), `, ` and `: ` separators, doubles as MySQL's
`my_gcvt` prints them (`1e20`, `0.0000001`, `3.0`), DECIMAL with its scale (`1.50`), dates and times
inside JSON quoted with six fraction digits, and the JSON null literal as `null`, not SQL NULL.
mysql-replication's own decoding loses several of these (and fails on a TIME past 24 hours), so the
binlog reader hands the bytes over as `MysqlJson` and `to_text` prints them.

The format (MySQL's json_binary.h): a type byte, then the value. Objects and arrays come in a small
form (2-byte counts and offsets) and a large one (4 bytes); their entries point at values stored
after them, except literals and integers that fit an entry, which are stored inline.
"""

from __future__ import annotations

import base64
import decimal
import math
import struct

from binlake.source.packed_decimal import read_decimal

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0x00, 0x01, 0x02, 0x03
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = (
    0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0F)
LITERALS = {0x00: "null", 0x01: "true", 0x02: "false"}
# opaque field types: MYSQL_TYPE_NEWDECIMAL, DATE, TIME, DATETIME, TIMESTAMP
NEWDECIMAL, DATE, TIME, DATETIME, TIMESTAMP = 246, 10, 11, 12, 7
_SCALARS = {INT16: "<h", UINT16: "<H", INT32: "<i", UINT32: "<I", INT64: "<q", UINT64: "<Q", DOUBLE: "<d"}
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
MAX_DECPT_FOR_F_FORMAT = 15  # DBL_DIG
GCVT_WIDTH = 34  # MY_GCVT_MAX_FIELD_WIDTH: DBL_DIG + 4 + max(5, MAX_DECPT_FOR_F_FORMAT)


class MysqlJson(bytes):
    """A JSON column's value from MySQL's binlog, in the binary form."""


def to_text(data: bytes) -> str:
    if not data:
        return "null"
    return _value(data, data[0], 1)


def _value(data: bytes, kind: int, at: int) -> str:
    if kind in (SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY):
        return _container(data, kind, at)
    if kind == LITERAL:
        return LITERALS[data[at]]
    if kind in _SCALARS:
        v = struct.unpack_from(_SCALARS[kind], data, at)[0]
        return gcvt(v) if kind == DOUBLE else str(v)
    if kind == STRING:
        n, at = _varlen(data, at)
        return _quoted(data[at:at + n].decode("utf-8"))
    if kind == OPAQUE:
        return _opaque(data[at], *_varlen(data, at + 1), data)
    raise ValueError(f"JSON value of unknown type {kind}")


def _container(data: bytes, kind: int, at: int) -> str:
    large = kind in (LARGE_OBJECT, LARGE_ARRAY)
    size = 4 if large else 2
    fmt = "<I" if large else "<H"
    count = struct.unpack_from(fmt, data, at)[0]
    entries = at + 2 * size
    is_object = kind in (SMALL_OBJECT, LARGE_OBJECT)
    values = entries + (count * (size + 2) if is_object else 0)
    parts = []
    for i in range(count):
        entry = values + i * (1 + size)
        vtype = data[entry]
        if vtype == LITERAL or vtype in (INT16, UINT16) or (large and vtype in (INT32, UINT32)):
            text = _value(data, vtype, entry + 1)  # inline
        else:
            text = _value(data, vtype, at + struct.unpack_from(fmt, data, entry + 1)[0])
        if is_object:
            key = entries + i * (size + 2)
            offset = struct.unpack_from(fmt, data, key)[0]
            length = struct.unpack_from("<H", data, key + size)[0]
            name = data[at + offset:at + offset + length].decode("utf-8")
            parts.append(f"{_quoted(name)}: {text}")
        else:
            parts.append(text)
    return ("{" + ", ".join(parts) + "}") if is_object else ("[" + ", ".join(parts) + "]")


def _varlen(data: bytes, at: int) -> tuple[int, int]:
    """A length stored in 7-bit groups, low group first: (length, offset after it)."""
    n, shift = 0, 0
    while True:
        b = data[at]
        at += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, at
        shift += 7


def _quoted(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _opaque(field_type: int, n: int, at: int, data: bytes) -> str:
    raw = data[at:at + n]
    if field_type == NEWDECIMAL:
        value, _ = read_decimal(raw, 2, raw[0], raw[1])
        return format(value, "f")
    if field_type in (DATE, DATETIME, TIMESTAMP):
        return '"' + _datetime(int.from_bytes(raw[:8], "little", signed=True), field_type == DATE) + '"'
    if field_type == TIME:
        return '"' + _time(int.from_bytes(raw[:8], "little", signed=True)) + '"'
    return _quoted(f"base64:type{field_type}:" + base64.b64encode(raw).decode("ascii"))


def _datetime(packed: int, date_only: bool) -> str:
    """A packed DATETIME (`((ymd << 17 | hms) << 24) + microseconds`) as MySQL prints it in JSON."""
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    micro, ymdhms = packed % (1 << 24), packed >> 24
    ymd, hms = ymdhms >> 17, ymdhms % (1 << 17)
    year, month, day = (ymd >> 5) // 13, (ymd >> 5) % 13, ymd % 32
    date = f"{sign}{year:04d}-{month:02d}-{day:02d}"
    if date_only:
        return date
    return f"{date} {hms >> 12:02d}:{(hms >> 6) % 64:02d}:{hms % 64:02d}.{micro:06d}"


def _time(packed: int) -> str:
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    micro, hms = packed % (1 << 24), packed >> 24
    return f"{sign}{(hms >> 12) % 1024:02d}:{(hms >> 6) % 64:02d}:{hms % 64:02d}.{micro:06d}"


def gcvt(x: float) -> str:
    """A double as MySQL prints it in JSON: the shortest digits that read back as `x` (Python's repr
    finds the same ones), in plain notation unless MySQL's rules ask for the exponent, and '.0' after
    a whole number in plain notation.

    Worked examples: 1e20 -> '1e20' (the point would sit 21 places right, past 15);
    1e-7 -> '0.0000001'; 1e-15 -> '0.000000000000001' but 1e-16 -> '1e-16'; 123.0 -> '123.0';
    1.5e300 -> '1.5e300'; -0.0 -> '-0.0'."""
    negative = math.copysign(1.0, x) < 0
    if x == 0:
        return "-0.0" if negative else "0.0"
    # the shortest digits, and decpt: value = 0.DIGITS * 10**decpt
    _, shortest, exponent = decimal.Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, shortest))
    decpt = len(digits) + int(exponent)
    n = len(digits)
    width = GCVT_WIDTH - negative
    exp_len = 1 + (decpt >= 101 or decpt <= -99) + (decpt >= 11 or decpt <= -9)
    f_len = n - decpt + 2 if decpt <= 0 else (n + 1 if decpt < n else decpt)
    have_space = f_len <= width
    force_e = decpt <= 0 and width <= 2 - decpt and width >= 3 + exp_len
    use_f = (have_space or (decpt <= width and (decpt >= -1 or (decpt == -2 and (n > 1 or not force_e)))
                            and not force_e)) and \
        (not have_space or (decpt >= -MAX_DECPT_FOR_F_FORMAT + 1 and (decpt <= MAX_DECPT_FOR_F_FORMAT or n > decpt)))
    sign = "-" if negative else ""
    if use_f:
        if decpt <= 0:
            text = "0." + "0" * -decpt + digits
        elif decpt < n:
            text = digits[:decpt] + "." + digits[decpt:]
        else:
            text = digits + "0" * (decpt - n) + ".0"
        return sign + text
    e = decpt - 1
    return sign + digits[0] + ("." + digits[1:] if n > 1 else "") + "e" + str(e)
