"""Startup modes (stream.startup-mode): initial is every other test; here snapshot, latest,
earliest, specific and timestamp against the real server, each into its own target, and the errors
for bad values."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from binlake.config import load
from binlake.errors import ConfigError
from binlake.pipeline import run
from binlake.source import connect, master_position
from binlake.spark.streaming import committed_offset
from binlake.startup import parse_position, validate
from binlake.target import Target

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
        after_a = master_position(conn)
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


def test_startup_settings_refused_with_the_fix(dev_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=r"stream.startup-mode is 'newest'.*'latest'"):
        load(None, ["stream.startup-mode=newest"])
    with pytest.raises(ConfigError, match=r"stream.startup-position is not set.*set stream.startup-position"):
        validate(load(None, ["stream.startup-mode=specific"]))
    with pytest.raises(ConfigError, match=r"stream.startup-timestamp is not set"):
        validate(load(None, ["stream.startup-mode=timestamp"]))
    with pytest.raises(ConfigError, match=r"stream.startup-position is 'mysql-bin.000001'.*file:position"):
        parse_position("mysql-bin.000001")
    conn = connect(params(dev_db))
    head = master_position(conn)
    conn.close()
    cfg_path = write_config(tmp_path / "b.yml", dev_db.running_port(), "nodb", tmp_path / "lake", 50, 4)
    cfg = load(cfg_path, ["stream.startup-mode=specific", f"stream.startup-position=mysql-bin.000000:4"])
    from binlake.startup import resolve

    with pytest.raises(ConfigError, match=rf"mysql-bin.000000, which the server does not have .*{head.file}"):
        resolve(cfg, connect(params(dev_db)), True, tmp_path / "start.json")
