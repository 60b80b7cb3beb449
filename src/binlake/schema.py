"""Source table schemas and the one value encoding both capture paths share.

A value read by the snapshot (`SELECT` through the DB-API driver) and the same value decoded from the
binlog (mysql-replication) arrive as different Python objects: BIT is bytes on one side and a bit
string on the other, SET a string or a Python set, a zero date a string or None. `Column.encode`
turns either into one canonical text form, and `spark_cast` (in the Spark adapter) turns that text
into the typed column, so both paths produce identical values by construction.

Type mapping (MySQL -> Spark):
    TINYINT/SMALLINT/MEDIUMINT/INT (signed)   -> tinyint/smallint/int/int
    ... unsigned                              -> smallint/int/int/bigint
    BIGINT / BIGINT UNSIGNED                  -> bigint / decimal(20,0)
    DECIMAL(p,s), p <= 38 / p > 38            -> decimal(p,s) / string (every digit kept)
    FLOAT / DOUBLE                            -> float / double (FLOAT: the stored single-precision
                                                 value; the snapshot reads CAST(col AS DOUBLE))
    BIT(1) / BIT(n)                           -> boolean / bigint (BIT(64): decimal(20,0))
    YEAR                                      -> int (YEAR 0000 -> 0)
    DATE / DATETIME(n) / TIMESTAMP(n)         -> date / timestamp_ntz / timestamp (UTC instant)
    TIME(n)                                   -> string '[-]HH:MM:SS[.ffffff]' (may be negative or > 24h)
    CHAR/VARCHAR/TEXT/ENUM/SET/JSON           -> string
    BINARY/VARBINARY/BLOB                     -> binary
    GEOMETRY, POINT, ... GEOMETRYCOLLECTION   -> struct<wkb: binary, srid: int> (Debezium's Geometry)
    VECTOR(n)                                 -> array<float>
    UUID / INET4 / INET6 (MariaDB)            -> string, as the server prints it
Zero dates ('0000-00-00', '2024-00-00', the zero DATETIME and TIMESTAMP) become NULL on both paths,
except in a key: a DATE, DATETIME or TIMESTAMP column of the primary key or the chunk key is a string
holding the server's text ('2020-00-15', '0000-00-00 00:00:00.000000'), see `zero_date_key`.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from binlake import valuetypes
from binlake.columns import ColumnChoice
from binlake.errors import UnconvertibleValueError
from binlake.source.charsets import charset_of, decoder, supported
from binlake.source.mysql_json import MysqlJson
from binlake.source.mysql_json import to_text as mysql_json_text

INT_TYPES = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
# text the driver and the binlog both give as str, encoded as itself
PLAIN_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
# every type `encode` and `spark_type` map (docs/types.md); a table with another is refused
CAPTURED_TYPES = {*INT_TYPES, "decimal", "float", "double", "real", "bit", "year", "date", "datetime", "timestamp",
                  "time", *STRING_TYPES, *BINARY_TYPES, *valuetypes.SPATIAL_TYPES, "vector",
                  *valuetypes.TEXT_FORM_SIZES}


# how COLUMN_TYPE quotes an ENUM or SET member: ' doubled, and backslash escapes
_UNESCAPE = re.compile(r"''|\\(.)", re.S)
_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "b": "\b", "Z": "\x1a"}


def _unescaped(m: re.Match[str]) -> str:
    return "'" if m.group(0) == "''" else _ESCAPES.get(m.group(1), m.group(1))


# TIMESTAMP's range starts one second after the epoch; anything earlier is the zero TIMESTAMP
TIMESTAMP_MIN = dt.datetime(1970, 1, 1, 0, 0, 1)
KEY_TEMPORAL = ("date", "datetime", "timestamp")


def zero_date_key(data_type: str, text: str) -> str:
    """A key DATE/DATETIME/TIMESTAMP's encoded text from the server's text, which may be a zero or
    partly zero date ('0000-00-00', '2020-00-15 10:00:00.5'): the form `encode` gives a valid one,
    'YYYY-MM-DD', 'YYYY-MM-DD HH:MM:SS.ffffff', the same with '+00:00' for a TIMESTAMP (in UTC).

    Such a value has no date or timestamp to become, and a key that became NULL would merge every
    zero date into one row, so a key column of these types is a string in silver: this text, which
    keeps each source key distinct and orders as the server orders them."""
    if data_type == "date":
        return text[:10]
    whole, _, fraction = text.removesuffix("+00:00").partition(".")
    out = f"{whole[:19]}.{fraction[:6].ljust(6, '0')}"
    return out + "+00:00" if data_type == "timestamp" else out


def _json_plain(v: Any) -> Any:
    """A JSON document from MySQL's binlog as `json.dumps` takes it: mysql-replication decodes MySQL's
    binary JSON with bytes for object keys and strings. Keys keep the order the binary form stores
    (by length, then bytes), which is the order the server prints, and `json.dumps`'s default
    separators are the server's, so the text equals the snapshot's."""
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, dict):
        return {_json_plain(k): _json_plain(item) for k, item in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_plain(item) for item in v]
    return v


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str  # information_schema DATA_TYPE, lower case
    column_type: str  # full COLUMN_TYPE, e.g. "bigint(20) unsigned", "enum('a','b')"
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    fraction: int = 0  # DATETIME_PRECISION
    length: int | None = None  # CHARACTER_MAXIMUM_LENGTH (bytes for binary)
    collation: str | None = None
    in_key: bool = False  # in the primary key or the chunk key (a key DATE/DATETIME/TIMESTAMP keeps zero dates)

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type

    @property
    def is_string(self) -> bool:
        return self.data_type in STRING_TYPES

    @property
    def is_binary(self) -> bool:
        return self.data_type in BINARY_TYPES

    @property
    def members(self) -> list[str]:
        """ENUM/SET members in definition order."""
        inner = self.column_type[self.column_type.index("(") + 1 : self.column_type.rindex(")")]
        return [_UNESCAPE.sub(_unescaped, m) for m in re.findall(r"'((?:[^'\\]|''|\\.)*)'", inner)]

    @property
    def bit_width(self) -> int:
        m = re.search(r"\((\d+)\)", self.column_type)
        return int(m.group(1)) if m else 1

    def spark_type(self) -> str:
        t = self.data_type
        if t in INT_TYPES:
            bits = INT_TYPES[t] + (1 if self.unsigned else 0)
            if bits <= 8:
                return "tinyint"
            if bits <= 16:
                return "smallint"
            if bits <= 32:
                return "int"
            if bits <= 64:
                return "bigint"
            return "decimal(20,0)"
        if t == "decimal":
            p, s = self.precision or 10, self.scale or 0
            return f"decimal({p},{s})" if p <= 38 else "string"
        if t == "float":
            return "float"
        if t in ("double", "real"):
            return "double"
        if t == "bit":
            w = self.bit_width
            return "boolean" if w == 1 else ("bigint" if w < 64 else "decimal(20,0)")
        if t == "year":
            return "int"
        if t in KEY_TEMPORAL and self.in_key:
            return "string"  # a zero date must stay a distinct key: see `zero_date_key`
        if t == "date":
            return "date"
        if t == "datetime":
            return "timestamp_ntz"
        if t == "timestamp":
            return "timestamp"
        if t in BINARY_TYPES:
            return "binary"
        if t in valuetypes.SPATIAL_TYPES:
            return valuetypes.SPATIAL_SPARK_TYPE
        if t == "vector":
            return valuetypes.VECTOR_SPARK_TYPE
        return "string"

    # --- the shared encoding -------------------------------------------------------------
    def encode(self, v: Any) -> str | None:  # noqa: C901 - one branch per MySQL type family
        if v is None:
            return None
        t = self.data_type
        if t in INT_TYPES:
            return str(int(v))
        if t == "year":
            # the binlog carries YEAR as year - 1900, so YEAR 0000 decodes as 1900 (not a valid YEAR)
            return "0" if int(v) in (0, 1900) else str(int(v))
        if t == "decimal":
            return format(decimal.Decimal(v), "f")
        if t == "float":
            return valuetypes.float32_text(float(v))
        if t in ("double", "real"):
            return repr(float(v))
        if t == "bit":
            if isinstance(v, (bytes, bytearray)):
                n = int.from_bytes(v, "big")
            elif isinstance(v, str):
                n = int(v, 2) if v else 0
            else:
                n = int(v)
            return ("true" if n else "false") if self.bit_width == 1 else str(n)
        if t in KEY_TEMPORAL and self.in_key and isinstance(v, str):
            return zero_date_key(t, v)
        if t == "date":
            if isinstance(v, str):
                return None if v.startswith("0000") or "-00" in v else v
            return v.isoformat()
        if t in ("datetime", "timestamp"):
            if isinstance(v, str):  # zero or invalid datetime the driver could not convert
                return None
            if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
                v = dt.datetime(v.year, v.month, v.day)
            if t == "timestamp" and v < TIMESTAMP_MIN:
                return zero_date_key(t, "0000-00-00 00:00:00") if self.in_key else None  # the zero TIMESTAMP is 0 seconds in the binlog, '0000-00-00 ...' in a SELECT
            text = f"{v.year:04d}-{v.month:02d}-{v.day:02d} {v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}"
            return text + "+00:00" if t == "timestamp" else text
        if t == "time":
            if isinstance(v, str):
                return v
            total = v.days * 86400_000000 + v.seconds * 1_000000 + v.microseconds
            sign = "-" if total < 0 else ""
            total = abs(total)
            secs, micros = divmod(total, 1_000000)
            h, rem = divmod(secs, 3600)
            m, s = divmod(rem, 60)
            frac = f".{micros:06d}"[: self.fraction + 1] if self.fraction else ""
            return f"{sign}{h:02d}:{m:02d}:{s:02d}{frac}"
        if t in BINARY_TYPES:
            b = v.encode("utf-8") if isinstance(v, str) else bytes(v)
            if t == "binary" and self.length and len(b) < self.length:
                b = b.ljust(self.length, b"\x00")  # the binlog drops BINARY(n)'s trailing zero bytes
            return base64.b64encode(b).decode("ascii")
        if t == "set":
            if isinstance(v, (list, tuple)):  # the binlog's members, in definition order
                return ",".join(self.text(m) for m in v)
            if isinstance(v, (set, frozenset)):
                chosen = {self.text(m) for m in v}
                return ",".join(m for m in self.members if m in chosen)
            return self.text(v)
        if t == "json":
            if isinstance(v, MysqlJson):
                return mysql_json_text(v)
            if isinstance(v, bytes):
                return v.decode("utf-8")
            if isinstance(v, str):
                return v
            return json.dumps(_json_plain(v), ensure_ascii=False)
        if t in valuetypes.SPATIAL_TYPES:
            return valuetypes.geometry_text(v)
        if t == "vector":
            return valuetypes.vector_text(v)
        if t in valuetypes.TEXT_FORM_SIZES:
            return valuetypes.text_form(t, v)
        if isinstance(v, bytes):
            return self.text(v)
        return str(v)

    @property
    def charset(self) -> str | None:
        return charset_of(self.collation)

    def text(self, v: str | bytes) -> str:
        """Text from the binlog's stored bytes, decoded as the server converts them to utf8mb4."""
        return decoder(self.charset or "utf8mb4")(v) if isinstance(v, bytes) else str(v)

    def fast_path(self) -> tuple[str, str, dict[str, Any]] | None:
        """The common case of `encode` as Python source: (a test of `v`, the text when it holds, the
        names both use); None where every value takes `encode`'s type dispatch. Each gives what
        `encode` gives for such a value."""
        t = self.data_type
        if t in INT_TYPES:
            return "type(v) is int", "str(v)", {}
        if t in PLAIN_TEXT:
            return ("type(v) is str or type(v) is bytes", "v if type(v) is str else text(v)",
                    {"text": decoder(self.charset or "utf8mb4")})
        if t in ("double", "real"):
            return "type(v) is float", "repr(v)", {}
        if t == "decimal":
            return "type(v) is Decimal", "format(v, 'f')", {"Decimal": decimal.Decimal}
        return None

    def encoder(self) -> Callable[[Any], str | None]:
        """`encode` for this column, answering the common Python types without its type dispatch."""
        fast = self.fast_path()
        if fast is None:
            return self.encode
        test, text, names = fast
        return eval(f"lambda v: ({text}) if {test} else encode(v)", {**names, "encode": self.encode})

    def select_expr(self) -> str:
        """The snapshot's SELECT expression: the server prints FLOAT with 6 significant digits only,
        while the binlog carries the stored single-precision value, so FLOAT is read as a DOUBLE."""
        if self.data_type == "float":
            return f"CAST({quote(self.name)} AS DOUBLE)"
        if self.data_type in KEY_TEMPORAL and self.in_key:
            return f"CAST({quote(self.name)} AS CHAR)"  # the drivers give None for a zero date
        if self.data_type == "vector":
            return f"CAST({quote(self.name)} AS BINARY)"  # PyMySQL decodes a VECTOR as text, and fails
        return quote(self.name)

    def decode(self, text: str | None) -> Any:
        """The DB-API value for a query parameter (chunk bounds) from its encoded text."""
        if text is None:
            return None
        t = self.data_type
        if t in INT_TYPES or t == "year":
            return int(text)
        if t == "decimal":
            return decimal.Decimal(text)
        if t in ("float", "double", "real"):
            return float(text)
        if t in BINARY_TYPES:
            return base64.b64decode(text)
        if t == "timestamp":
            return text.removesuffix("+00:00")
        return text

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Column:
        return cls(**d)


