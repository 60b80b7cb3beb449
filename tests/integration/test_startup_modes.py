"""Startup modes (stream.startup-mode): initial is every other test; here snapshot, latest,
earliest, specific and timestamp against the real server, each into its own target, and the errors
for bad values."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from binlake.config import load
from binlake.errors import ConfigError
from binlake.capture.run import run
from binlake.source.connection import connect
from binlake.source.dialect import Dialect, binlog_head
from binlake.lake.checkpoint import committed_offset
from binlake.capture.startup import contains, parse_position, resolve, validate
from binlake.lake.target import Target

from .helpers import params
from .test_purged import purge_up_to_now
from .workload import create_table, silver_rows, source_rows, write_config


def test_each_startup_mode(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with dev_db.connect(database) as conn:
        purge_up_to_now(conn)  # so earliest reads this test's binlog, not the whole session's
    create_table(port, database, 100)
    name = f"{database}.t"

    def config(mode: str, *extra: str):  # type: ignore[no-untyped-def]
        path = write_config(tmp_path / f"{mode}.yml", port, database, tmp_path / mode, chunk_size=50, group_size=4)
        return load(path, [f"stream.startup-mode={mode}", *extra])

    def ids(cfg) -> list[int]:  # type: ignore[no-untyped-def]
        return [r[0] for r in silver_rows(spark, Target.of(cfg).silver(name).location)]

    snap = config("snapshot")
    run(snap)  # no --until-caught-up needed: it stops after the snapshot
    assert silver_rows(spark, Target.of(snap).silver(name).location) == source_rows(port, database)
    assert committed_offset(Target.of(snap).checkpoint) is None and not Target.of(snap).stream_start.exists()

    latest = config("latest")
    run(latest, until_caught_up=True)  # pins its start: the head now
    assert ids(latest) == []
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 'A' WHERE id <= 10")
        after_a = binlog_head(conn)
    time.sleep(1.5)
    since = int(time.time())
    time.sleep(1.1)
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 'B' WHERE id BETWEEN 11 AND 20")
        cur.execute("DELETE FROM t WHERE id > 95")

    run(latest, until_caught_up=True)
    assert ids(latest) == list(range(1, 21))  # A and B: both after its start

    specific = config("specific", f"stream.startup-position={after_a}")
    run(specific, until_caught_up=True)
    assert ids(specific) == list(range(11, 21))  # B only
    b_rows = [r for r in source_rows(port, database) if 11 <= r[0] <= 20]
    assert silver_rows(spark, Target.of(specific).silver(name).location) == b_rows

    stamp = config("timestamp", f"stream.startup-timestamp={since}")
    run(stamp, until_caught_up=True)
    assert silver_rows(spark, Target.of(stamp).silver(name).location) == b_rows

    earliest = config("earliest")
    run(earliest, until_caught_up=True)  # every change since the table's creation, from the binlog
    assert silver_rows(spark, Target.of(earliest).silver(name).location) == source_rows(port, database)


def test_specific_gtid_position_starts_after_it_in_every_named_domain(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two GTID domains interleave; the position names the last transaction had in each. The stream
    starts at domain 0's first later transaction and skips domain 1's transactions up to the one
    named, though they lie after that start."""
    if dev_db.server != "mariadb":
        pytest.skip("GTID domains are MariaDB's; MySQL's GTID set is the next test")
    port = dev_db.running_port()
    with dev_db.connect(database) as conn:
        purge_up_to_now(conn)
    create_table(port, database, 30)
    had: dict[int, str] = {}

    def update(cur, domain: int, row: int, v: str) -> str:  # type: ignore[no-untyped-def]
        cur.execute(f"SET SESSION gtid_domain_id = {domain}")
        cur.execute(f"UPDATE t SET v = '{v}' WHERE id = {row}")
        cur.execute("SELECT @@last_gtid")
        return str(cur.fetchone()[0])

    with dev_db.connect(database) as conn, conn.cursor() as cur:
        had[0] = update(cur, 0, 1, "had 0")
        new = update(cur, 0, 2, "new 0")
        update(cur, 1, 3, "had 1")
        had[1] = update(cur, 1, 4, "had 1 too")
        update(cur, 1, 5, "new 1")
        update(cur, 0, 6, "new 0 again")
        cur.execute(f"SHOW BINLOG EVENTS IN '{binlog_head(conn).file}'")
        new_at = [int(r[1]) for r in cur.fetchall() if r[2] == "Gtid" and r[5].endswith(new)]
    assert [g.split("-")[0] for g in (had[0], had[1], new)] == ["0", "1", "0"]

    path = write_config(tmp_path / "gtid.yml", port, database, tmp_path / "gtid", chunk_size=50, group_size=4)
    cfg = load(path, ["stream.startup-mode=specific", f"stream.startup-position={had[0]},{had[1]}"])
    run(cfg, until_caught_up=True)
    rows = silver_rows(spark, Target.of(cfg).silver(f"{database}.t").location)
    assert [r[0] for r in rows] == [2, 5, 6]
    assert rows == [r for r in source_rows(port, database) if r[0] in (2, 5, 6)]
    start = json.loads(Target.of(cfg).stream_start.read_text())
    assert start["position"]["pos"] == new_at[0] and start["applied"] == {"0": int(had[0].split("-")[2]),
                                                                          "1": int(had[1].split("-")[2])}


