"""What binlake adds to mysql-replication's decoding of table maps and row events.

mysql-replication 1.0 does not know MySQL 9's VECTOR: a table map of a table with a VECTOR column
carries a metadata field it has no name for (it raises `ValueError: 30 is not a valid
MetadataFieldType`), the column's one byte of metadata is not read (the next columns' metadata
shifts), and a VECTOR value raises `NotImplementedError`. `install` teaches it:
- optional table-map metadata fields of a type it does not know are dropped before it parses them
  (each is type, length, value, so one can be skipped whole);
- a VECTOR column reads its metadata byte (the size of its length prefix, as a BLOB's);
- a VECTOR value is its length-prefixed bytes: little-endian single-precision floats;
- a zero or partly zero DATE or DATETIME ('0000-00-00', '2020-00-15 10:00:00.5'), which the library
  gives as None, is its text, as `rowcodec` gives it: a key of such values must stay distinct;
- text columns and ENUM/SET members arrive as the stored bytes. The library decodes them with the
  Python codec its collation table names, which is wrong for several of MySQL's character sets
  (latin1 is not cp1252, ucs2 and utf16 are big-endian, a collation it does not know decodes as
  UTF-8), and it turns an ENUM or SET member that is not UTF-8 into ''. binlake decodes the bytes
  by the column's character set (`schema.Column.encode`, `source.charsets`); a codec name that does
  not exist makes the library keep them (its own fallback for a set Python lacks);
- a MySQL JSON value arrives in its binary form, which `source.mysql_json` prints as the server does
  (a partial update's diff is left to the library);
- its control connection (the server's name, `binlog_row_metadata`) may be one the caller already
  holds (`connector`): a connection is a TLS handshake, and a chunk's fold opens a reader each time;
- a table map is parsed once per process for the same bytes (`_TableMaps`): the library parses every
  one afresh, about half a millisecond for a table of 18 columns, and each transaction of a table
  carries its table map again -- a stream of single-row transactions spent most of its time there.

Installed once per process, before the first binlog is read (`binlog_reader` calls it). These are
private methods of one release, so `install` first checks that release is the one installed
(`PINNED`, the pin in pyproject.toml) and refuses another in one line: a later release may rename
them, change their arguments or read other bytes, and binlake would then decode rows wrongly rather
than fail. Moving the pin means reading the library's row_event.py, column.py and packet.py against
`RELIED_ON` and `install`, then updating `PINNED` (tests/unit/test_mysql_replication_pin.py fails until then).
"""

from __future__ import annotations

import datetime as dt
from importlib.metadata import PackageNotFoundError, version
from collections.abc import Callable
from typing import Any

import pymysql
from pymysql.cursors import DictCursor
from pymysqlreplication import binlogstream as _binlogstream
from pymysqlreplication import column as _column
from pymysqlreplication import event as _event
from pymysqlreplication import row_event as _row_event
from pymysqlreplication.bitmap import BitGet
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.packet import BinLogPacketWrapper

from binlake.errors import LibraryVersionError
from binlake.source.mysql_json import MysqlJson

VECTOR = 242  # MYSQL_TYPE_VECTOR

OURS = frozenset({VECTOR, FIELD_TYPE.DATE, FIELD_TYPE.DATETIME2})

PACKAGE = "mysql-replication"
PINNED = "1.0.17"

# The library's methods `install` replaces or calls, with the parameters it passes them.
RELIED_ON: dict[tuple[type, str], tuple[str, ...]] = {
    (_row_event.TableMapEvent, "_get_optional_meta_data"): ("self",),
    (_row_event.TableMapEvent, "_read_type_values"): ("self", "length"),
    (_column.Column, "_Column__parse_column_definition"): ("self", "column_type", "packet"),
    (_row_event.RowsEvent, "_RowsEvent__read_values_name"): (
        "self", "column", "null_bitmap", "null_bitmap_index", "is_partial", "cols_bitmap", "unsigned", "i"),
    (_row_event.RowsEvent, "_RowsEvent__read_fsp"): ("self", "column"),
    (_row_event.RowsEvent, "_is_null"): ("null_bitmap", "position"),
    (_row_event.RowsEvent, "charset_to_encoding"): ("name",),
    (BinLogPacketWrapper, "read_binary_json"): ("self", "size", "is_partial"),
    (BinLogPacketWrapper, "read_length_coded_pascal_string"): ("self", "size"),
    (BinLogPacketWrapper, "read_uint_by_size"): ("self", "size"),
    # opens the control connection through `pymysql_wrapper` with cursorclass=DictCursor (`connector`)
    (_binlogstream.BinLogStreamReader, "_BinLogStreamReader__connect_to_ctl"): ("self",),
    # sets the attributes below BinLogEvent's own from the event's bytes alone (`_TableMaps`)
    (_row_event.TableMapEvent, "__init__"): ("self", "from_packet", "event_size", "table_map", "ctl_connection",
                                             "kwargs"),
    (_event.BinLogEvent, "__init__"): ("self", "from_packet", "event_size", "table_map", "ctl_connection",
                                       "mysql_version", "only_tables", "ignored_tables", "only_schemas",
                                       "ignored_schemas", "freeze_schema", "ignore_decode_errors", "verify_checksum",
                                       "use_checksum", "optional_meta_data", "enable_logging", "use_column_name_cache",
                                       "post_header_lengths"),
}


