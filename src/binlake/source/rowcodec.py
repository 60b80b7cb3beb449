"""Fast decoding of row events: one generated Python function per table shape.

mysql-replication decodes every value through several generic calls (a bitmap test, a type dispatch,
a packet read that slices a buffer), which caps the stream at a few thousand rows per second. Here
the row images of one table-map shape are decoded by a function generated once for that shape:
straight-line code per column, reading the event's bytes in place with precompiled `struct`
formats. It gives the values mysql-replication gives -- with text kept as bytes (see
`source.binlog_types`) and after `binlog_reader._image`'s corrections (a SET is the list
of its members in definition order) -- and is checked against it value for value in the tests.

A zero or partly zero DATE or DATETIME ('0000-00-00', '2020-00-15 10:00:00.5'), which has no Python
value, is its text (mysql-replication, as `binlog_types` corrects it, gives the same).

Only full row images of these column types are decoded here: integers, FLOAT, DOUBLE, DECIMAL,
CHAR/VARCHAR/BINARY/VARBINARY, TEXT/BLOB, ENUM, SET, YEAR, DATE, DATETIME(n), TIMESTAMP(n), and
MySQL's JSON (its binary form, kept). An event of any other shape (TIME, BIT, GEOMETRY, a minimal
image) returns None, and the caller uses mysql-replication's own decoding.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from binlake.source.binlog_types import VECTOR
from binlake.source.mysql_json import MysqlJson
from binlake.source.packed_decimal import decimal_size, read_decimal

Image = dict[str, Any]
Decoder = Callable[[bytes, int], tuple[Image, int]]

_FIXED = {  # type -> (signed format, unsigned format, size)
    FIELD_TYPE.SHORT: ("<h", "<H", 2),
    FIELD_TYPE.LONG: ("<i", "<I", 4),
    FIELD_TYPE.LONGLONG: ("<q", "<Q", 8),
    FIELD_TYPE.FLOAT: ("<f", "<f", 4),
    FIELD_TYPE.DOUBLE: ("<d", "<d", 8),
}
_STRINGS = (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB)
SUPPORTED = frozenset(
    {FIELD_TYPE.TINY, FIELD_TYPE.INT24, FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.YEAR, FIELD_TYPE.ENUM, FIELD_TYPE.SET,
     FIELD_TYPE.DATE, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.JSON, *_FIXED, *_STRINGS}
)


def _fraction(fsp: int, var: str, lines: list[str], ind: str) -> None:
    """Code adding a DATETIME2/TIMESTAMP2 fraction of `fsp` digits to `var`, as mysql-replication does."""
    n = (fsp + 1) // 2
    if not n:
        return
    lines.append(f"{ind}us = int.from_bytes(b[p:p + {n}], 'big', signed=True); p += {n}")
    if fsp % 2:
        lines.append(f"{ind}us = int(us / 10)")
    lines.append(f"{ind}us *= {10 ** (6 - fsp)}")
    lines.append(f"{ind}if us > 0: {var} = {var}.replace(microsecond=us)")


def _column_code(i: int, c: Any, env: dict[str, Any]) -> list[str] | None:  # noqa: C901 - one branch per type
    """Statements decoding column `i` into `v{i}` from `b` at `p` (advancing `p`), or None if unsupported."""
    t, v, ind = c.type, f"v{i}", "        "
    if t == FIELD_TYPE.TINY:
        if c.unsigned:
            return [f"{ind}{v} = b[p]; p += 1"]
        return [f"{ind}{v} = b[p]; p += 1", f"{ind}if {v} > 127: {v} -= 256"]
    if t in _FIXED:
        signed, unsigned, size = _FIXED[t]
        env[f"u{i}"] = struct.Struct(unsigned if c.unsigned else signed).unpack_from
        return [f"{ind}{v} = u{i}(b, p)[0]; p += {size}"]
    if t == FIELD_TYPE.INT24:
        lines = [f"{ind}{v} = b[p] | b[p + 1] << 8 | b[p + 2] << 16; p += 3"]
        if not c.unsigned:
            lines.append(f"{ind}if {v} >= 0x800000: {v} -= 0x1000000")
        return lines
    if t in _STRINGS:
        size = c.length_size if t == FIELD_TYPE.BLOB else (2 if c.max_length > 255 else 1)
        if size not in (1, 2, 3, 4):
            return None
        # text stays bytes, decoded by the column's character set (`schema.Column.encode`); the
        # library gives an empty value as ''
        read = f"{ind}n = int.from_bytes(b[p:p + {size}], 'little'); p += {size}"
        return [read, f"{ind}{v} = b[p:p + n] if n else ''; p += n"]
    if t == FIELD_TYPE.JSON:  # MySQL's binary form, printed by `source.mysql_json`
        read = f"{ind}n = int.from_bytes(b[p:p + {int(c.length_size)}], 'little'); p += {int(c.length_size)}"
        return [read, f"{ind}{v} = MysqlJson(b[p:p + n]) if n else None; p += n"]
    if t == FIELD_TYPE.NEWDECIMAL:
        return [f"{ind}{v}, p = read_decimal(b, p, {int(c.precision)}, {int(c.decimals)})"]
    if t == FIELD_TYPE.YEAR:
        return [f"{ind}{v} = b[p] + 1900; p += 1"]
    if t in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
        size = int(c.size)
        read = f"{ind}k = int.from_bytes(b[p:p + {size}], 'little'); p += {size}"
        if t == FIELD_TYPE.ENUM:
            env[f"m{i}"] = c.enum_values
            return [read, f"{ind}{v} = m{i}[k] if m{i} else None"]
        env[f"m{i}"] = list(enumerate(c.set_values or []))
        return [read, f"{ind}{v} = [s for j, s in m{i} if k & (1 << j)]"]
    if t == FIELD_TYPE.DATE:
        return [
            f"{ind}k = b[p] | b[p + 1] << 8 | b[p + 2] << 16; p += 3",
            f"{ind}y, mo, d = k >> 9, (k >> 5) & 15, k & 31",
            f"{ind}{v} = f'{{y:04d}}-{{mo:02d}}-{{d:02d}}' if y == 0 or mo == 0 or d == 0 else date(y, mo, d)",
        ]
    if t == FIELD_TYPE.DATETIME2:
        lines = [
            f"{ind}k = int.from_bytes(b[p:p + 5], 'big'); p += 5",
            f"{ind}ym = (k >> 22) & 0x1FFFF",
            f"{ind}try:",
            f"{ind}    {v} = datetime(ym // 13, ym % 13, (k >> 17) & 31, (k >> 12) & 31, (k >> 6) & 63, k & 63)",
            f"{ind}except ValueError:",
            f"{ind}    {v} = (f'{{ym // 13:04d}}-{{ym % 13:02d}}-{{(k >> 17) & 31:02d}} {{(k >> 12) & 31:02d}}:'",
            f"{ind}          f'{{(k >> 6) & 63:02d}}:{{k & 63:02d}}')",
        ]
        frac: list[str] = []
        _fraction(c.fsp, v, frac, ind + "    ")
        if frac:
            n = (c.fsp + 1) // 2
            us = f"int.from_bytes(b[p:p + {n}], 'big', signed=True)" + (" // 10" if c.fsp % 2 else "")
            lines += [f"{ind}if {v}.__class__ is str:",
                      f"{ind}    {v} += '.%06d' % ({us} * {10 ** (6 - c.fsp)}); p += {n}", f"{ind}else:", *frac]
        return lines
    if t == FIELD_TYPE.TIMESTAMP2:
        lines = [f"{ind}{v} = utcfromtimestamp(int.from_bytes(b[p:p + 4], 'big', signed=True)); p += 4"]
        _fraction(c.fsp, v, lines, ind)
        return lines
    return None


_FRACTION_AFTER = {FIELD_TYPE.TIME2: 3, FIELD_TYPE.DATETIME2: 5, FIELD_TYPE.TIMESTAMP2: 4}
_PREFIXED = (FIELD_TYPE.JSON, FIELD_TYPE.GEOMETRY, VECTOR)


def _skip_code(c: Any) -> list[str] | None:
    """Statements stepping `p` over a value of column `c` without reading it (a column `source.columns`
    leaves out), or None for a type whose size is not known here."""
    t, ind = c.type, "        "
    if t in (FIELD_TYPE.TINY, FIELD_TYPE.YEAR, FIELD_TYPE.INT24, FIELD_TYPE.DATE, *_FIXED):
        size = {FIELD_TYPE.TINY: 1, FIELD_TYPE.YEAR: 1, FIELD_TYPE.INT24: 3, FIELD_TYPE.DATE: 3}.get(t) \
            or _FIXED[t][2]
        return [f"{ind}p += {size}"]
    if t in _FRACTION_AFTER:
        return [f"{ind}p += {_FRACTION_AFTER[t] + (int(c.fsp) + 1) // 2}"]
    if t == FIELD_TYPE.NEWDECIMAL:
        return [f"{ind}p += {decimal_size(int(c.precision), int(c.decimals))}"]
    if t in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
        return [f"{ind}p += {int(c.size)}"]
    if t == FIELD_TYPE.BIT:
        return [f"{ind}p += {int(c.bytes)}"]
    if t in _STRINGS or t in _PREFIXED:
        size = int(c.length_size) if t in (FIELD_TYPE.BLOB, *_PREFIXED) else (2 if c.max_length > 255 else 1)
        if size not in (1, 2, 3, 4):
            return None
        return [f"{ind}p += {size} + int.from_bytes(b[p:p + {size}], 'little')"]
    return None


def compile_image(columns: list[Any], skip: frozenset[str] = frozenset()) -> Decoder | None:
    """A function decoding one full row image of a table with these table-map columns:
    `(buffer, offset) -> (image, offset after it)`; None if a column's type is not handled here. The
    columns named in `skip` are stepped over, their values neither read nor in the image."""
    env: dict[str, Any] = {"read_decimal": read_decimal, "MysqlJson": MysqlJson, "date": dt.date,
                           "datetime": dt.datetime, "utcfromtimestamp": dt.datetime.utcfromtimestamp}
    n = len(columns)
    nulls = (n + 7) // 8
    body = ["def image(b, p):", f"    nb = int.from_bytes(b[p:p + {nulls}], 'little'); p += {nulls}"]
    kept = []
    for i, c in enumerate(columns):
        if not c.name:
            return None
        if c.name in skip:
            code = _skip_code(c)
        else:
            code = _column_code(i, c, env) if c.type in SUPPORTED else None
            kept.append((i, c))
        if code is None:
            return None
        body.append(f"    if not nb & {1 << i}:")
        body += code
        if c.name not in skip:
            body += ["    else:", f"        v{i} = None"]
    body.append("    return {" + ", ".join(f"{c.name!r}: v{i}" for i, c in kept) + "}, p")
    exec(compile("\n".join(body), "<binlake row image>", "exec"), env)  # noqa: S102 - generated from type codes only
    return env["image"]  # type: ignore[no-any-return]


def shape_key(columns: list[Any]) -> tuple[Any, ...]:
    """What a generated decoder depends on: every column's name, type and metadata."""
    return tuple(
        (c.name, c.type, c.unsigned, c.character_set_name, getattr(c, "max_length", None),
         getattr(c, "length_size", None), getattr(c, "precision", None), getattr(c, "decimals", None),
         getattr(c, "fsp", None), getattr(c, "size", None),
         tuple(c.enum_values or ()) if c.type == FIELD_TYPE.ENUM else None,
         tuple(c.set_values or ()) if c.type == FIELD_TYPE.SET else None)
        for c in columns
    )


