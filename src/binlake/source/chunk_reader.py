"""Reading one chunk without locks: low watermark, SELECT, high watermark, fold the gap.

    1. LW := a binlog position every transaction before which the SELECT sees (the status position,
       settled by the dialect's exact method: never the status command alone, see
       `binlake.source.dialect`)
    2. SELECT the chunk's rows into a buffer keyed by row identity (on MariaDB inside a consistent
       snapshot, so its view never holds half a group commit)
    3. HW := current binlog position
    4. if HW > LW: fold every row event of this table between LW and HW whose key lies in the chunk
       into the buffer -- insert/update put the after image, delete drops the key
    5. the buffer is now exactly the chunk's state at HW

Rows written while the SELECT runs may or may not be in its result; either way the fold replays
them on top, and because the fold applies them in binlog order the buffer ends at HW's state.
`Hooks` let tests run SQL exactly after LW, after the SELECT and before HW to force those races.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from binlake import faults
from binlake.errors import RuntimeFailure, SchemaChangedError, UnconvertibleValueError
from binlake.keys import KeyOrder, range_predicate
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema, qualified
from binlake.source.binlog_reader import RowChange, read_changes, split_key_change
from binlake.source.connection import DEFAULT_READ_TIMEOUT, Connections
from binlake.source.dialect import Dialect
from binlake.source.schema_changes import Guard
from binlake.splits import Split

log = logging.getLogger(__name__)

Hook = Callable[[], None]


@dataclass
class Hooks:
    after_low_watermark: Hook | None = None
    after_select: Hook | None = None
    before_high_watermark: Hook | None = None


@dataclass
class ChunkResult:
    split: Split
    lw: BinlogPosition
    hw: BinlogPosition
    names: list[str]
    columns: list[list[str | None]]  # encoded values (schema.Column.encode), one list per column: state at hw
    seconds: float = 0.0
    folded_events: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> list[dict[str, str | None]]:
        return [dict(zip(self.names, values)) for values in zip(*self.columns)]


class Membership:
    """Is a key inside `[start, end)` of a split? Compared in the server's order (see KeyOrder)."""

    def __init__(self, order: KeyOrder, split: Split) -> None:
        self.order = order
        self.lo = None if split.start is None else order.bound_key(split.start)
        self.hi = None if split.end is None else order.bound_key(split.end)

    def __contains__(self, row: dict[str, Any]) -> bool:
        k = self.order.sort_key(self.order.key_values(row))
        return (self.lo is None or k >= self.lo) and (self.hi is None or k < self.hi)


def row_identity(schema: TableSchema, row: dict[str, Any]) -> tuple[Any, ...]:
    """The buffer key of a row: its primary key, or every column when the table has none (a unique
    chunk key makes identical rows impossible)."""
    cols = [schema.column(k) for k in schema.primary_key] if schema.primary_key else list(schema.columns)
    return tuple(c.encode(row.get(c.name)) for c in cols)


def encode_columns(schema: TableSchema, values: list[tuple[Any, ...]]) -> list[list[str | None]]:
    """Rows of values in `schema.names` order -> one list of encoded values per column."""
    if not values:
        return [[] for _ in schema.columns]
    try:
        return [list(map(encode, column)) for encode, column in zip(schema.column_encoders(), zip(*values))]
    except Exception as exc:
        encode_row = schema.row_encoder()
        for row in values:
            image = dict(zip(schema.names, row))
            try:
                encode_row(image)
            except Exception:  # noqa: BLE001 - the row whose encoding failed
                raise schema.unconvertible(image, exc, "chunk") from None
        raise


def select_chunk(params: dict[str, Any], schema: TableSchema, split: Split,
                 held: Connections | None = None) -> list[list[str | None]]:
    """The chunk's rows as they are now, encoded, by column: no watermarks."""
    with _holding(params, held) as conns:
        return encode_columns(schema, _select(schema, split, conns.bulk().cursor()))


@contextmanager
def _holding(params: dict[str, Any], held: Connections | None) -> Iterator[Connections]:
    """`held`, reset when the read fails; or connections of the read's own, closed after it."""
    conns = held or Connections(params)
    try:
        yield conns
    except BaseException:
        conns.reset()
        raise
    finally:
        if held is None:
            conns.close()