def _own(cls: type, name: str) -> Any:
    found = cls.__dict__.get(name)
    return found.__func__ if isinstance(found, staticmethod) else found


# each as the library defines it, taken before `install` replaces any
LIBRARY: dict[tuple[type, str], Any] = {key: _own(*key) for key in RELIED_ON}

_installed = False
_library_binary_json = BinLogPacketWrapper.read_binary_json


def check_version(found: str | None = None) -> None:
    """Refuse a release of mysql-replication other than `PINNED` (`found`: the installed one)."""
    if found is None:
        try:
            found = version(PACKAGE)
        except PackageNotFoundError:
            found = "installed without its package metadata"
    if found != PINNED:
        raise LibraryVersionError(
            f"{PACKAGE} is {found} here; binlake needs {PACKAGE} {PINNED} exactly (it adjusts private methods of "
            f"that release to decode row events): pip install '{PACKAGE}=={PINNED}'"
        )


def connector(control: Any) -> Callable[..., Any]:
    """The `pymysql_wrapper` a `BinLogStreamReader` opens its connections with: PyMySQL's connect for
    the dump, and for the library's control connection `control`, lent, where the caller holds one.
    The library opens that one alone with `cursorclass=DictCursor` (`__connect_to_ctl`), asks it the
    server's name and `binlog_row_metadata` (column names too, were they missing from the table maps:
    binlake's validation requires them), and closes it with the reader: a lent one stays open."""
    def opened(**settings: Any) -> Any:
        if control is not None and settings.get("cursorclass") is DictCursor:
            return _Lent(control)
        return pymysql.connect(**settings)

    return opened


class _Lent:
    """A connection lent to mysql-replication as its control connection: dict cursors, as the library
    asks for, and a `close` that leaves it open for its holder."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def cursor(self) -> Any:
        return self._conn.cursor(DictCursor)

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _date(k: int) -> dt.date | str:
    """A DATE's 3 bytes (year << 9 | month << 5 | day): a date, or the text of a zero date."""
    y, mo, d = k >> 9, (k >> 5) & 15, k & 31
    return f"{y:04d}-{mo:02d}-{d:02d}" if y == 0 or mo == 0 or d == 0 else dt.date(y, mo, d)