class RowDecoder:
    """Generated image decoders, one per table shape seen."""

    def __init__(self) -> None:
        self._decoders: dict[tuple[tuple[Any, ...], frozenset[str]], Decoder | None] = {}
        # a table map's column list -> its shape, while that list lives (row events of one table map,
        # and of identical table maps, share it): the list is kept so its id is not reused
        self._shapes: dict[int, tuple[list[Any], tuple[Any, ...]]] = {}

    def shape(self, columns: list[Any]) -> tuple[Any, ...]:
        known = self._shapes.get(id(columns))
        if known is not None and known[0] is columns:
            return known[1]
        if len(self._shapes) >= 1024:
            self._shapes.clear()
        key = shape_key(columns)
        self._shapes[id(columns)] = (columns, key)
        return key

    def decoder(self, columns: list[Any], keeps: Callable[[str], bool] | None = None) -> Decoder | None:
        """The decoder of images with these columns; `keeps` says which are read (all when None)."""
        skip = frozenset(c.name for c in columns if not keeps(c.name)) if keeps is not None else frozenset()
        key = (self.shape(columns), skip)
        if key not in self._decoders:
            self._decoders[key] = compile_image(columns, skip)
        return self._decoders[key]

    @staticmethod
    def full_images(event: Any, pairs: bool) -> bool:
        """Whether a row event's images hold every column (not a minimal image)."""
        full = (1 << len(event.columns)) - 1
        bitmaps = [event.columns_present_bitmap] + ([event.columns_present_bitmap2] if pairs else [])
        return all(int.from_bytes(bm, "little") & full == full for bm in bitmaps)

    def images(self, event: Any, pairs: bool, keeps: Callable[[str], bool] | None = None) -> list[Any] | None:
        """The row images of a row event not yet read: a list of images, or of (before, after) pairs
        when `pairs` (an update), with the columns `keeps` keeps; None when this event is left to
        mysql-replication."""
        if not event.complete or not self.full_images(event, pairs):
            return None
        decode = self.decoder(event.columns, keeps)
        if decode is None:
            return None
        packet = event.packet
        data = packet.read(event.event_size - packet.read_bytes)
        try:
            out: list[Any] = []
            p, end = 0, len(data)
            if pairs:
                while p < end:
                    before, p = decode(data, p)
                    after, p = decode(data, p)
                    out.append((before, after))
            else:
                while p < end:
                    image, p = decode(data, p)
                    out.append(image)
            return out
        except (ValueError, IndexError, UnicodeDecodeError, struct.error):
            packet.unread(data)  # mysql-replication decodes it, and raises what it raises
            return None
