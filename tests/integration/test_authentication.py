"""caching_sha2_password, the only authentication plugin MySQL 9 has, in each of its paths:

- full authentication (the server's cache of the account is empty: after FLUSH PRIVILEGES) over a
  plain connection, where the password travels RSA-encrypted with the server's public key (PyMySQL
  needs `cryptography` for it), and over TLS, where it travels in the encrypted channel;
- the fast path, a scramble against the cached entry, once an authentication has filled the cache.

The path each connection took is read from what PyMySQL sent after its first answer (a spy on its
own round trip; the server is real). A wrong password ends in one line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from binlake.commands.devdb import DevDb
from binlake.errors import RuntimeFailure
from binlake.source.binlog_reader import read_changes
from binlake.source.connection import connect, encryption
from binlake.source.dialect import binlog_head

USER, PASSWORD = "sha2_reader", "Sha2-r3ader-pw"


@pytest.fixture(scope="module")
def account(dev_db: DevDb) -> Iterator[DevDb]:
    if dev_db.server != "mysql":
        pytest.skip("MariaDB has no caching_sha2_password (its accounts use mysql_native_password or ed25519)")
    with dev_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED WITH caching_sha2_password BY '{PASSWORD}'")
        cur.execute(f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{USER}'@'%'")
    yield dev_db
    with dev_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP USER '{USER}'@'%'")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What PyMySQL sends in caching_sha2_password's extra round trips (the real ones run)."""
    import pymysql._auth as auth

    seen: list[bytes] = []
    real = auth._roundtrip

    def spy(conn: Any, data: bytes) -> Any:
        seen.append(data)
        return real(conn, data)

    monkeypatch.setattr(auth, "_roundtrip", spy)
    return seen


def _params(db: DevDb, mode: str, password: str = PASSWORD) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": db.running_port(), "user": USER, "password": password,
            "connect_timeout": 5, "read_timeout": 20, "tls": {"mode": mode}}


def _path(db: DevDb, mode: str, sent: list[bytes]) -> str:
    sent.clear()
    conn = connect(_params(db, mode))
    try:
        encrypted = encryption(conn) is not None
    finally:
        conn.close()
    assert encrypted == (mode != "disabled")
    if b"\x02" in sent:  # the server's public key requested: full authentication, RSA
        return "full-rsa"
    if PASSWORD.encode() + b"\0" in sent:
        return "full-tls"
    assert not sent, sent
    return "fast"


def _forget(db: DevDb) -> None:
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("FLUSH PRIVILEGES")  # empties caching_sha2_password's cache


def test_full_and_fast_paths_with_and_without_tls(account: DevDb, sent: list[bytes]) -> None:
    _forget(account)
    assert _path(account, "disabled", sent) == "full-rsa"
    assert _path(account, "disabled", sent) == "fast"
    _forget(account)
    assert _path(account, "required", sent) == "full-tls"
    assert _path(account, "required", sent) == "fast"


def test_a_binlog_read_authenticates_by_rsa_over_a_plain_connection(account: DevDb, sent: list[bytes]) -> None:
    with account.connect() as conn, conn.cursor() as cur:
        start = binlog_head(conn)
        cur.execute("CREATE DATABASE IF NOT EXISTS sha2")
        cur.execute("CREATE TABLE IF NOT EXISTS sha2.t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO sha2.t VALUES (1)")
        stop = binlog_head(conn)
    _forget(account)
    sent.clear()
    got = list(read_changes(_params(account, "disabled"), 7301, start, stop, lambda d, t: d == "sha2"))
    assert [c.op for c in got] == ["c"] and b"\x02" in sent


def test_a_wrong_password_is_one_line(account: DevDb) -> None:
    with pytest.raises(RuntimeFailure) as failed:
        connect(_params(account, "preferred", password="not-the-password"))
    line = str(failed.value)
    assert "\n" not in line and "1045" in line and "source.password" in line and "not-the-password" not in line