@dataclass(frozen=True)
class TableSchema:
    database: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    chunk_key: tuple[str, ...] = field(default=())
    chunk_key_unique: bool = False  # a UNIQUE index over NOT NULL columns lies within the chunk key
    choice: ColumnChoice | None = None  # source.columns: the columns read (binlake.columns)
    row_filter: str | None = None  # source.row-filter: the predicate silver's rows match (binlake.lake.row_filter)

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def multiset(self) -> bool:
        """No primary key and a chunk key that may repeat: rows are identified by all their values,
        and identical rows are counted (see `silver.apply_multiset`)."""
        return not self.primary_key and not self.chunk_key_unique

    @property
    def key(self) -> tuple[str, ...]:
        """The columns that identify a row: the primary key, else a unique chunk key, else every
        column (a key-less table is a multiset of row images; an update is a delete of the old
        image and an insert of the new one)."""
        if self.primary_key:
            return self.primary_key
        if self.chunk_key_unique:
            return self.chunk_key
        return tuple(self.names)

    @property
    def split_key(self) -> tuple[str, ...]:
        return self.chunk_key or self.primary_key

    def keeps(self, name: str) -> bool:
        """Whether a column of this name at the source is captured (`source.columns`; the key always is)."""
        return self.choice is None or self.choice.keeps(name) or name in self.primary_key or name in self.chunk_key

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def select_list(self) -> str:
        """The snapshot's SELECT list, one expression per column in `names` order."""
        return ", ".join(c.select_expr() for c in self.columns)

    def column_encoders(self) -> list[Callable[[Any], str | None]]:
        return [c.encoder() for c in self.columns]

    def row_encoder(self) -> Callable[[dict[str, Any]], list[str | None]]:
        """A function encoding a row (name -> value) into its columns' texts, in column order: generated
        once per schema as straight-line code, each column's common case (`Column.fast_path`) inline and
        the rest through its `encode` (a stream decodes hundreds of thousands of rows a second through this)."""
        env: dict[str, Any] = {}
        lines = ["def encode_row(row):", "    get = row.get"]
        for i, c in enumerate(self.columns):
            env[f"n{i}"], env[f"e{i}"] = c.name, c.encode
            fast = c.fast_path()
            lines.append(f"    v = get(n{i})")
            if fast is None:
                lines.append(f"    a{i} = e{i}(v)")
                continue
            test, text, names = fast
            for name, value in names.items():  # each column's names its own: `text` differs by charset
                env[f"{name}_{i}"] = value
                test, text = (re.sub(rf"\b{name}\b", f"{name}_{i}", code) for code in (test, text))
            lines.append(f"    a{i} = ({text}) if {test} else e{i}(v)")
        lines.append("    return [" + ", ".join(f"a{i}" for i in range(len(self.columns))) + "]")
        exec(compile("\n".join(lines), f"<binlake row encoder of {self.name}>", "exec"), env)  # noqa: S102
        return env["encode_row"]  # type: ignore[no-any-return]

    def refusal(self) -> str | None:
        """Why binlake cannot capture this table, one line, before any of it is read: a column of a type
        or in a character set it has no mapping for."""
        for c in self.columns:
            if c.data_type not in CAPTURED_TYPES:
                return (f"captured table {self.name}: column {c.name} is {c.column_type}, a type binlake does not "
                        "capture; leave the table out of source.tables, or change the column to a type docs/types.md's "
                        "type mapping lists")
            if c.is_string and c.data_type != "json" and c.charset and not supported(c.charset):
                return (f"captured table {self.name}: column {c.name} is in character set {c.charset}, which binlake "
                        "cannot decode from the binlog; convert it (ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4), "
                        "or leave the table out of source.tables")
        return None

    def unconvertible(self, row: dict[str, Any], exc: Exception, unit: str) -> UnconvertibleValueError:
        """The one-line error for a row whose encoding raised `exc`: the table, the column and the row's
        key, never the value (nor the exception's text, which may quote it)."""
        column = next((c for c in self.columns if not _encodes(c, row.get(c.name))), None)
        if self.multiset:
            key = "a row of this table without a primary key"
        else:
            parts = []
            for name in self.key:
                c = self.column(name)
                parts.append(f"{name}={c.encode(row.get(name)) if _encodes(c, row.get(name)) else '(unconvertible)'}")
            key = "the row with key " + ", ".join(parts)
        what = f"column {column.name} ({column.column_type}, {column.charset or 'no character set'})" if column \
            else "a column"
        return UnconvertibleValueError(
            f"captured table {self.name}: {what} of {key} holds a value binlake cannot convert "
            f"({type(exc).__name__}); nothing of this {unit} was written. Leave the table out of source.tables, "
            "or change the column to a type and character set docs/types.md lists"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "table": self.table,
            "columns": [c.to_dict() for c in self.columns],
            "primary_key": list(self.primary_key),
            "chunk_key": list(self.chunk_key),
            "chunk_key_unique": self.chunk_key_unique,
            **({"choice": self.choice.to_dict()} if self.choice else {}),
            **({"row_filter": self.row_filter} if self.row_filter else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableSchema:
        return cls(
            d["database"],
            d["table"],
            tuple(Column.from_dict(c) for c in d["columns"]),
            tuple(d["primary_key"]),
            tuple(d.get("chunk_key", ())),
            bool(d.get("chunk_key_unique", False)),
            ColumnChoice.from_dict(d["choice"]) if d.get("choice") else None,
            d.get("row_filter") or None,
        )


def _encodes(column: Column, value: Any) -> bool:
    try:
        column.encode(value)
    except Exception:  # noqa: BLE001 - any failure of the encoding is what is being looked for
        return False
    return True


def quote(name: str) -> str:
    """A MySQL identifier, quoted: backticks inside are doubled."""
    return "`" + name.replace("`", "``") + "`"


def qualified(database: str, table: str) -> str:
    return f"{quote(database)}.{quote(table)}"
