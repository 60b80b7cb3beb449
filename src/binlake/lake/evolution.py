"""Schema evolution: a captured table's schema versions, derived in binlog order with its data.

Policy `stream.schema-changes` (like Flink CDC's schema change behaviour):
    evolve   silver follows the source: columns added, dropped, renamed, types widened, TRUNCATE empties it
    lenient  nothing in silver is lost: a dropped column stays (NULL in rows written after the drop), a
             renamed column is added under its new name next to the old one
    ignore   silver keeps the schema it was made with; TRUNCATE is not applied
    fail     the stream stops at the first change (`schema_changes.Guard`)
Bronze, the change log, always holds every column it ever saw, each row image as it was written.

A version starts at the transaction of the change (`at`): every row event before `at` was written
under the previous version, every one from `at` on under this one. The binlog reader derives it when it
meets, past a table's snapshot,
- an `ALTER TABLE` naming the table: the statement says which columns it adds, drops, renames and
  modifies; the server, asked then, gives their definitions;
- a row event whose table map does not fit the version (a change the statement did not show, or a
  definition changed again by a later statement): the table map says which columns each row has.
Versions are recorded in `_binlake/schemas/` before the micro-batch commits; a replayed batch reuses
the recorded version at the same position, whatever the server's schema is by then.

Worked example: `ALTER TABLE t RENAME COLUMN v TO w, ADD COLUMN x INT DEFAULT 7` at binlog 000003:900.
The version at 000003:900 has columns (id, w, x), renames {v: w}, defaults {x: "7"}. Under `evolve`
silver renames v to w and adds x; its rows from before 000003:900 get x = 7, as the source's did.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from binlake.errors import SchemaChangedError
from binlake.lake.storage import Location
from binlake.offsets import BinlogPosition
from binlake.schema import Column, TableSchema
from binlake.source.schema_changes import (
    COMMENT,
    SchemaChange,
    ShapeColumn,
    TableShape,
    column_difference,
    shape_difference,
    structure,
)

Policy = Literal["evolve", "lenient", "ignore", "fail"]
Kind = Literal["alter", "truncate"]


@dataclass(frozen=True)
class Version:
    """The schema of `table` from the transaction at `at` on (None: from its capture)."""

    table: str
    at: BinlogPosition | None
    schema: TableSchema
    kind: Kind = "alter"
    renames: dict[str, str] = field(default_factory=dict)  # old column name -> new, relative to the version before
    defaults: dict[str, str | None] = field(default_factory=dict)  # added columns -> their value in older rows

    @property
    def seq(self) -> int:
        """Sorts before every row of the version's first transaction, after every row before it."""
        assert self.at is not None
        return self.at.seq(0)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "at": None if self.at is None else self.at.to_dict(),
                "schema": self.schema.to_dict(), "kind": self.kind, "renames": self.renames,
                "defaults": self.defaults}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Version:
        return cls(d["table"], None if d["at"] is None else BinlogPosition.from_dict(d["at"]),
                   TableSchema.from_dict(d["schema"]), d.get("kind", "alter"), dict(d.get("renames", {})),
                   dict(d.get("defaults", {})))


class History:
    """The versions of one table's schema, in a JSON file (a plain schema: one version from capture)."""

    def __init__(self, path: Location) -> None:
        self.path = path

    def exists(self) -> bool:
        return self.path.exists()

    def versions(self) -> list[Version]:
        doc = json.loads(self.path.read_text())
        if "versions" not in doc:
            schema = TableSchema.from_dict(doc)
            return [Version(schema.name, None, schema)]
        return [Version.from_dict(v) for v in doc["versions"]]

    def latest(self) -> TableSchema:
        return self.versions()[-1].schema

    def start(self, schema: TableSchema) -> None:
        """Forget every version: the table is captured anew with `schema`."""
        self._write([Version(schema.name, None, schema)])

    def record(self, versions: list[Version]) -> None:
        """Add versions derived by the stream; one already recorded at the same position is kept."""
        have = self.versions()
        known = {v.at for v in have}
        new = [v for v in versions if v.at not in known]
        if new:
            self._write(have[:1] + sorted(have[1:] + new, key=lambda v: v.seq))

    def _write(self, versions: list[Version]) -> None:
        self.path.write_text(json.dumps({"versions": [v.to_dict() for v in versions]}, ensure_ascii=False))