def _datetime(k: int, micros: int, fsp: int) -> dt.datetime | str:
    """A DATETIME2's 5 bytes (sign, year * 13 + month, day, hour, minute, second) and its fraction:
    a datetime, or the text of a zero date."""
    ym, day, hour, minute, second = (k >> 22) & 0x1FFFF, (k >> 17) & 31, (k >> 12) & 31, (k >> 6) & 63, k & 63
    try:
        return dt.datetime(ym // 13, ym % 13, day, hour, minute, second, max(micros, 0))
    except ValueError:
        text = f"{ym // 13:04d}-{ym % 13:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
        return text + (f".{micros:06d}" if fsp else "")


def _length_coded(data: bytes, p: int) -> tuple[int, int]:
    """A length-coded integer at `p`: (value, position after it)."""
    first = data[p]
    if first < 251:
        return first, p + 1
    size = {252: 2, 253: 3, 254: 8}[first]
    return int.from_bytes(data[p + 1:p + 1 + size], "little"), p + 1 + size


def known_metadata_only(data: bytes, start: int, end: int, known: set[int]) -> bytes:
    """The optional metadata fields in `data[start:end]` whose type is in `known`, in order."""
    kept = []
    p = start
    while p < end:
        field_start = p
        length, p = _length_coded(data, p + 1)
        p += length
        if data[field_start] in known:
            kept.append(data[field_start:p])
    return b"".join(kept)


def _type_values(self: Any, length: int) -> list[list[bytes]] | None:
    """ENUM and SET members from a table map's metadata, as bytes."""
    packet, out = self.packet, []
    end = packet.read_bytes + length
    while packet.read_bytes < end:
        count = packet.read_length_coded_binary()
        out.append([packet.read_variable_length_string() for _ in range(count)])
    return out or None


def _binary_json(self: Any, size: int, is_partial: bool) -> Any:
    """A JSON column's stored binary form (`mysql_json` prints it); a partial update's diff as the
    library decodes it."""
    if is_partial:
        return _library_binary_json(self, size, is_partial)
    length = self.read_uint_by_size(size)
    return MysqlJson(self.read(length)) if length else None


class _TableMaps:
    """Table maps parsed before, by their bytes: what the library's parse set on the event beyond
    `BinLogEvent`'s own attributes (the table id, names, columns, the `Table`). The parse reads nothing
    but the event's bytes after its header (the checksum, which covers the header, left out) and
    the server's kind, so the same bytes give the same table. Row events only read the columns a
    table map lends them, so readers can share them. Bounded: cleared once it holds `LIMIT`."""

    LIMIT = 4096

    def __init__(self) -> None:
        self.parsed: dict[tuple[str, bytes], dict[str, Any]] = {}

    def install(self) -> None:
        parse = _row_event.TableMapEvent.__init__
        base = _event.BinLogEvent.__init__
        parsed = self.parsed

        def table_map_event(self: Any, from_packet: Any, event_size: int, table_map: dict[int, Any],
                            ctl_connection: Any, **kwargs: Any) -> None:
            raw = from_packet.packet  # the pymysql packet, read up to the event's body
            key = (ctl_connection._get_dbms(), raw._data[raw._position:raw._position + event_size])
            known = parsed.get(key)
            if known is None:
                parse(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
                if self._processed and _TableMaps.LIMIT:  # LIMIT 0: none kept
                    if len(parsed) >= _TableMaps.LIMIT:
                        parsed.clear()
                    parsed[key] = {k: v for k, v in self.__dict__.items() if k not in _EVENT_OWN}
                return
            base(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
            self.__dict__.update(known)
            table_map[self.table_id] = self.table_obj

        _row_event.TableMapEvent.__init__ = table_map_event


# what BinLogEvent.__init__ sets: a table map parsed before takes these from its own event
_EVENT_OWN = frozenset({"packet", "table_map", "event_type", "timestamp", "event_size", "_post_header_lengths",
                        "_ctl_connection", "mysql_version", "_ignore_decode_errors", "_verify_checksum",
                        "_is_event_valid", "_processed", "complete", "dbms"})
TABLE_MAPS = _TableMaps()


def install() -> None:
    global _installed
    if _installed:
        return
    check_version()
    table_map = _row_event.TableMapEvent
    known = {m.value for m in _row_event.MetadataFieldType} - {
        _row_event.MetadataFieldType.UNKNOWN_METADATA_FIELD_TYPE.value}
    parse_metadata = table_map._get_optional_meta_data

    def optional_metadata(self: Any) -> Any:
        raw = self.packet.packet  # the pymysql packet under the library's wrapper
        end = len(raw._data) - BINLOG.BINLOG_CHECKSUM_LEN
        kept = known_metadata_only(raw._data, raw._position, end, known)
        raw._data = raw._data[:raw._position] + kept + raw._data[end:]
        return parse_metadata(self)

    table_map._get_optional_meta_data = optional_metadata

    parse_column = _column.Column._Column__parse_column_definition

    def column_definition(self: Any, column_type: int, packet: Any) -> None:
        parse_column(self, column_type, packet)
        if column_type == VECTOR:
            self.length_size = packet.read_uint8()

    _column.Column._Column__parse_column_definition = column_definition

    read_value = _row_event.RowsEvent._RowsEvent__read_values_name

    def value(self: Any, column: Any, null_bitmap: Any, null_bitmap_index: int, is_partial: bool, cols_bitmap: Any,
              unsigned: bool, i: int) -> Any:
        if column.type in OURS and BitGet(cols_bitmap, i) and not self._is_null(null_bitmap, null_bitmap_index):
            if column.type == VECTOR:
                return self.packet.read_length_coded_pascal_string(column.length_size)
            if column.type == FIELD_TYPE.DATE:
                return _date(self.packet.read_uint24())
            k = int.from_bytes(self.packet.read(5), "big")
            return _datetime(k, self._RowsEvent__read_fsp(column), column.fsp)
        return read_value(self, column, null_bitmap, null_bitmap_index, is_partial, cols_bitmap, unsigned, i)

    _row_event.RowsEvent._RowsEvent__read_values_name = value
    _row_event.RowsEvent.charset_to_encoding = staticmethod(lambda name: "binlake-stored-bytes")
    table_map._read_type_values = _type_values
    BinLogPacketWrapper.read_binary_json = _binary_json
    TABLE_MAPS.install()
    _installed = True
