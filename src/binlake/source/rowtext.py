"""Row images straight to the change rows' `_vals` (each captured column's encoded text, in column order),
natively: the `native/rowtext` extension.

The Python path decodes a row event's images into Python values (`rowcodec`) and encodes each value
(`schema.Column.encode`); most of a stream's CPU goes there. For a table shape whose every column it
knows, the extension reads the event's bytes and writes the same texts itself, one `Plan` per table
shape and schema version, straight into the buffers of the Arrow column Spark receives (`RowValues`):

    table map: id INT, name VARCHAR(20) utf8mb4, born DATE     schema: id, name, born (born not a key)
    plan:      ("int", 4, 1, "plain"), ("bytes", 1, 0, "text"), ("date", 0, 0, "temporal", 0)
    row bytes: 00 | 2a 00 00 00 | 03 'A' 'n' 'n' | 21 b7 0f   ->  ["42", "Ann", "1985-09-01"]

It gives exactly what the Python path gives (tests/unit/test_rowtext.py compares the two value for
value over every type it takes, and the type and character-set tests run both). Where it is not
built or not importable (a platform without a compiled part, Databricks serverless), `available()` is
False and everything takes the Python path. MySQL's JSON, BIT, spatial types, VECTOR and text in the
multi-byte sets other than UTF-8 are read natively and written by binlake's Python encoding of their
bytes, value by value; the rest of their row stays native. A shape with a column it does not take
(TIME, a FLOAT or DOUBLE key, a type it does not know) has no plan, and a value it cannot read (an
invalid date, bytes that are not UTF-8, a Python encoding that raises) makes `append` answer None, with
nothing appended: that event then takes the Python path, which decodes it, or refuses it in one line,
as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from binlake import valuetypes
from binlake.schema import BINARY_TYPES, INT_TYPES, PLAIN_TEXT, Column, TableSchema
from binlake.source.binlog_types import VECTOR
from binlake.source.charset_tables import SINGLE_BYTE
from binlake.source.charsets import UNICODE, decoder
from binlake.source.mysql_json import MysqlJson

try:
    from binlake.source import _rowtext  # type: ignore[attr-defined]
except ImportError:  # not built here: the Python path does it all
    _rowtext = None
if os.environ.get("BINLAKE_NATIVE") == "0":  # the Python path alone, to compare or to rule the native one out
    _rowtext = None

_INTS = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4, FIELD_TYPE.LONGLONG: 8}
_STRINGS = (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB)
_TEMPORAL = {FIELD_TYPE.DATE: "date", FIELD_TYPE.DATETIME2: "datetime", FIELD_TYPE.TIMESTAMP2: "timestamp"}
_FLOATS = (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE)

Spec = tuple[Any, ...]  # (decode, a, b, encoding, e, character table, member texts, Python function)


def available() -> bool:
    return _rowtext is not None


def _decode(c: Any) -> tuple[str, int, int] | None:
    """How the extension reads table-map column `c`'s values: (kind, a, b)."""
    t = c.type
    if t in _INTS:
        return "int", _INTS[t], 0 if c.unsigned else 1
    if t == FIELD_TYPE.YEAR:
        return "year", 0, 0
    if t == FIELD_TYPE.FLOAT:
        return "float", 0, 0
    if t == FIELD_TYPE.DOUBLE:
        return "double", 0, 0
    if t == FIELD_TYPE.NEWDECIMAL:
        return "decimal", int(c.precision), int(c.decimals)
    if t in _STRINGS:
        return "bytes", int(c.length_size) if t == FIELD_TYPE.BLOB else (2 if c.max_length > 255 else 1), 0
    if t == FIELD_TYPE.ENUM:
        return "enum", int(c.size), 0
    if t == FIELD_TYPE.SET:
        return "set", int(c.size), 0
    if t in _TEMPORAL:
        return _TEMPORAL[t], int(c.fsp) if t != FIELD_TYPE.DATE else 0, 0
    if t in (FIELD_TYPE.JSON, FIELD_TYPE.GEOMETRY, VECTOR):  # length-prefixed bytes
        return "bytes", int(c.length_size), 0
    if t == FIELD_TYPE.BIT:
        return "fixed", int(c.bytes), 0
    return None


def _stepped(c: Any) -> tuple[str, int, int] | None:
    """How the extension steps over a value of a column it does not write and cannot read (a TIME left
    out by `source.columns`): as fixed bytes."""
    if c.type == FIELD_TYPE.TIME2:
        return "fixed", 3 + (int(c.fsp) + 1) // 2, 0
    return None


Encoding = tuple[str, int, "str | None", "list[str | None] | None", "Callable[[bytes], str | None] | None"]