def read_chunk(
    params: dict[str, Any],
    schema: TableSchema,
    split: Split,
    server_id: int,
    hooks: Hooks | None = None,
    dialect: Dialect | None = None,
    held: Connections | None = None,
    condition: str | None = None,
) -> ChunkResult:
    """The chunk's exact state at its high watermark: a settled LW (the server's exact method, see
    `binlake.source.dialect`), the SELECT, HW and the fold of LW..HW. A reader of many chunks passes
    the connections it `held` across them (`Connections`); without, the read opens its own.

    With `condition` (SQL over the table's columns; a snapshot of some of its rows), the SELECT takes
    the rows that match it, and the fold still every change of the chunk's keys: the result is then
    the exact state at HW of every key that matches at HW (and of some that no longer do)."""
    hooks = hooks or Hooks()
    began = time.monotonic()
    with _holding(params, held) as conns:
        dialect = dialect or Dialect.of(conns.control())
        if schema.multiset:
            return read_multiset_chunk(params, conns, dialect, schema, split, server_id, hooks, began)
        result = _folded_read(params, conns, dialect, schema, split, server_id, hooks, condition)
    result.seconds = time.monotonic() - began
    return result


def _low_watermark(params: dict[str, Any], conn: Any, dialect: Dialect, split: Split) -> BinlogPosition:
    """A position every transaction before which the next SELECT sees (the dialect's settle)."""
    lw = dialect.head(conn)
    # half the read timeout, so the server answers the wait before the socket gives up on it
    dialect.settle(conn, lw, float(params.get("read_timeout") or DEFAULT_READ_TIMEOUT) / 2)
    log.debug("split %s: low watermark %s", split.id, lw)
    return lw


def _fold_window(params: dict[str, Any], conns: Connections, schema: TableSchema, split: Split,
                 server_id: int, lw: BinlogPosition, hw: BinlogPosition,
                 values: list[Any]) -> tuple[list[Any], int]:
    """The SELECT's rows with every row change of the chunk between LW and HW replayed on them."""
    faults.point("before_fold", split.id)
    if not hw > lw:
        return values, 0
    folded = 0
    conn = conns.control()
    guard = Guard.on({schema.name: schema}, conn)
    changes = []
    for change in _changes(params, conn, schema, server_id, lw, hw, ddl=True):
        if not isinstance(change, RowChange):
            guard.check(change)
            continue
        changes += split_key_change(change, schema.key, operator.eq)
    if changes:
        values = _folded(schema, values, Membership(KeyOrder(schema, conn), split), changes)
        folded = len(changes)
    log.debug("split %s: folded %d row changes between %s and %s", split.id, folded, lw, hw)
    return values, folded


def _between_watermarks(params: dict[str, Any], conns: Connections, dialect: Dialect, schema: TableSchema,
                        split: Split, hooks: Hooks,
                        condition: str | None = None) -> tuple[BinlogPosition, list[Any], BinlogPosition]:
    """A settled LW, the chunk's SELECT and HW, with the tests' hooks between them."""
    conn = conns.control()
    lw = _low_watermark(params, conn, dialect, split)
    faults.point("after_low_watermark", split.id)
    if hooks.after_low_watermark:
        hooks.after_low_watermark()
    values = _select_rows(conns.bulk(), dialect, schema, split, condition)
    log.debug("split %s: selected %d rows", split.id, len(values))
    if hooks.after_select:
        hooks.after_select()
    if hooks.before_high_watermark:
        hooks.before_high_watermark()
    hw = dialect.head(conn)
    log.debug("split %s: high watermark %s", split.id, hw)
    return lw, values, hw


def _folded_read(params: dict[str, Any], conns: Connections, dialect: Dialect, schema: TableSchema, split: Split,
                 server_id: int, hooks: Hooks, condition: str | None = None) -> ChunkResult:
    lw, values, hw = _between_watermarks(params, conns, dialect, schema, split, hooks, condition)
    values, folded = _fold_window(params, conns, schema, split, server_id, lw, hw, values)
    return ChunkResult(split, lw, hw, schema.names, encode_columns(schema, values), folded_events=folded)


def _folded(schema: TableSchema, values: list[tuple[Any, ...]], member: Membership,
            changes: list[RowChange]) -> list[tuple[Any, ...]]:
    """The SELECT's rows with the row changes between LW and HW replayed on them in binlog order."""
    names = schema.names
    buffer: dict[tuple[Any, ...], dict[str, Any]] = {}
    for v in values:
        row = dict(zip(names, v))
        buffer[row_identity(schema, row)] = row
    for change in changes:
        _fold(schema, buffer, member, change)
    return [tuple(row.get(n) for n in names) for row in buffer.values()]


def _select_rows(bulk: Any, dialect: Dialect, schema: TableSchema, split: Split,
                 condition: str | None = None) -> list[Any]:
    """The chunk's rows, selected after the settled LW on the bulk connection (not the one the
    watermarks are taken on), in a consistent snapshot where the dialect asks for one (MariaDB)."""
    cur = bulk.cursor()
    if not dialect.snapshot_select:
        return _select(schema, split, cur, condition)
    cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    rows = _select(schema, split, cur, condition)
    cur.execute("COMMIT")
    return rows


