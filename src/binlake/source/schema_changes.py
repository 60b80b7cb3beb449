"""Schema changes seen in the binlog, and the guard that stops before they corrupt bronze or silver.

binlake does not yet evolve bronze and silver with the source. Until it does, a change to a
captured table must stop the pipeline with the truth, never let rows be written under the wrong
columns. Without this guard, a row written after `ADD COLUMN` would lose the new column, a renamed
column would turn into NULLs, and a `TRUNCATE` (which writes no row events) would leave silver
holding rows the source no longer has.

Two signals, both in binlog order with the data:
- a DDL statement (`QueryEvent`) that names a captured table: `TRUNCATE`, `DROP`, `RENAME` and
  `CREATE OR REPLACE` always stop; `ALTER` stops when the table's columns or primary key now differ
  from the ones binlake captured (an `ALTER` that only adds an index or changes a comment is harmless);
- a row event whose table map (with `binlog_row_metadata=FULL` it carries every column's name and
  type) does not fit the captured schema: this catches a change made while binlake was stopped,
  whatever the server's schema is now.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from binlake.errors import ConfigError, NewTableError, RuntimeFailure, SchemaChangedError
from binlake.offsets import BinlogPosition
from binlake.schema import Column, TableSchema
from binlake.source.catalog import load_schema, matches
from binlake.source.charsets import charset_of

Kind = Literal["alter", "create", "drop", "rename", "truncate", "drop_database", "create_table"]


@dataclass(frozen=True)
class SchemaChange:
    """A DDL statement naming `table` ("db.table"; "db.*" for DROP DATABASE), at the position of its event."""

    table: str
    kind: Kind
    file: str
    pos: int
    statement: str = ""
    txn: BinlogPosition | None = None  # where its transaction began (a safe place for a new schema version)

    @property
    def position(self) -> BinlogPosition:
        return BinlogPosition(self.file, self.pos, self.txn.epoch if self.txn else 0)


@dataclass(frozen=True)
class ShapeColumn:
    """One column as a row event's table map describes it (mysql-replication's decoded metadata)."""

    name: str
    type_code: int
    unsigned: bool = False
    binary: bool = False  # a string or blob column with the binary character set
    precision: int | None = None
    scale: int | None = None
    fsp: int | None = None
    bits: int | None = None
    set_values: tuple[str | bytes, ...] | None = None  # bytes in the column's character set
    collation: str | None = None  # as mysql-replication names the table map's collation id


@dataclass(frozen=True)
class TableShape:
    """The columns of `table` as the row event at `file:pos` was written."""

    table: str
    columns: tuple[ShapeColumn, ...]
    file: str
    pos: int
    txn: BinlogPosition | None = None  # where the row event's transaction began

    @property
    def position(self) -> BinlogPosition:
        return BinlogPosition(self.file, self.pos, self.txn.epoch if self.txn else 0)


# --- DDL statements ------------------------------------------------------------------------------

_NAME = r"(?:`(?:[^`]|``)+`|[^\s`.,;()]+)"
_QUALIFIED = rf"({_NAME}(?:\s*\.\s*{_NAME})?)"
COMMENT = re.compile(r"/\*.*?\*/|--[^\n]*\n|#[^\n]*\n", re.S)
_STATEMENTS: list[tuple[Kind, re.Pattern[str]]] = [
    ("alter", re.compile(rf"ALTER\s+(?:ONLINE\s+|OFFLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?{_QUALIFIED}",
                         re.I)),
    ("truncate", re.compile(rf"TRUNCATE\s+(?:TABLE\s+)?{_QUALIFIED}", re.I)),
    ("drop", re.compile(rf"DROP\s+(?:TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?({_QUALIFIED}(?:\s*,\s*{_QUALIFIED})*)",
                        re.I)),
    ("rename", re.compile(r"RENAME\s+TABLES?\s+(.*)", re.I | re.S)),
    ("create", re.compile(rf"CREATE\s+OR\s+REPLACE\s+(?:TEMPORARY\s+)?TABLE\s+{_QUALIFIED}", re.I)),
    ("create_table", re.compile(rf"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{_QUALIFIED}", re.I)),
    ("drop_database", re.compile(rf"DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?({_NAME})", re.I)),
]


def _unquote(name: str) -> str:
    name = name.strip()
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _split_qualified(text: str, default_db: str) -> tuple[str, str]:
    parts = re.findall(_NAME, text)
    if len(parts) == 2:
        return _unquote(parts[0]), _unquote(parts[1])
    return default_db, _unquote(parts[0])


def ddl_tables(statement: str, default_db: str) -> list[tuple[Kind, str, str]]:
    """The `(kind, database, table)` each table-changing DDL statement names; [] for anything else.

    For `RENAME TABLE a TO b`, both `a` and `b` are named: a captured table renamed away is as gone
    as a dropped one, and a table renamed onto a captured name replaces it. `DROP DATABASE d` names
    `("drop_database", "d", "*")`: every table in it. A plain `CREATE TABLE` is `create_table`: only a
    table that is not captured yet can be created, so it matters only when it matches the patterns.
    """
    text = COMMENT.sub(" ", statement).strip()
    for kind, pattern in _STATEMENTS:
        m = pattern.match(text)
        if not m:
            continue
        if kind == "drop":
            names = re.findall(_QUALIFIED, m.group(1))
        elif kind == "rename":
            names = re.findall(_QUALIFIED, re.sub(r"(?i)\s+TO\s+", ",", m.group(1)))
        elif kind == "drop_database":
            return [(kind, _unquote(m.group(1)), "*")]
        else:
            names = [m.group(1)]
        return [(kind, *_split_qualified(n, default_db)) for n in names]
    return []


# --- table maps against the captured schema ------------------------------------------------------

# mysql-replication's FIELD_TYPE codes -> the information_schema DATA_TYPEs each can be
_TYPES: dict[int, frozenset[str]] = {
    1: frozenset({"tinyint"}), 2: frozenset({"smallint"}), 9: frozenset({"mediumint"}),
    3: frozenset({"int", "integer"}), 8: frozenset({"bigint"}), 0: frozenset({"decimal"}),
    246: frozenset({"decimal"}), 4: frozenset({"float"}), 5: frozenset({"double", "real"}),
    16: frozenset({"bit"}), 13: frozenset({"year"}), 10: frozenset({"date"}), 14: frozenset({"date"}),
    12: frozenset({"datetime"}), 18: frozenset({"datetime"}), 7: frozenset({"timestamp"}),
    17: frozenset({"timestamp"}), 11: frozenset({"time"}), 19: frozenset({"time"}),
    15: frozenset({"varchar", "varbinary"}), 253: frozenset({"varchar", "varbinary"}),
    254: frozenset({"char", "binary", "uuid", "inet4", "inet6"}), 247: frozenset({"enum"}), 248: frozenset({"set"}),
    245: frozenset({"json"}),
    **{code: frozenset({"tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob",
                        "longblob", "json"}) for code in (249, 250, 251, 252)},
    255: frozenset({"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                    "multipolygon", "geometrycollection", "geomcollection"}),
    242: frozenset({"vector"}),
}
_BINARY_FAMILY = {"varbinary", "binary", "tinyblob", "blob", "mediumblob", "longblob"}


def shape_of(columns: list[Any]) -> tuple[ShapeColumn, ...]:
    """A table map's columns (mysql-replication `Column`s) as comparable values."""
    out = []
    for c in columns:
        charset = getattr(c, "character_set_name", None) or ""
        collation = getattr(c, "collation_name", None) or ""
        out.append(ShapeColumn(
            name=str(c.name), type_code=int(c.type), unsigned=bool(getattr(c, "unsigned", False)),
            binary=charset == "binary" or collation == "binary",
            precision=getattr(c, "precision", None), scale=getattr(c, "decimals", None),
            fsp=getattr(c, "fsp", None), bits=getattr(c, "bits", None),
            set_values=tuple(c.set_values) if getattr(c, "set_values", None) else None,
            collation=collation or None,
        ))
    return tuple(out)


