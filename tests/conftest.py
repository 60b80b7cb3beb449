"""Shared fixtures. The integration tests start one private MariaDB and one private MySQL 9.7 for the
whole session, and every test that takes `dev_db` runs against each (`BINLAKE_TEST_SERVERS` narrows
the list, for example `mysql`).

Which tests run on which server: every test but the slow ones on both servers; the slow ones
(marker `slow`: the kill-and-restart chains and volume runs, each over about 40 s) on one server,
chosen by the day of the year (even: MariaDB, odd: MySQL), so each server has them every other day.
BINLAKE_TEST_SLOW_SERVERS names the servers instead (`make test-mysql` sets `mysql`: the whole
integration suite on MySQL alone; `mariadb,mysql` runs them on both). On a 2-core machine the slow
tests on both servers would take `make test` far past its 30 minutes, while the fast ones still cover
what differs between the servers: their statements, chunk reads, binlog decoding and collations.

`make test` runs the suite in two pytest-xdist processes, each handed the next test as it frees up;
each process starts servers of its own (under `.binlake/gw0`, `.binlake/gw1`).
"""

from __future__ import annotations

import datetime as dt
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
# the servers the slow tests run on (see the module docstring)
SLOW_SERVERS = {s for s in os.environ.get("BINLAKE_TEST_SLOW_SERVERS", "").split(",") if s} or {
    "mariadb" if dt.date.today().timetuple().tm_yday % 2 == 0 else "mysql"}
KNOWN_SERVERS = ("mariadb", "mysql")


def _server(item: pytest.Item) -> str | None:
    """The server a test item runs against: its `dev_db` parameter, or that of its own fixture
    parametrised over SERVERS (the tests that start private servers)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return next((v for v in params.values() if isinstance(v, str) and v in KNOWN_SERVERS), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        server = _server(item)
        if server is not None and server not in SLOW_SERVERS and item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.skip(reason=f"slow on {server}: runs when BINLAKE_TEST_SLOW_SERVERS "
                                                    f"includes {server} (make test-{server})"))
    # the modules with slow (or `long`) tests to run first and the unit tests last, so that the two pytest-xdist
    # workers, each handed the next test as it frees up, end on short tests together rather than one
    # of them alone on a long one (module order is kept otherwise, and each module's own)
    slow = {item.module.__name__ for item in items if item.get_closest_marker("long")
            or (item.get_closest_marker("slow") and not item.get_closest_marker("skip"))}
    items.sort(key=lambda item: 0 if item.module.__name__ in slow else 1 if "integration" in item.nodeid else 2)


@pytest.fixture(scope="session", params=SERVERS)
def dev_db(request: pytest.FixtureRequest) -> Iterator["object"]:
    from binlake.devdb import DevDb

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
