"""Soft deletes and history (SCD type 2) end to end: writers on hot keys (updates, deletes, inserts
of deleted keys again) while `binlake run` snapshots and streams, a kill -9 once the stream has
landed a batch, a resume; then silver against two truths that binlake does not compute:
- the source: silver's live rows (current versions, not deleted) equal its rows (and `verify` agrees);
- the binlog, replayed by mysql-replication from before the table's first row: for every key, the
  versions silver holds are exactly the versions its changes make, in order, from the one the
  snapshot read on (the snapshot reads each key once, at its chunk's high watermark, so history
  starts there), each ending where the next change begins; a deleted key's tombstone has the delete's
  before image and time.

Every writer's value is unique, so each version is told by its image alone. All three cases take
turns with the slow tests. The checks take a row filter too (`keeps`): tests/integration/
test_row_filter.py compares filtered silver with the same binlog truth.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlake.cli import main
from binlake.config import load
from binlake.lake.silver_shape import Shape
from binlake.lake.target import Target
from binlake.source.dialect import binlog_head

from .helpers import seq
from .workload import RandomStatements, killed_under_writers, run_cli

ROWS, KEYS = 200, 260  # keys above ROWS start absent: their inserts come from the writers
Image = tuple[Any, ...]  # the row's values in `COLUMNS` (or the columns a test names)
COLUMNS = ("v", "n")


@dataclass(frozen=True)
class Event:
    op: str  # c, u, d
    image: Image  # the row after (c, u) or before (d)
    ts: int  # the event's time, Unix seconds


class HotWriters(RandomStatements):
    """Two threads changing keys 1..KEYS at random, each statement its own transaction, every value
    written unique (`v`) so that each version of a row is told by its image."""

    keys = KEYS

    def statement(self, cur: Any, token: str, key: int, op: float) -> None:
        if op < 0.5:
            cur.execute("UPDATE t SET v = %s, n = n + 1 WHERE id = %s", (token, key))
        elif op < 0.75:
            cur.execute("DELETE FROM t WHERE id = %s", (key,))
        else:
            cur.execute("INSERT IGNORE INTO t VALUES (%s, %s, 0)", (key, token))


def everything(image: Image) -> bool:
    return True


def replay(port: int, database: str, start: Any, columns: tuple[str, ...] = COLUMNS) -> dict[int, list[Event]]:
    """Every row change of `database`.t from `start` to the binlog's end, per key, by mysql-replication,
    each row told by its values in `columns`."""
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": port, "user": "root", "password": ""},
        server_id=9141, log_file=start.file, log_pos=start.pos, resume_stream=True, blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], only_schemas=[database], only_tables=["t"],
        is_mariadb=False, enable_logging=False,
    )

    def image(values: dict[str, Any]) -> tuple[int, Image]:
        return int(values["id"]), tuple(v.decode() if isinstance(v, bytes) else v for v in map(values.get, columns))

    out: dict[int, list[Event]] = defaultdict(list)
    try:
        for event in stream:
            if event.schema != database or event.table != "t":
                continue
            for row in event.rows:
                if isinstance(event, WriteRowsEvent):
                    key, img, op = *image(row["values"]), "c"
                elif isinstance(event, UpdateRowsEvent):
                    key, img, op = *image(row["after_values"]), "u"
                else:
                    key, img, op = *image(row["values"]), "d"
                out[key].append(Event(op, img, int(event.timestamp)))
    finally:
        stream.close()
    return out


def _config(path: Path, port: int, database: str, lake: Path, shape: Shape) -> Path:
    path.write_text(
        f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
        f"  tables: ['{database}\\.t']\n  server-id: 5800-5804\n"
        f"target:\n  path: {lake}\n"
        "snapshot:\n  chunk-size: 50\n  group-size: 2\n  parallelism: 2\n"
        "stream:\n  trigger-seconds: 1\n"
        f"silver:\n  deletes: {shape.deletes}\n  history: {shape.history}\n"
    )
    return path


def kept_rows(spark: Any, location: str) -> list[dict[str, Any]]:
    """Every row of silver as a dict, with `__ts` its `_ts` in Unix seconds."""
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(location)
    return [r.asDict() for r in df.withColumn("__ts", F.unix_timestamp("_ts")).collect()]


def starts(event: Event, shape: Shape, keeps: Callable[[Image], bool] = everything) -> bool:
    """Whether a change starts a version: its row (after it; a delete's before it) is one silver
    `keeps` (the row filter's), and it is no hard delete."""
    return keeps(event.image) and (event.op != "d" or shape.soft)


def _versions(events: list[Event], shape: Shape, keeps: Callable[[Image], bool]) -> list[tuple[Image, bool]]:
    """The versions a key's changes make: (image, deleted) per change that `starts` one."""
    return [(e.image, e.op == "d") for e in events if starts(e, shape, keeps)]


def check_history(rows: list[dict[str, Any]], truth: dict[int, list[Event]], live: dict[int, Image],
                  shape: Shape, columns: tuple[str, ...] = COLUMNS, keeps: Callable[[Image], bool] = everything) -> int:
    """Each key's versions in silver against its binlog changes (see the module docstring), under a row
    filter that `keeps` the rows it matches (`live`: the source's rows that match); the count of
    versions checked."""
    by_key: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_key[r["id"]].append(r)
    assert set(by_key) <= set(truth), f"silver has keys the binlog never changed: {sorted(set(by_key) - set(truth))[:5]}"
    checked = 0
    for key, events in truth.items():
        held = sorted(by_key.get(key, []), key=lambda r: r["__START_AT"])
        want = _versions(events, shape, keeps)
        got = [(tuple(r[c] for c in columns), bool(r.get("_deleted"))) for r in held]
        if not got:  # deleted before the snapshot read it, or out of the filter since, and not back
            assert key not in live and (events[-1].op == "d" or not keeps(events[-1].image)), \
                f"id={key}: no version in silver; the binlog has {want}"
            continue
        # history starts at the image the snapshot read (or at the key's first change after it)
        first = want.index(got[0]) if got[0] in want else -1
        assert first >= 0 and got == want[first:], f"id={key}: silver has {got}, the binlog's versions are {want}"
        for r in held:
            assert r["__START_AT"] == r["_seq"], f"id={key}: a version starts at {r['__START_AT']}, its change is {r['_seq']}"
        made = [(e.image, e.op == "d") for e in events]
        for (a, b), version in zip(itertools.pairwise(held), got):
            assert a["__START_AT"] < b["__START_AT"] and a["__END_AT"] is not None, f"id={key}: versions overlap"
            # contiguous, unless a hard delete or a row out of the filter comes next (it ends the version
            # and starts none)
            gap = not starts(events[made.index(version) + 1], shape, keeps)
            assert (a["__START_AT"] < a["__END_AT"] < b["__START_AT"]) if gap else (a["__END_AT"] == b["__START_AT"]), \
                f"id={key}: version ends at {a['__END_AT']}, the next starts at {b['__START_AT']}"
        current = [r for r in held if r["__END_AT"] is None]
        if starts(events[-1], shape, keeps):
            assert len(current) == 1 and current[0] is held[-1], f"id={key}: {len(current)} current versions"
        else:
            assert not current, f"id={key} is deleted at the source or out of the filter, yet has a current version"
        checked += len(held)
    return checked


def check_deletes(rows: list[dict[str, Any]], truth: dict[int, list[Event]], shape: Shape,
                  columns: tuple[str, ...] = COLUMNS, keeps: Callable[[Image], bool] = everything) -> int:
    """A deleted key is there with `_deleted`, the delete's before image and the delete's time; a key
    inserted again is live; under a row filter (`keeps`) a key whose last change is out of it is not
    there at all. The number of tombstones."""
    current = {r["id"]: r for r in rows if not shape.versions or r["__END_AT"] is None}
    tombstones = 0
    for key, events in truth.items():
        last = events[-1]
        r = current.get(key)
        if r is None:  # deleted before the snapshot read it, or out of the filter, and not back since
            assert last.op == "d" or not keeps(last.image), f"id={key}: not in silver; its last change is {last}"
            continue
        image = tuple(r[c] for c in columns)
        assert keeps(last.image) and bool(r["_deleted"]) == (last.op == "d") and image == last.image, \
            f"id={key}: silver has {image} (deleted: {r['_deleted']}), its last change is {last}"
        if last.op == "d":
            tombstones += 1
            assert r["__ts"] == last.ts, f"id={key}: the tombstone's _ts is {r['__ts']}, the delete's {last.ts}"
    return tombstones


SHAPES = {"both": Shape("soft", 2), "soft": Shape("soft", 1), "history": Shape("hard", 2)}


# each case takes about 2 minutes a server: all three take turns in the slow tests' rotation (tests/conftest.py),
# and tests/unit/test_silver_history.py checks every order of arrival and replay every day
@pytest.mark.parametrize("which", [
    pytest.param("both", marks=pytest.mark.slow),
    pytest.param("soft", marks=pytest.mark.slow),
    pytest.param("history", marks=pytest.mark.slow),
])
def test_kept_deletes_and_history_under_writers_and_a_kill(dev_db: Any, database: str, spark: Any, tmp_path: Path,
                                                          which: str, capsys: pytest.CaptureFixture[str]) -> None:
    from binlake.commands.verify import verify

    shape, port = SHAPES[which], dev_db.running_port()
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                         autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL)")
        start = binlog_head(conn)  # before the first row: the replay sees every version of every key
        cur.execute(f"INSERT INTO t SELECT seq, CONCAT('r', seq), 0 FROM {seq(1, ROWS)}")
    cfg_path = _config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", shape)
    cfg = load(cfg_path)
    target, name = Target.of(cfg), f"{database}.t"
    seed = int(os.environ.get("BINLAKE_KILL_SEED") or random.randrange(10**6))
    writers = HotWriters(port, database, seed)
    killed_under_writers(cfg_path, target.stream_progress, tmp_path / "run-1.log", writers, seed)
    resumed = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database) as conn, \
            conn.cursor() as cur:
        cur.execute("SELECT id, v, n FROM t")
        live = {int(i): (v, int(n)) for i, v, n in cur.fetchall()}
    truth = replay(port, database, start)
    rows = kept_rows(spark, target.silver(name).location)
    now = {r["id"]: (r["v"], r["n"]) for r in rows
           if (not shape.versions or r["__END_AT"] is None) and not (shape.soft and r["_deleted"])}
    assert now == live, f"seed {seed}: silver's live rows differ from the source: " \
                        f"{sorted(set(now.items()) ^ set(live.items()))[:6]}"
    report = verify(cfg)
    assert report["ok"], report
    capsys.readouterr()
    assert main(["status", "-c", str(cfg_path), "--json"]) == 0
    [status] = json.loads(capsys.readouterr().out)["tables"]
    assert status["rows"] == len(live) < len(rows), (status, len(live), len(rows))  # live rows, not tombstones
    versions = check_history(rows, truth, live, shape) if shape.versions else 0
    tombstones = check_deletes(rows, truth, shape) if shape.soft else 0
    changes = sum(len(e) for e in truth.values())
    assert writers.done > 200 and tombstones + versions > 0
    print(f"{which} on {dev_db.server}: {writers.done} statements, {changes} row changes over {len(truth)} keys; "
          f"{versions} versions and {tombstones} tombstones as the binlog has them (seed {seed})")