def column_difference(col: Column, got: ShapeColumn) -> str | None:
    """Why `got` cannot be written as `col`, or None when the captured encoding still fits."""
    types = _TYPES.get(got.type_code)
    if types is None or col.data_type not in types:
        return f"column {col.name!r} is no longer {col.column_type}"
    if col.data_type in ("tinyint", "smallint", "mediumint", "int", "integer", "bigint") and got.unsigned != col.unsigned:
        return f"column {col.name!r} is no longer {col.column_type}"
    if col.data_type == "decimal" and got.precision is not None and (got.precision, got.scale) != (col.precision, col.scale):
        return f"column {col.name!r} is now decimal({got.precision},{got.scale}), was {col.column_type}"
    if col.data_type in ("datetime", "timestamp", "time") and got.fsp is not None and got.fsp != col.fraction:
        return f"column {col.name!r} now has {got.fsp} fractional digits, was {col.column_type}"
    if col.data_type == "bit" and got.bits is not None and got.bits != col.bit_width:
        return f"column {col.name!r} is now bit({got.bits}), was {col.column_type}"
    if got.type_code in (249, 250, 251, 252) and (col.data_type in _BINARY_FAMILY) != got.binary:
        return f"column {col.name!r} is no longer {col.column_type}"
    if got.collation and col.collation and _charset(got.collation) != _charset(col.collation):
        # the same text is other bytes now (ALTER TABLE ... CONVERT TO CHARACTER SET)
        return f"column {col.name!r} is now in character set {_charset(got.collation)}, was {_charset(col.collation)}"
    return None


def _charset(collation: str) -> str | None:
    name = charset_of(collation)
    return "utf8mb3" if name == "utf8" else name


def shape_difference(schema: TableSchema, shape: TableShape) -> str | None:
    """How a row event's columns differ from the captured schema, or None when every row still fits."""
    got = {c.name: c for c in shape.columns if schema.keeps(c.name)}
    added = [n for n in got if n not in schema.names]
    dropped = [n for n in schema.names if n not in got]
    if added or dropped:
        parts = ([f"columns added: {', '.join(added)}"] if added else []) + \
                ([f"columns gone: {', '.join(dropped)}"] if dropped else [])
        return "; ".join(parts)
    for col in schema.columns:
        why = column_difference(col, got[col.name])
        if why:
            return why
    return None


