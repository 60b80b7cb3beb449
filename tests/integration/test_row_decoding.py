"""The generated row decoder (binlake.source.rowcodec) against mysql-replication's own decoding, value for value,
over real binlog events of every type it handles: inserts, updates (both images) and deletes of the
rows test_types uses, in multi-row and single-row events. A table with a type it leaves to the library
(TIME) still reads the same."""

from __future__ import annotations

import decimal
from typing import Any

import pytest

from binlake.source import rowcodec, rowtext
from binlake.source.binlog_reader import RowChange, RowEvent, read_changes
from binlake.source.catalog import load_schema
from binlake.source.connection import connect as source_connect
from binlake.source.dialect import binlog_head

from .capture import connect
from .helpers import params
from .test_types import COLUMNS, ROWS

# the types the generated decoder reads itself (TIME, BIT and JSON are left to mysql-replication)
FAST = [(i, n, t) for i, (n, t, _) in enumerate(COLUMNS) if not t.startswith(("TIME(", "TIME ", "BIT")) and t not in ("TIME", "JSON")]


def _changes(dev_db: Any, database: str, start: Any, stop: Any) -> list[tuple[Any, ...]]:
    got = read_changes(params(dev_db), 5391, start, stop, lambda d, t: d == database)
    return [(c.table, c.op, c.row, c.before, c.after) for c in got if isinstance(c, RowChange)]


def _write(dev_db: Any, database: str, table: str, cols: list[tuple[int, str, str]]) -> tuple[Any, Any]:
    p = params(dev_db)
    conn = source_connect(p)
    start = binlog_head(conn)
    names = [n for _, n, _ in cols]
    rows = [[r[i] for i, _, _ in cols] for r in ROWS]
    with connect(dev_db.running_port(), database, time_zone="+05:30", sql_mode="") as w, w.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, "
                    + ", ".join(f"`{n}` {t}" for _, n, t in cols) + ", l1 VARCHAR(20) CHARACTER SET latin1, "
                    "u3 CHAR(5) CHARACTER SET utf8mb3) CHARACTER SET utf8mb4")
        values = [f"({i}, {', '.join(r)}, 'café', 'ñé')" for i, r in enumerate(rows, 1)]
        cur.execute(f"INSERT INTO {table} VALUES {', '.join(values)}")  # one multi-row event
        for i, r in enumerate(rows, 1):
            other = rows[i % len(rows)]
            cur.execute(f"INSERT INTO {table} VALUES ({100 + i}, {', '.join(r)}, NULL, NULL)")
            sets = ", ".join(f"`{c}` = {v}" for c, v in zip(names, other))
            cur.execute(f"UPDATE {table} SET {sets}, l1 = 'Ø' WHERE id = {i}")
        cur.execute(f"UPDATE {table} SET id = id + 1000 WHERE id > 100")  # multi-row update
        cur.execute(f"DELETE FROM {table} WHERE id > 1000")
    stop = binlog_head(conn)
    conn.close()
    return start, stop


