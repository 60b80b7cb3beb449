"""Shared fixtures. The integration tests start one private MariaDB for the whole session."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# BINLAKE_TEST_DATADIR gives one test session its own server (sessions sharing one stop it under each other)
TEST_DATADIR = Path(os.environ.get("BINLAKE_TEST_DATADIR") or ROOT / ".binlake" / "test-mariadb")


@pytest.fixture(scope="session")
def dev_db() -> Iterator["object"]:
    from binlake.devdb import DevDb

    db = DevDb(datadir=TEST_DATADIR, server_id=1)
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