def version_at(versions: list[Version], position: BinlogPosition) -> Version:
    """The version in effect at `position`: the last one starting at or before it."""
    found = versions[0]
    for v in versions[1:]:
        if v.at is not None and v.at <= position:
            found = v
    return found


# --- what an ALTER TABLE statement does to columns -----------------------------------------------

Op = tuple[str, str, str]  # (add | drop | rename | modify | key | table, column, new name)

_IDENT = r"(`(?:[^`]|``)+`|[^\s`,()]+)"
_HEAD = re.compile(r"\s*ALTER\s+(?:ONLINE\s+|OFFLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?"
                   r"(?:`(?:[^`]|``)+`|[^\s`.]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[^\s`.]+))?"
                   r"(?:\s+(?:WAIT\s+\d+|NOWAIT))?\s*", re.I)
_NOT_COLUMNS = ("INDEX", "KEY", "CONSTRAINT", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK", "PARTITION",
                "PERIOD", "SYSTEM", "VECTOR")


def _ident(text: str) -> str:
    return text[1:-1].replace("``", "`") if text.startswith("`") else text


def _specs(text: str) -> list[str]:
    """`text` split at the commas outside parentheses, quotes and backticks."""
    out, depth, quote, begin = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[begin:i])
            begin = i + 1
    out.append(text[begin:])
    return [s.strip() for s in out if s.strip()]


def alter_ops(statement: str) -> list[Op]:
    """The column operations of an ALTER TABLE statement, in order. Index, constraint and option
    clauses are left out; adding or dropping a primary key is `("key", "", "")`.

    >>> alter_ops("ALTER TABLE t RENAME COLUMN v TO w, ADD x INT DEFAULT 7, DROP COLUMN IF EXISTS y")
    [('rename', 'v', 'w'), ('add', 'x', 'x'), ('drop', 'y', 'y')]
    """
    text = COMMENT.sub(" ", statement)
    head = _HEAD.match(text)
    if not head:
        return []
    ops: list[Op] = []
    for spec in _specs(text[head.end():]):
        words = spec.split(None, 1)
        verb, rest = words[0].upper(), (words[1] if len(words) > 1 else "")
        upper = rest.upper()
        if verb in ("ADD", "DROP") and re.match(r"PRIMARY\b", upper):
            ops.append(("key", "", ""))
            continue
        if verb in ("ADD", "DROP", "CHANGE", "MODIFY", "RENAME", "ALTER") and upper.startswith(_NOT_COLUMNS):
            continue
        rest = re.sub(r"(?i)^COLUMN\s+", "", rest)
        rest = re.sub(r"(?i)^IF\s+(?:NOT\s+)?EXISTS\s+", "", rest)
        if verb == "ADD":
            if rest.startswith("("):
                inner = rest[1:rest.rindex(")")]
                ops += [("add", n, n) for n in (_first_ident(s) for s in _specs(inner)) if n]
            elif (n := _first_ident(rest)) is not None:
                ops.append(("add", n, n))
        elif verb == "DROP" and (n := _first_ident(rest)) is not None:
            ops.append(("drop", n, n))
        elif verb == "MODIFY" and (n := _first_ident(rest)) is not None:
            ops.append(("modify", n, n))
        elif verb == "CHANGE":
            m = re.match(rf"{_IDENT}\s+{_IDENT}", rest)
            if m:
                old, new = _ident(m.group(1)), _ident(m.group(2))
                ops.append(("rename", old, new) if old != new else ("modify", old, old))
        elif verb == "RENAME" and re.match(r"(?i)(TO|AS)\s|[^\s]+$", rest) and not re.match(r"(?i)(COLUMN|INDEX|KEY)\s", words[1]):
            ops.append(("table", "", ""))  # ALTER TABLE t RENAME TO u: the table leaves
        elif verb == "RENAME" and re.match(r"(?i)COLUMN\s", words[1]):
            m = re.match(rf"{_IDENT}\s+TO\s+{_IDENT}", rest, re.I)
            if m:
                ops.append(("rename", _ident(m.group(1)), _ident(m.group(2))))
    return ops


