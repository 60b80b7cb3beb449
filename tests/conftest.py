"""Shared fixtures. The integration tests start one private MariaDB and one private MySQL 9.7 for the
whole session, and every test that takes `dev_db` runs against each (`BINLAKE_TEST_SERVERS` narrows
the list, for example `mysql`)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# BINLAKE_TEST_DATADIR gives one test session its own servers (sessions sharing one stop it under each other)
TEST_DATADIR = Path(os.environ.get("BINLAKE_TEST_DATADIR") or ROOT / ".binlake")
SERVERS = [s for s in os.environ.get("BINLAKE_TEST_SERVERS", "mariadb,mysql").split(",") if s]


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