def _encode(c: Any, kind: str, col: Column) -> Encoding | None:  # noqa: C901 - one branch per type family
    """How the extension writes the values of table-map column `c` (read as `kind`) for schema column
    `col`: (encoding, e, character table, member texts, Python function); None where it does not take
    the pair. A type it has no native text for gets `col.encode` of exactly what the Python path hands it
    (the "python" encoding, called per value: the rest of the row stays native)."""
    t = col.data_type
    if kind == "int" and t in INT_TYPES or kind == "year" and t == "year" or kind == "float" and t == "float" \
            or kind == "double" and t in ("double", "real") or kind == "decimal" and t == "decimal":
        return "plain", 0, None, None, None
    if kind == "bytes" and t == "json" and c.type == FIELD_TYPE.JSON:  # MySQL's binary form
        encode = col.encode
        return "python", 0, None, None, lambda d: encode(MysqlJson(d)) if d else None
    if kind == "bytes" and t == "json":  # MariaDB's JSON is text, always UTF-8
        return "text", 0, None, None, None
    if kind == "bytes" and t in PLAIN_TEXT and t != "enum":
        charset = col.charset or "utf8mb4"
        if UNICODE.get(charset) == "utf-8":
            return "text", 0, None, None, None
        table = SINGLE_BYTE.get(charset)
        if isinstance(table, str) and len(table) == 256:
            return "text", 0, table, None, None
        text = decoder(charset)  # LookupError: no plan, and the Python path refuses the column
        return "python", 0, None, None, lambda d: text(d) if d else ""
    if kind == "bytes" and t in BINARY_TYPES:
        return "base64", int(col.length or 0) if t == "binary" else 0, None, None, None
    if kind == "bytes" and (t in valuetypes.SPATIAL_TYPES and c.type == FIELD_TYPE.GEOMETRY
                            or t == "vector" and c.type == VECTOR):
        return "python", 0, None, None, col.encode
    if kind == "fixed" and t == "bit":  # as mysql-replication gives it: the column's bits, as text
        encode, bits = col.encode, int(c.bits)
        return "python", 0, None, None, lambda d: encode(format(int.from_bytes(d, "big") & ((1 << bits) - 1),
                                                                f"0{bits}b"))
    if kind == "enum" and t == "enum":
        return "members", 0, None, [col.encode(m) for m in c.enum_values or []], None
    if kind == "set" and t == "set":
        return "members", 0, None, [col.text(m) for m in c.set_values or []], None
    if kind == t and kind in _TEMPORAL.values():
        return "temporal", int(col.in_key), None, None, None
    return None


def compile_plan(schema: TableSchema, columns: list[Any]) -> Any | None:
    """The extension's plan for row events with these table-map `columns` under `schema`, or None."""
    if _rowtext is None:
        return None
    index = {c.name: i for i, c in enumerate(columns)}
    if not all(index) or len(index) != len(columns):
        return None
    captured = {col.name: col for col in schema.columns}
    specs: list[Spec] = []
    try:
        for c in columns:
            col = captured.get(c.name)
            decode = _decode(c) or (_stepped(c) if col is None else None)
            if decode is None:
                return None
            encode = ("skip", 0, None, None, None) if col is None else _encode(c, decode[0], col)
            if encode is None:
                return None
            specs.append((*decode, *encode))
    except Exception:  # noqa: BLE001 - a member that does not decode: the Python path says why
        return None
    key = schema.key
    if any(k not in index or columns[index[k]].type in _FLOATS for k in key):
        return None  # -0.0 equals 0.0 but not byte for byte: a float key compares as Python values
    try:
        return _rowtext.Plan(specs, [(col.name, index.get(col.name)) for col in schema.columns],
                             [index[k] for k in key])
    except ValueError:  # metadata it has no form for (a SET of more than 64 members, say)
        return None


class Plans:
    """The plans of one reader, by schema version and table shape."""

    def __init__(self) -> None:
        self._plans: dict[tuple[int, tuple[Any, ...]], Any] = {}
        self._schemas: dict[int, TableSchema] = {}  # keeps each schema alive while its id is a key

    def plan(self, schema: TableSchema, columns: list[Any], shape: tuple[Any, ...]) -> Any | None:
        key = (id(schema), shape)
        if key not in self._plans:
            self._schemas[id(schema)] = schema
            self._plans[key] = compile_plan(schema, columns)
        return self._plans[key]


class RowValues:
    """The change rows' `_vals`, in the order the rows are made: the encoded texts of a data row's
    columns, or none (a schema marker, a batch's trailer). Built natively where the extension is (a plan
    appends an event's rows straight into its buffers), else as Python lists; `take` hands the first
    rows over as an Arrow `list<string>` array."""

    def __init__(self) -> None:
        self.native = _rowtext.Values() if _rowtext is not None else None
        self._rows: list[list[str | None] | None] = []
        self._bytes = 0

    def push(self, row: list[str | None] | None) -> None:
        if self.native is not None:
            self.native.push(row)
            return
        self._rows.append(row)
        self._bytes += sum(len(v) for v in row if v is not None) if row else 0

    def nbytes(self) -> int:
        return self.native.nbytes() if self.native is not None else self._bytes

    def take(self, k: int) -> Any:
        import pyarrow as pa  # deferred: status and check never load it

        if self.native is None:
            rows, self._rows = self._rows[:k], self._rows[k:]
            self._bytes = sum(len(v) for r in self._rows if r for v in r if v is not None)
            return pa.array(rows, pa.list_(pa.string()))
        n, valid, offsets, data, nulls, row_valid, row_offsets, null_rows = self.native.take(k)
        texts = pa.Array.from_buffers(pa.string(), n, [pa.py_buffer(b) for b in (valid, offsets, data)],
                                      null_count=nulls)
        return pa.Array.from_buffers(pa.list_(pa.string()), k, [pa.py_buffer(b) for b in (row_valid, row_offsets)],
                                     null_count=null_rows, children=[texts])