def test_generated_decoder_gives_the_librarys_values(dev_db, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    start, stop = _write(dev_db, database, "fast", FAST)
    used = []
    images = rowcodec.RowDecoder.images

    def counting(self: Any, event: Any, pairs: bool, keeps: Any = None) -> Any:
        out = images(self, event, pairs, keeps)
        used.append(out is not None)
        return out

    monkeypatch.setattr(rowcodec.RowDecoder, "images", counting)
    fast = _changes(dev_db, database, start, stop)
    assert used and all(used), "every event of the table is decoded by the generated decoder"
    monkeypatch.setattr(rowcodec.RowDecoder, "images", lambda self, event, pairs, keeps=None: None)
    library = _changes(dev_db, database, start, stop)
    assert len(fast) == len(library) == 5 * len(ROWS)
    for a, b in zip(fast, library):
        assert a[:3] == b[:3]
        for image_a, image_b in zip(a[3:], b[3:]):
            if image_a != image_b:
                assert {k: v for k, v in image_a.items() if v != image_b.get(k)} == \
                    {k: v for k, v in image_b.items() if v != image_a.get(k)}, a[:3]
        for image_a, image_b in zip(a[3:], b[3:]):  # equal and of the same Python types
            if image_a is not None:
                assert {k: type(v) for k, v in image_a.items()} == {k: type(v) for k, v in image_b.items()}


def test_a_table_with_a_type_it_does_not_handle_reads_through_the_library(dev_db, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cols = FAST[:3] + [(i, n, t) for i, (n, t, _) in enumerate(COLUMNS) if t == "TIME(2)"]
    start, stop = _write(dev_db, database, "slow", cols)
    used = []
    images = rowcodec.RowDecoder.images
    monkeypatch.setattr(rowcodec.RowDecoder, "images",
                        lambda self, event, pairs, keeps=None: used.append(1) or images(self, event, pairs, keeps))
    changes = _changes(dev_db, database, start, stop)
    assert used and len(changes) == 5 * len(ROWS)
    negative = [c[4]["tm2"] for c in changes if c[4] is not None and c[4]["tm2"] is not None]
    assert any(t.total_seconds() == -0.01 for t in negative)  # the library's TIME, corrected by _image


@pytest.mark.parametrize("precision,scale,text", [
    (10, 2, "-12345678.91"), (65, 30, "12345678901234567890123456789012345.123456789012345678901234567890"),
    (5, 5, "-0.00001"), (20, 0, "0"), (12, 4, "-0.5000"),
])
def test_decimal_round_trip(dev_db, database, precision, scale, text) -> None:  # type: ignore[no-untyped-def]
    with connect(dev_db.running_port(), database) as w, w.cursor() as cur:
        cur.execute(f"CREATE TABLE d (id INT PRIMARY KEY, v DECIMAL({precision},{scale}))")
        p = params(dev_db)
        conn = source_connect(p)
        start = binlog_head(conn)
        cur.execute(f"INSERT INTO d VALUES (1, {text})")
        stop = binlog_head(conn)
        conn.close()
    (change,) = _changes(dev_db, database, start, stop)
    assert change[4]["v"] == decimal.Decimal(text)


def _flat_rows(dev_db: Any, database: str, table: str, start: Any, stop: Any,
               choice: Any = None) -> list[tuple[Any, ...]]:
    """The binlog source's flat change rows for `table` between the positions (binlog_batches._rows over
    whole row events), as a micro-batch hands them to Spark; `choice`: its source.columns."""
    from binlake.capture.handover import Handover
    from binlake.source.rowtext import RowValues
    from binlake.capture.binlog_batches import _batches, _rows

    conn = source_connect(params(dev_db))
    try:
        schema = load_schema(conn, database, table, None, choice)
    finally:
        conn.close()
    schemas = {schema.name: schema}
    handover = Handover(schemas, {})
    handover.bind(None)
    changes = read_changes(params(dev_db), 5392, start, stop, lambda d, t: f"{d}.{t}" in schemas, whole_events=True)
    values = RowValues()
    batches = _batches(_rows(changes, schemas, handover, None, None, lambda c: False, values), values)
    return [tuple(row.values()) for batch in batches for row in batch.to_pylist()]


def _watch_native(monkeypatch: Any) -> tuple[list[bool], list[bool]]:
    """Per row event from now on: whether it had a native plan (`planned`), and whether that plan
    encoded it (`taken`)."""
    planned: list[bool] = []
    taken: list[bool] = []
    plan, appended = rowtext.Plans.plan, RowEvent.native_values

    def planning(self: Any, *args: Any) -> Any:
        found = plan(self, *args)
        planned.append(found is not None)
        return found

    def taking(self: Any, plan: Any, values: Any) -> Any:
        out = appended(self, plan, values)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(rowtext.Plans, "plan", planning)
    monkeypatch.setattr(RowEvent, "native_values", taking)
    return planned, taken


def test_the_native_encoding_gives_the_python_path_s_rows(dev_db, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # every type the native encoding takes (all but TIME), latin1, utf8mb3 and gbk text, a point, a
    # vector on MySQL, text JSON must escape, inserts, updates with and without a key change, deletes,
    # in multi-row events
    cols = [(i, n, t) for i, (n, t, _) in enumerate(COLUMNS) if not t.startswith("TIME") or t.startswith("TIMESTAMP")]
    start, stop = _write(dev_db, database, "native", cols)
    vector = ", vec VECTOR(2)" if dev_db.server == "mysql" else ""
    with connect(dev_db.running_port(), database, sql_mode="") as w, w.cursor() as cur:
        cur.execute("CREATE TABLE esc (id INT, v VARCHAR(60), l VARCHAR(20) CHARACTER SET latin1, "
                    "g VARCHAR(10) CHARACTER SET gbk, pt POINT, "
                    f"k DATE NOT NULL, PRIMARY KEY (id, k){vector})")  # a key DATE keeps a zero date's text
        vec = ", STRING_TO_VECTOR('[1.5, -2]')" if vector else ""
        cur.execute("INSERT INTO esc VALUES (1, '\"q\" \\\\ b \\0 \x01\x1f \x7f \u2028 é😀', 'Ø\x81é', '中文', "
                    f"ST_GeomFromText('POINT(1 2)'), '0000-00-00'{vec}), "
                    f"(2, '', '', '', NULL, '2020-00-15'{vec}), (3, NULL, NULL, NULL, NULL, '2024-02-29'{vec})")
        cur.execute("UPDATE esc SET id = id + 10, v = CONCAT(v, '\\t')")
        stop = binlog_head(source_connect(params(dev_db)))
    planned, taken = _watch_native(monkeypatch)
    native = _flat_rows(dev_db, database, "native", start, stop) + _flat_rows(dev_db, database, "esc", start, stop)
    assert planned and all(planned), "every event of both tables has a native plan"
    assert len(taken) == len(planned) and all(taken), "and every one is encoded natively"
    monkeypatch.setattr(rowtext, "_rowtext", None)
    python = _flat_rows(dev_db, database, "native", start, stop) + _flat_rows(dev_db, database, "esc", start, stop)
    assert len(native) == len(python) == 5 * len(ROWS) + len(ROWS) + 3 + 6
    assert native == python


# a column of every width the decoders step over: TIME (which neither reads), BIT, JSON, DECIMAL, the
# fractions of DATETIME and TIMESTAMP, length-prefixed text and blobs, ENUM, SET, YEAR, FLOAT
LEFT_OUT = ("tm0", "tm2", "tm3", "tm6", "b1", "b12", "b64", "j", "d65", "dt3", "ts3", "ts6", "vc", "bl", "e", "st", "y", "f")


def test_columns_left_out_are_stepped_over_by_both_encodings(dev_db, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """source.columns: the native plan and the generated Python decoder step over the columns left out
    (the generated decoder takes the event even with TIME, BIT and JSON in it, which it would leave to
    the library if it read them), and both give the rows of every column less those."""
    from binlake.columns import ColumnChoice

    start, stop = _write(dev_db, database, "wide", [(i, n, t) for i, (n, t, _) in enumerate(COLUMNS)])
    choice = ColumnChoice("exclude", LEFT_OUT)
    full = _flat_rows(dev_db, database, "wide", start, stop)
    planned, taken = _watch_native(monkeypatch)
    native = _flat_rows(dev_db, database, "wide", start, stop, choice)
    assert planned and all(planned), "every event has a native plan, TIME left out"
    assert len(taken) == len(planned) and all(taken), "and every one is encoded natively"
    decoded: list[bool] = []
    images = rowcodec.RowDecoder.images

    def decoding(self: Any, event: Any, pairs: bool, keeps: Any = None) -> Any:
        out = images(self, event, pairs, keeps)
        decoded.append(keeps is not None and out is not None)
        return out

    monkeypatch.setattr(rowcodec.RowDecoder, "images", decoding)
    monkeypatch.setattr(rowtext, "_rowtext", None)
    python = _flat_rows(dev_db, database, "wide", start, stop, choice)
    assert decoded and all(decoded), "every event is decoded by the generated decoder, skipping the columns"
    conn = source_connect(params(dev_db))
    try:
        kept = [i for i, n in enumerate(load_schema(conn, database, "wide").names) if n not in LEFT_OUT]
    finally:
        conn.close()
    expected = [(*r[:-1], [r[-1][i] for i in kept]) for r in full]  # the row's values (_vals) less those
    assert len(native) == len(python) == len(full) == 6 * len(ROWS)  # a key change is two rows
    assert native == python == expected
