"""Which errors count as a lost connection, and the backoff that ends in a one-line failure."""

from __future__ import annotations

import pymysql
import pytest

from binlake.errors import RuntimeFailure
from binlake.source.reconnect import Backoff, is_connection_lost, retrying

PARAMS = {"host": "db.example", "port": 3306, "user": "cdc", "password": "s3cret"}


def test_lost_connection_codes() -> None:
    assert is_connection_lost(pymysql.err.OperationalError(2013, "Lost connection to server during query"))
    assert is_connection_lost(pymysql.err.OperationalError(2003, "Can't connect"))
    assert is_connection_lost(ConnectionResetError())
    assert not is_connection_lost(pymysql.err.OperationalError(1045, "Access denied"))
    assert not is_connection_lost(pymysql.err.OperationalError(1236, "Could not find first log file"))
    assert not is_connection_lost(ValueError("a bug"))
    # mysqlclient over TLS: a cut mid-read is a TLS error with an EOF; a refused handshake is not lost
    assert is_connection_lost(pymysql.err.OperationalError(2026, "TLS/SSL error: unexpected eof while reading"))
    assert not is_connection_lost(pymysql.err.OperationalError(2026, "SSL connection error: SSL is required"))


def test_retrying_rides_out_an_outage() -> None:
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise pymysql.err.OperationalError(2003, "Can't connect")
        return "head"

    assert retrying(PARAMS, 30, "asking for the head", flaky) == "head" and calls["n"] == 3


def test_retrying_does_not_hide_other_errors() -> None:
    def denied() -> None:
        raise pymysql.err.OperationalError(1045, "Access denied")

    with pytest.raises(pymysql.err.OperationalError):
        retrying(PARAMS, 30, "asking for the head", denied)


def test_past_the_timeout_one_line_naming_the_setting() -> None:
    backoff = Backoff(PARAMS, timeout=0.3, first_pause=0.1)
    lost = pymysql.err.OperationalError(2003, "Can't connect")
    with pytest.raises(RuntimeFailure) as failed:
        for _ in range(20):
            backoff.wait(lost, "reading the binlog")
    message = str(failed.value)
    assert "source.reconnect-timeout=0.3s" in message and "db.example:3306" in message and "2003" in message
    assert "\n" not in message and "s3cret" not in message