def test_a_shape_changed_while_a_snapshot_was_cut_short_is_refused_in_one_line(
        dev_db: Any, database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run killed after its first group reached silver, then the settings changed: the next run
    refuses before it reads (exit code 2, one line naming both shapes), instead of a MERGE failing on
    the columns of the other shape. The check is the lake's, so one server is enough."""
    if dev_db.server != "mariadb":
        pytest.skip("the check reads the lake alone: MariaDB's run covers it")
    port = dev_db.running_port()
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                         autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL)")
        cur.execute(f"INSERT INTO t SELECT seq, CONCAT('r', seq), 0 FROM {seq(1, 1000)}")
    cfg_path = _config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", Shape())
    crashed = run_cli("run", "-c", str(cfg_path), "--until-caught-up",
                      env={"BINLAKE_CRASH_AT": "after_silver_chunks:1", "BINLAKE_CRASH_COUNTER": str(tmp_path / "n")})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    silver = Target.of(load(cfg_path)).silver(f"{database}.t").location
    for shape in (SHAPES["soft"], SHAPES["history"]):
        _config(cfg_path, port, database, tmp_path / "lake", shape)
        capsys.readouterr()
        assert main(["run", "-c", str(cfg_path), "--until-caught-up"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"binlake: the silver table at {silver} was built with silver.deletes: hard, silver.history: "
                       f"1; the configuration now says {shape.settings()}: set them back, or snapshot the tables "
                       "again into a new target.path"), err