def _select(schema: TableSchema, split: Split, cur: Any, condition: str | None = None) -> list[Any]:
    """The chunk's rows, on `cur`. A column or the table gone (changed since the snapshot began) is a
    schema change."""
    try:
        cur.execute(*_chunk_query(schema, split, condition))
        return list(cur.fetchall())
    except UnicodeDecodeError:  # the driver decodes text: which row it was, it does not say
        raise UnconvertibleValueError(
            f"captured table {schema.name}: a text value in chunk {split.id} is not valid in its column's character "
            "set (the server stores it, but it is no character: a UTF-16 surrogate, say); nothing of this chunk "
            "was written. Correct the value at the source, or leave the table out of source.tables"
        ) from None
    except Exception as exc:  # PyMySQL or mysqlclient: both carry the server's error number first
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        # unknown column, no such table, table definition changed after the snapshot began
        if code not in (1054, 1146, 1412):
            raise
        raise SchemaChangedError(
            f"captured table {schema.name} changed during its snapshot ({exc.args[1] if len(exc.args) > 1 else exc}); "
            f"its chunks must all be read with one schema: snapshot the table again (binlake resnapshot {schema.name})"
        ) from None


def _chunk_query(schema: TableSchema, split: Split, condition: str | None = None) -> tuple[str, list[Any]]:
    where, args = range_predicate(schema, split.start, split.end)
    table = qualified(schema.database, schema.table)
    if condition:  # `%` is the driver's placeholder mark
        where = f"({where}) AND ({condition.replace('%', '%%')})"
    return f"SELECT {schema.select_list()} FROM {table} WHERE {where}", args


def _changes(params: dict[str, Any], conn: Any, schema: TableSchema, server_id: int, lw: BinlogPosition,
             hw: BinlogPosition, ddl: bool = False) -> Iterator[Any]:
    return read_changes(params, server_id, lw, hw, lambda d, t: d == schema.database and t == schema.table,
                        ddl=ddl, control=conn, keeps=schema.keeps if schema.choice is not None else None)


# chunk reads of a key-less table, before giving up
MULTISET_ATTEMPTS = 20


def read_multiset_chunk(params: dict[str, Any], conns: Connections, dialect: Dialect, schema: TableSchema,
                        split: Split, server_id: int, hooks: Hooks, began: float) -> ChunkResult:
    """A chunk of a table whose rows have no identity but their values (no primary key, a chunk key
    that may repeat), read as the exact state at one binlog position.

    The fold cannot be used: identical rows are told apart only by their number, and replaying an
    insert the SELECT already saw would count it twice. So the chunk is read between a settled LW and
    HW, and read again until no row event of the table between them touches the chunk (its SELECT
    then is the state at HW).
    """
    lw, hw, values = _quiet_read(params, conns, dialect, schema, split, server_id, hooks)
    log.debug("split %s: %d rows at %s", split.id, len(values), hw)
    return ChunkResult(split, lw, hw, schema.names, encode_columns(schema, values), time.monotonic() - began)


def _quiet_read(params: dict[str, Any], conns: Connections, dialect: Dialect, schema: TableSchema, split: Split,
                server_id: int, hooks: Hooks) -> tuple[BinlogPosition, BinlogPosition, list[Any]]:
    member = Membership(KeyOrder(schema, conns.control()), split)
    for attempt in range(1, MULTISET_ATTEMPTS + 1):
        lw, values, hw = _between_watermarks(params, conns, dialect, schema, split, hooks)
        if hw == lw or not any(
            (c.before is not None and c.before in member) or (c.after is not None and c.after in member)
            for c in _changes(params, conns.control(), schema, server_id, lw, hw)
        ):
            return lw, hw, values
        log.info("split %s: rows of the chunk changed between %s and %s (attempt %d); reading it again",
                 split.id, lw, hw, attempt)
    raise RuntimeFailure(
        f"chunk {split.id} of {schema.name} (no primary key, source.chunk-key not unique) changed during "
        f"each of {MULTISET_ATTEMPTS} reads; binlake needs one read with no write to the chunk: lower "
        "snapshot.chunk-size, add a primary key, or capture it when it is written less"
    )


def _fold(schema: TableSchema, buffer: dict[tuple[Any, ...], dict[str, Any]], member: Membership, change: Any) -> None:
    if change.before is not None and change.op in ("u", "d"):
        buffer.pop(row_identity(schema, change.before), None)
    if change.after is not None and change.after in member:
        buffer[row_identity(schema, change.after)] = dict(change.after)