def structure(schema: TableSchema) -> tuple[Any, ...]:
    """What must not change under binlake: names, types, key. Nullability, defaults, comments may."""
    return (tuple((c.name, c.data_type, c.column_type, c.precision, c.scale, c.fraction, c.length, c.collation)
                  for c in schema.columns), schema.primary_key)


class Guard:
    """Raises `SchemaChangedError` at the first change of a captured table that binlake cannot apply.

    `current(name)` loads the table's schema from the server as it is now (None when the table is
    gone); it is asked only when an `ALTER` names a captured table. `since` gives, per table, the
    position before which its changes are already inside its snapshot (the smallest high watermark of
    its chunks): the stream emits nothing of the table from there, so a change there is no concern.
    """

    def __init__(self, schemas: dict[str, TableSchema], current: Callable[[str], TableSchema | None],
                 since: dict[str, BinlogPosition] | None = None, patterns: list[str] | None = None,
                 exists: Callable[[str], bool] = lambda name: True) -> None:
        self.schemas = schemas
        self.current = current
        self.since = since or {}
        self.patterns = patterns  # source.tables: a table created or renamed to a match is new
        self.exists = exists  # whether a table is on the server now
        self._fits: dict[tuple[str, tuple[ShapeColumn, ...]], bool] = {}

    @classmethod
    def on(cls, schemas: dict[str, TableSchema], conn: Any, since: dict[str, BinlogPosition] | None = None,
           patterns: list[str] | None = None) -> Guard:
        """A guard that asks the server over `conn` for a table's schema as it is now."""
        def current(name: str) -> TableSchema | None:
            schema = schemas[name]
            try:
                return load_schema(conn, schema.database, schema.table, {name: list(schema.chunk_key)},
                                   schema.choice, strict=False, row_filter=schema.row_filter)
            except (RuntimeFailure, ConfigError):  # gone, or its chunk-key columns are
                return None

        def exists(name: str) -> bool:
            database, _, table = name.partition(".")
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                            "AND TABLE_TYPE = 'BASE TABLE'", (database, table))
                return cur.fetchone() is not None

        return cls(schemas, current, since, patterns, exists)

    def check(self, item: SchemaChange | TableShape) -> None:
        if isinstance(item, SchemaChange) and item.kind == "drop_database" and item.table.endswith(".*"):
            database = item.table[:-2]
            for name in [n for n, s in self.schemas.items() if s.database == database]:
                self.check(SchemaChange(name, item.kind, item.file, item.pos))
            return
        schema = self.schemas.get(item.table)
        if schema is None:
            self._new_table(item)
            return
        since = self.since.get(item.table)
        if since is not None and item.position < since:
            return
        if isinstance(item, TableShape):
            key = (item.table, item.columns)
            if key not in self._fits:
                why = shape_difference(schema, item)
                if why:
                    raise _changed(item.table, item.position, why)
                self._fits[key] = True
            return
        if item.kind == "create_table":
            return  # IF NOT EXISTS of the captured table (it was not there to create before its snapshot)
        if item.kind == "alter":
            now = self.current(item.table)
            if now is not None and structure(now) == structure(schema):
                return
            why = ("after ALTER TABLE its columns or primary key differ from the captured ones" if now is not None
                   else "ALTER TABLE removed its chunk-key columns, or the table is gone")
        else:
            why = {"truncate": "TRUNCATE TABLE emptied it (a truncate writes no row events)",
                   "drop": "DROP TABLE removed it", "rename": "RENAME TABLE renamed it or replaced it",
                   "create": "CREATE OR REPLACE TABLE replaced it",
                   "drop_database": "DROP DATABASE removed it"}[item.kind]
        raise _changed(item.table, item.position, why)


    def _new_table(self, item: SchemaChange | TableShape) -> None:
        """A table that comes to match source.tables while streaming: created, or renamed to a match."""
        if not self.patterns or not isinstance(item, SchemaChange) or item.kind not in ("create_table", "rename"):
            return
        database, _, table = item.table.partition(".")
        # one created and dropped again is gone: nothing of it is left to capture
        if matches(self.patterns, database, table) and self.exists(item.table):
            how = CREATED if item.kind == "create_table" else "came to match source.tables by RENAME TABLE"
            raise NewTableError(
                f"table {item.table} {how} at binlog {item.position}; binlake captures it (from its creation in the "
                "binlog, or by a snapshot beside the stream) and streams on: run binlake run again if this stopped it"
            )


CREATED = "was created and matches source.tables"  # NewTableError's words for a CREATE (the binlog holds its rows)


def _changed(table: str, position: BinlogPosition, why: str) -> SchemaChangedError:
    return SchemaChangedError(
        f"captured table {table} changed at binlog {position}: {why}; binlake stops rather than write rows under "
        "the wrong columns (stream.schema-changes is fail, or the change is not one a stream can follow): undo "
        f"the change, or snapshot the table again (binlake resnapshot {table})"
    )