def test_specific_mysql_gtid_set_streams_what_the_set_lacks_and_resumes(dev_db, database, spark,  # type: ignore[no-untyped-def]
                                                                        tmp_path: Path) -> None:
    """The set holds every transaction up to one update, and one later update: the stream starts at
    the newest binlog file whose earlier transactions are all in the set, skips the later one the set
    holds, and a restart goes on from its checkpoint with the same set."""
    if dev_db.server != "mysql":
        pytest.skip("GTID sets are MySQL's; MariaDB's GTID position is the test before")
    port = dev_db.running_port()
    with dev_db.connect(database) as conn:
        purge_up_to_now(conn)
    create_table(port, database, 30)

    def update(cur, row: int, v: str) -> str:  # type: ignore[no-untyped-def]
        cur.execute(f"UPDATE t SET v = '{v}' WHERE id = {row}")
        cur.execute("SELECT @@global.gtid_executed")
        return str(cur.fetchone()[0]).replace("\n", "")

    with dev_db.connect(database) as conn, conn.cursor() as cur:
        had = update(cur, 1, "had")
        cur.execute("FLUSH BINARY LOGS")  # the next file's Previous_gtids is `had`
        update(cur, 2, "new")
        later = update(cur, 3, "had later")
        update(cur, 4, "new too")
    uuid, _, last = later.rpartition("-")  # `had` ends at n, `later` at n + 2: the set is 1-n and n + 2
    gtid_set = f"{had},{uuid.split(':')[0]}:{last}"
    path = write_config(tmp_path / "gtid.yml", port, database, tmp_path / "gtid", chunk_size=50, group_size=4)
    cfg = load(path, ["stream.startup-mode=specific", f"stream.startup-position={gtid_set}"])
    run(cfg, until_caught_up=True)
    location = Target.of(cfg).silver(f"{database}.t").location
    assert [r[0] for r in silver_rows(spark, location)] == [2, 4]
    start = json.loads(Target.of(cfg).stream_start.read_text())
    assert start["position"]["pos"] == 4 and start["applied"] == parse_position(gtid_set)
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        update(cur, 5, "after the restart")
    run(cfg, until_caught_up=True)
    rows = silver_rows(spark, location)
    assert [r[0] for r in rows] == [2, 4, 5]
    assert rows == [r for r in source_rows(port, database) if r[0] in (2, 4, 5)]


def test_startup_settings_refused_with_the_fix(dev_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=r"stream.startup-mode is 'newest'.*'latest'"):
        load(None, ["stream.startup-mode=newest"])
    with pytest.raises(ConfigError, match=r"stream.startup-position is not set.*set stream.startup-position"):
        validate(load(None, ["stream.startup-mode=specific"]))
    with pytest.raises(ConfigError, match=r"stream.startup-timestamp is not set"):
        validate(load(None, ["stream.startup-mode=timestamp"]))
    with pytest.raises(ConfigError, match=r"stream.startup-position is 'mysql-bin.000001'.*file:position"):
        parse_position("mysql-bin.000001")
    assert parse_position("0-1-42, 3-7-9") == {"0": 42, "3": 9}
    with pytest.raises(ConfigError, match=r"names GTID domain 0 twice"):
        parse_position("0-1-42,0-2-50")
    assert contains({"0": 42}, "0-9-42") and not contains({"0": 42}, "0-1-43") and not contains({"0": 42}, "1-1-5")
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert parse_position(f"{uuid.upper()}:1-5:7:6, {uuid}:tag:3") == {uuid: [[1, 7]], f"{uuid}:tag": [[3, 3]]}
    assert contains({uuid: [[1, 7]]}, f"{uuid}:7") and not contains({uuid: [[1, 7]]}, f"{uuid}:8")
    assert contains({f"{uuid}:tag": [[3, 3]]}, f"{uuid}:tag:3") and not contains({uuid: [[1, 7]]}, f"{uuid}:tag:3")
    cfg = load(None, ["stream.startup-mode=specific", f"stream.startup-position={uuid}:1-5"])
    with pytest.raises(ConfigError, match=r"is a MySQL GTID set but the source is MariaDB"):
        resolve(cfg, connect(params(dev_db)), Dialect("mariadb", (10, 11, 0)), tmp_path / "start-mariadb.json")
    cfg = load(None, ["stream.startup-mode=specific", "stream.startup-position=0-1-999999999"])
    with pytest.raises(ConfigError, match=r"is a MariaDB GTID position but the source is MySQL"):
        resolve(cfg, connect(params(dev_db)), Dialect("mysql", (9, 7, 0)), tmp_path / "start-mysql.json")
    conn = connect(params(dev_db))
    head, dialect = binlog_head(conn), Dialect.of(conn)
    conn.close()
    cfg_path = write_config(tmp_path / "b.yml", dev_db.running_port(), "nodb", tmp_path / "lake", 50, 4)
    cfg = load(cfg_path, ["stream.startup-mode=specific", "stream.startup-position=mysql-bin.000000:4"])
    with pytest.raises(ConfigError, match=rf"mysql-bin.000000, which the server does not have .*{head.file}"):
        resolve(cfg, connect(params(dev_db)), dialect, tmp_path / "start.json")