def _first_ident(text: str) -> str | None:
    m = re.match(_IDENT, text.strip())
    return _ident(m.group(1)) if m else None


# --- deriving the next version -------------------------------------------------------------------

Now = Callable[[str], "TableSchema | None"]  # the table's schema on the server now (None: gone)
Defaults = Callable[[str], "dict[str, str | None]"]  # the encoded default of each column on the server now


def by_statement(old: TableSchema, ops: list[Op], now: TableSchema | None,
                 defaults: dict[str, str | None]) -> tuple[TableSchema, dict[str, str], dict[str, str | None]] | None:
    """The schema after an ALTER TABLE doing `ops` to `old`, its renames and its added columns'
    defaults; None when it changes no column. Definitions come from `now`, the server's schema."""
    if now is None:
        raise SchemaChangedError(f"captured table {old.name} is gone after ALTER TABLE (renamed away or dropped); "
                                 "binlake follows column changes, not a table leaving: capture it again under its "
                                 "new name (source.tables)")
    cols = {c.name: c for c in old.columns}
    order = [c.name for c in old.columns]
    renames: dict[str, str] = {}
    added: list[str] = []

    def spelled(name: str) -> str:
        """Column names are case-insensitive in a statement: the name as the table spells it."""
        for n in [*cols, *now.names]:
            if n.lower() == name.lower():
                return n
        return name

    for kind, name, new in ops:
        if kind == "key":
            continue  # compared below
        name = spelled(name)
        if kind != "rename":
            new = name
        elif new.lower() != name.lower():
            new = next((n for n in now.names if n.lower() == new.lower()), new)
        if kind == "add" and name in now.names and name not in cols:
            cols[name] = now.column(name)
            order.append(name)
            added.append(name)
        elif kind == "drop" and name in cols or kind == "rename" and name in cols and not old.keeps(new):
            # a rename to a name source.columns leaves out takes the column out of the capture
            del cols[name]
            order.remove(name)
        elif kind == "rename" and name in cols and new not in cols:
            col = now.column(new) if new in now.names else replace(cols[name], name=new)
            del cols[name]
            order[order.index(name)] = new
            cols[new] = col
            first = next((o for o, n in renames.items() if n == name), name)
            renames.pop(first, None)
            renames[first] = new
            if name in added:
                added[added.index(name)] = new
        elif kind == "modify" and name in cols and name in now.names:
            cols[name] = now.column(name)
    position = {n: i for i, n in enumerate(now.names)}
    order.sort(key=lambda n: position.get(n, len(position)))
    new_schema = _renamed(old, tuple(cols[n] for n in order), renames, now)
    if structure(new_schema) == structure(old) and not renames:
        return None
    return new_schema, renames, {n: defaults.get(n) for n in added}


def by_shape(old: TableSchema, shape: TableShape, now: TableSchema | None,
             defaults: dict[str, str | None]) -> tuple[TableSchema, dict[str, str], dict[str, str | None]]:
    """The schema a row event's table map shows: its columns, each defined as `old` or the server now
    defines it, whichever fits. A column neither defines as the row has it cannot be typed."""
    cols = []
    added = []
    for got in shape.columns:
        if not old.keeps(got.name):
            continue  # left out by source.columns
        mine = next((c for c in old.columns if c.name == got.name), None)
        theirs = next((c for c in (now.columns if now else ()) if c.name == got.name), None)
        fits = [c for c in (mine, theirs, from_table_map(got)) if c is not None and column_difference(c, got) is None]
        if not fits:
            raise SchemaChangedError(
                f"captured table {old.name} changed at binlog {shape.position}: rows there have column "
                f"{got.name!r} as the server no longer defines it, so binlake cannot type them; snapshot the "
                f"table again (binlake resnapshot {old.name}), or set stream.schema-changes: fail to stop at such changes"
            )
        cols.append(fits[0])
        if mine is None:
            added.append(got.name)
    return _renamed(old, tuple(cols), {}, now), {}, {n: defaults.get(n) for n in added}


