"""Shared fixtures. The integration tests start one private MariaDB and one private MySQL 9.7 for the
whole session, and every test that takes `dev_db` runs against each (`BINLAKE_TEST_SERVERS` narrows
the list, for example `mysql`).

Which tests run on which server: every test but the slow ones on both servers. The slow ones (marker
`slow`: the kill-and-restart chains and volume runs, each over about 40 s) take turns over a
ROTATION-day cycle: each runs every seventh day, alternately on MariaDB and on MySQL, and each day runs
one seventh of them on one server, dealt by their measured seconds (SLOW_SECONDS) so the days weigh
about the same. The random-kill chain (marker `long`) runs every day, on the other server
(`DAY_SERVER`), and so do the chains whose work does not differ between the servers beyond what the
fast tests cover (marker `one_server`: the loop against Spark's replay, the signalled snapshots, the
lake's upkeep, the idle stream, the pipeline's dry run, the progress lines); DAY_SERVER changes each
week, so each of those runs a week on one server, then a week on the other.
With every slow test on one server each day, `make test` took 40 minutes on MariaDB days and 50 on
MySQL days, past its 30, and in turns of five days 32 to 35 once the suite had grown; with the
`one_server` chains on both servers every day it took 34.5 (day 337), and 29.5 without. The fast
ones still cover what differs between the servers every day: their statements, chunk reads, binlog
decoding and collations.
BINLAKE_TEST_SLOW_SERVERS runs every slow and `one_server` test on the servers it names instead
(`make test-mysql` sets `mysql`; `mariadb,mysql` runs all of them on both); BINLAKE_TEST_DAY replays
another day's choice (a day of the year).

`make test` runs the suite in two pytest-xdist processes (`--dist worksteal`: each starts with half of
the tests, and one that runs out takes tests from the other's queue, so neither idles while the other
holds a block of slow ones); each process starts servers of its own (under `.binlake/gw0`, `.binlake/gw1`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# BINLAKE_TEST_DATADIR gives one test session its own servers (sessions sharing one stop it under each
# other); each pytest-xdist worker (`make test` runs two) has servers of its own under it
TEST_DATADIR = Path(os.environ.get("BINLAKE_TEST_DATADIR") or ROOT / ".binlake") / os.environ.get(
    "PYTEST_XDIST_WORKER", "")
SERVERS = [s for s in os.environ.get("BINLAKE_TEST_SERVERS", "mariadb,mysql").split(",") if s]
KNOWN_SERVERS = ("mariadb", "mysql")
DAY = int(os.environ.get("BINLAKE_TEST_DAY") or dt.date.today().timetuple().tm_yday)
# the servers named to run every slow test (see the module docstring); none: the rotation decides
NAMED_SLOW_SERVERS = {s for s in os.environ.get("BINLAKE_TEST_SLOW_SERVERS", "").split(",") if s}
ROTATION = 14
# each day the rotation's slow tests run on one server (see slow_runs_today): the daily long tests run
# on the other, so that no day has both of MySQL's longer halves
DAY_SERVER = "mysql" if -DAY % ROTATION < ROTATION // 2 else "mariadb"
SLOW_SERVERS = NAMED_SLOW_SERVERS or {DAY_SERVER}
# seconds each slow test took on MariaDB (node id without the server; MySQL's take about 1.7 times as
# long), to spread them over the rotation's days: scripts/slow_seconds.py writes it from a junit report
SLOW_SECONDS = Path(__file__).with_name("slow_seconds.json")


def slow_runs_today(name: str, server: str, turns: dict[str, int]) -> bool:
    """Whether the slow test `name` (its node id without the server) runs on `server` today."""
    if NAMED_SLOW_SERVERS:
        return server in NAMED_SLOW_SERVERS
    turn = (DAY + turns[name]) % ROTATION
    return turn == (0 if server == "mariadb" else ROTATION // 2)


def slow_turns(names: set[str]) -> dict[str, int]:
    """Each slow test's place in the rotation, dealt so the days carry about the same seconds: the
    longest first, each to the place with the fewest seconds so far (by SLOW_SECONDS, a test not in it
    counted as a minute)."""
    measured = json.loads(SLOW_SECONDS.read_text())
    seconds = {name: float(measured.get(name, 60)) for name in names}
    load = [0.0] * (ROTATION // 2)
    turns: dict[str, int] = {}
    for name in sorted(names, key=lambda name: (-seconds[name], name)):
        turns[name] = min(range(len(load)), key=lambda i: load[i])
        load[turns[name]] += seconds[name]
    return turns


def _server(item: pytest.Item) -> str | None:
    """The server a test item runs against: its `dev_db` parameter, or that of its own fixture
    parametrised over SERVERS (the tests that start private servers)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return next((v for v in params.values() if isinstance(v, str) and v in KNOWN_SERVERS), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # each slow item with its server and its name without it (the key of SLOW_SECONDS)
    slow_items = [(item, server, item.nodeid.replace(server, "")) for item in items
                  if item.get_closest_marker("slow") and (server := _server(item)) is not None]
    turns = slow_turns({name for _, _, name in slow_items}) if not NAMED_SLOW_SERVERS else {}
    for item in items:  # a `one_server` test: on the day's server (or those named) alone
        if item.get_closest_marker("one_server") and (server := _server(item)) is not None \
                and server not in SLOW_SERVERS:
            item.add_marker(pytest.mark.skip(reason=f"one server a day: on {DAY_SERVER} today (day {DAY}), "
                                                    f"runs when BINLAKE_TEST_SLOW_SERVERS includes {server}"))
    for item, server, name in slow_items:
        if not slow_runs_today(name, server, turns):
            item.add_marker(pytest.mark.skip(reason=f"slow on {server}: not its turn today (day {DAY}), runs when "
                                                    f"BINLAKE_TEST_SLOW_SERVERS includes {server} (make test-{server})"))
    # the modules with slow (or `long`, or `one_server`) tests to run first and the unit tests last, so
    # that the two pytest-xdist workers, each handed the next test as it frees up, end on short tests
    # together rather than one of them alone on a long one (module order is kept otherwise, and each module's own)
    slow = {item.module.__name__ for item in items
            if item.get_closest_marker("long") or item.get_closest_marker("one_server")
            or (item.get_closest_marker("slow") and not item.get_closest_marker("skip"))}
    items.sort(key=lambda item: 0 if item.module.__name__ in slow else 1 if "integration" in item.nodeid else 2)


@pytest.fixture(scope="session", params=SERVERS)
def dev_db(request: pytest.FixtureRequest) -> Iterator["object"]:
    from binlake.commands.devdb import DevDb

    db = DevDb(datadir=TEST_DATADIR / f"test-{request.param}", server_id=1, server=request.param)
    db.start()
    yield db
    if not os.environ.get("BINLAKE_KEEP_TEST_DB"):
        db.stop()


@pytest.fixture
def database(dev_db) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A fresh database for one test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    with dev_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    yield name
    with dev_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from binlake.spark.session import get_spark

    session = get_spark(parallelism=2, app_name="binlake-tests")
    yield session
    session.stop()

@pytest.fixture(autouse=True)
def _no_run_group_left() -> Iterator[None]:
    """`binlake.cli.main` called in a test's own process records that process's group in
    BINLAKE_RUN_PGID, the group a crash point kills (binlake.faults); left in the environment, a later
    test's child with a crash point inherits it and kills this test session, CI's whole run with it."""
    os.environ.pop("BINLAKE_RUN_PGID", None)
    yield
    os.environ.pop("BINLAKE_RUN_PGID", None)