_BY_CODE = {1: "tinyint", 2: "smallint", 9: "mediumint", 3: "int", 8: "bigint", 0: "decimal", 246: "decimal",
            4: "float", 5: "double", 16: "bit", 13: "year", 10: "date", 14: "date", 12: "datetime", 18: "datetime",
            7: "timestamp", 17: "timestamp", 11: "time", 19: "time", 15: "varchar", 253: "varchar", 254: "char",
            247: "enum", 248: "set", 245: "json", 249: "longtext", 250: "longtext", 251: "longtext", 252: "longtext"}
_AS_BINARY = {"varchar": "varbinary", "char": "binary", "longtext": "longblob"}


def from_table_map(got: ShapeColumn) -> Column | None:
    """A column as a row event's table map describes it, for one the server no longer has as the rows
    do (added and dropped again before binlake read them). Everything the encoding needs is there;
    the declared length of a string is not (it changes no value)."""
    data_type = _BY_CODE.get(got.type_code)
    if data_type is None:
        return None
    if got.binary:
        data_type = _AS_BINARY.get(data_type, data_type)
    column_type = data_type
    if data_type in ("tinyint", "smallint", "mediumint", "int", "bigint") and got.unsigned:
        column_type += " unsigned"
    elif data_type == "decimal":
        column_type = f"decimal({got.precision},{got.scale})"
    elif data_type == "bit":
        column_type = f"bit({got.bits or 1})"
    elif data_type == "set":
        text = Column(got.name, data_type, "", collation=got.collation).text
        quoted = ("'" + text(v).replace("\\", "\\\\").replace("'", "''") + "'" for v in got.set_values or ())
        column_type = "set(" + ",".join(quoted) + ")"
    elif data_type in ("datetime", "timestamp", "time") and got.fsp:
        column_type = f"{data_type}({got.fsp})"
    return Column(got.name, data_type, column_type, True, got.precision, got.scale, got.fsp or 0,
                  collation=got.collation)


def _renamed(old: TableSchema, columns: tuple[Column, ...], renames: dict[str, str],
             now: TableSchema | None) -> TableSchema:
    """`old` with `columns`; its key must survive, under its own names."""
    names = {c.name for c in columns}
    key = tuple(renames.get(k, k) for k in old.primary_key)
    chunk = tuple(renames.get(k, k) for k in old.chunk_key)
    moved = [k for k in old.primary_key if k in renames]
    if moved or not set(key) <= names or not set(chunk) <= names or (now is not None and now.primary_key != key):
        raise SchemaChangedError(
            f"captured table {old.name}'s primary key or chunk key changed ({', '.join(old.primary_key or old.chunk_key)}); "
            "silver is keyed by it, so binlake cannot follow the change in place: snapshot the table again "
            f"(binlake resnapshot {old.name}), or set stream.schema-changes: fail to stop at such changes"
        )
    if old.multiset:
        raise SchemaChangedError(
            f"captured table {old.name} has no primary key, and its rows are told apart by all their values; binlake "
            f"cannot change its columns in place: snapshot the table again (binlake resnapshot {old.name})"
        )
    return TableSchema(old.database, old.table, columns, key, chunk, old.chunk_key_unique, old.choice, old.row_filter)


def column_defaults(conn: Any, database: str, table: str) -> dict[str, str | None]:
    """Each column's value in rows that existed before it was added, encoded as `Column.encode` does,
    where the server states it as a constant; None for expressions (CURRENT_TIMESTAMP, ...) and NULL.
    A NOT NULL column without a default takes its type's implicit one (0 or the empty string)."""
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, COLUMN_DEFAULT, IS_NULLABLE, DATA_TYPE FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (database, table))
        rows = cur.fetchall()
    out: dict[str, str | None] = {}
    for name, default, nullable, data_type in rows:
        out[name] = _constant(default, nullable == "YES", str(data_type).lower())
    return out


_NUMERIC = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "float", "double", "real",
            "year"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"}


def _constant(default: str | None, nullable: bool, data_type: str) -> str | None:
    if default is None or default.upper() == "NULL":
        if nullable:
            return None
        return "0" if data_type in _NUMERIC else ("" if data_type in _TEXT else None)
    if data_type in _NUMERIC and re.fullmatch(r"-?\d+(\.\d+)?", default):
        return default
    if data_type in _TEXT | {"date"} and len(default) >= 2 and default[0] == default[-1] == "'":
        return default[1:-1].replace("''", "'")
    if data_type in _TEXT and not re.search(r"[()]", default):
        return default  # MySQL shows a string default unquoted
    return None


class Evolver:
    """The schema versions the binlog reader decodes rows with, derived in binlog order.

    `past(table, position)` says whether a change there is the stream's to follow (past the table's
    snapshot); `recorded` versions are reused at their positions, so a replayed batch repeats them.
    """

    def __init__(self, recorded: dict[str, list[Version]], start: BinlogPosition, now: Now, defaults: Defaults,
                 past: Callable[[str, BinlogPosition], bool]) -> None:
        self.recorded = recorded
        self.current = {name: version_at(vs, start) for name, vs in recorded.items()}
        self.now = now
        self.defaults = defaults
        self.past = past

    def schema(self, table: str) -> TableSchema:
        return self.current[table].schema

    def follow(self, item: SchemaChange | TableShape) -> Version | None | Literal[False]:
        """The version `item` starts, None when it starts none, False when it is not for the stream to
        follow: a table not captured, a change inside the table's snapshot, a table dropped, renamed or
        replaced -- the guard's to judge."""
        if not self.past(item.table, item.position):
            return False
        if isinstance(item, TableShape):
            return self.on_shape(item, item.txn or item.position)
        if item.kind not in ("alter", "truncate") or any(op[0] == "table" for op in alter_ops(item.statement)):
            return False
        return self.on_statement(item.table, item.kind, item.statement, item.txn or item.position)

    def on_statement(self, table: str, kind: str, statement: str, at: BinlogPosition) -> Version | None:
        """A new version when `statement` (an ALTER or TRUNCATE at transaction `at`) changes columns."""
        if kind == "truncate":
            if self.schema(table).multiset:  # its silver is recounted from all of bronze, rows before it too
                raise SchemaChangedError(
                    f"captured table {table} has no primary key and was truncated at binlog {at}; binlake counts "
                    f"its identical rows over its whole change log: snapshot the table again (binlake resnapshot {table})"
                )
            return self._next(Version(table, at, self.schema(table), "truncate"))
        ops = alter_ops(statement)
        if not ops:
            return None
        return self._derive(table, at, lambda old, now, d: by_statement(old, ops, now, d))

    def on_shape(self, shape: TableShape, at: BinlogPosition) -> Version | None:
        """A new version when the rows of the transaction at `at` do not fit the current one."""
        if shape_difference(self.schema(shape.table), shape) is None:
            return None
        return self._derive(shape.table, at, lambda old, now, d: by_shape(old, shape, now, d))

    def _derive(self, table: str, at: BinlogPosition,
                how: Callable[[TableSchema, TableSchema | None, dict[str, str | None]], Any]) -> Version | None:
        again = next((v for v in self.recorded.get(table, []) if v.at == at), None)
        if again is not None:
            return self._next(again)
        old = self.schema(table)
        derived = how(old, self.now(table), self.defaults(table))
        if derived is None:
            return None
        schema, renames, defaults = derived
        return self._next(Version(table, at, schema, "alter", renames, defaults))

    def _next(self, version: Version) -> Version:
        self.current[version.table] = version
        return version


def marker_row(version: Version) -> str:
    """The `_row` of a version's marker in the change stream (`_op` "s")."""
    return json.dumps(version.to_dict(), ensure_ascii=False)
