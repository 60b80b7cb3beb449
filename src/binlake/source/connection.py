"""Connections to the source: every connection binlake opens to the server takes its settings here
(metadata and chunk SELECTs through PyMySQL or mysqlclient, binlog reads through mysql-replication),
TLS included (`binlake.source.tls`); a chunk reader keeps its own across its chunks (`Connections`).

Every connection has a read timeout (`source.read-timeout`): a connection whose peer vanished without
closing it (a half-open TCP connection) fails after that many seconds instead of hanging forever. Its
writes have the same timeout, which also bounds PyMySQL's TLS handshake: PyMySQL starts TLS right
after a write and leaves the socket with the write's timeout, none unless set, so a connection that
stalled there hung for good (met by a stalled network on MySQL, whose connections are TLS by default).
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pymysql

from binlake.errors import RuntimeFailure
from binlake.source import tls
from binlake.source.tls import Tls

DEFAULT_READ_TIMEOUT = 60
# every session in UTC (see `connect`), and without NO_ZERO_DATE / NO_ZERO_IN_DATE: MySQL refuses a
# comparison with a zero date under them (error 1525), and a chunk bound may be one ('2020-00-15')
SESSION = ("SET time_zone = '+00:00', sql_mode = TRIM(BOTH ',' FROM REPLACE(REPLACE(REPLACE(@@sql_mode, "
           "'NO_ZERO_IN_DATE', ''), 'NO_ZERO_DATE', ''), ',,', ','))")


def _basics(params: dict[str, Any]) -> dict[str, Any]:
    return {
        "host": params["host"], "port": int(params["port"]), "user": params["user"], "password": params["password"],
        "connect_timeout": int(params.get("connect_timeout", 10)),
        "read_timeout": int(params.get("read_timeout") or DEFAULT_READ_TIMEOUT),
        "write_timeout": int(params.get("read_timeout") or DEFAULT_READ_TIMEOUT),
    }


def settings(params: dict[str, Any]) -> dict[str, Any]:
    """PyMySQL's connection arguments from binlake's connection parameters (`Config.connection`);
    mysql-replication takes the same."""
    return {**_basics(params), **Tls.of(params).pymysql_args(params["host"], int(params["port"]))}


def connect(params: dict[str, Any], **kw: Any) -> pymysql.connections.Connection:
    """A PyMySQL connection in UTC, autocommit, utf8mb4, knowing the epoch of its server (`epoch_of`).

    The session time zone is UTC so TIMESTAMP columns come back as UTC wall time, the same instant
    the binlog carries as a Unix time.
    """
    try:
        conn = pymysql.connect(**settings(params), autocommit=True, charset="utf8mb4",
                               init_command=SESSION, **kw)
    except pymysql.err.MySQLError as exc:
        raise cannot_connect(params, exc) from None
    tls.learn(params["host"], int(params["port"]), conn)
    # which server's history the positions read through this connection belong to (binlake.offsets)
    conn.binlake_epoch = int(params.get("epoch") or 0)
    return conn


def epoch_of(conn: Any) -> int:
    """The epoch of the positions read through `conn` (0 for one opened elsewhere)."""
    return int(getattr(conn, "binlake_epoch", 0))


def encryption(conn: Any) -> str | None:
    """The connection's TLS version and cipher ("TLSv1.3 TLS_AES_256_GCM_SHA384"), or None: not encrypted."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        found = {name: value for name, value in cur.fetchall()}
    return f"{found.get('Ssl_version')} {found['Ssl_cipher']}" if found.get("Ssl_cipher") else None


def timed_out(exc: BaseException) -> bool:
    """A read that got nothing within its timeout: a stalled or half-open connection."""
    return isinstance(exc, (socket.timeout, TimeoutError)) or "timed out" in " ".join(map(str, exc.args))


def cannot_connect(params: dict[str, Any], exc: Exception) -> RuntimeFailure:
    """One line naming the settings to check; the server's message (which may quote input) stays out."""
    code = exc.args[0] if exc.args else "?"
    who = f"{params['user']}@{params['host']}:{params['port']}"
    refused = tls_refusal(params, exc)
    if refused:
        return RuntimeFailure(f"cannot connect to {who}: {refused}")
    if code == 1045:
        return RuntimeFailure(
            f"cannot connect to {who}: the server refused the user name or password (MySQL error 1045); check "
            "source.username and source.password (and, for an account that requires a client certificate, "
            "source.tls.cert and source.tls.key)"
        )
    if timed_out(exc):  # a server, or a network path, that answers nothing
        return RuntimeFailure(
            f"cannot connect to {who} (MySQL error {code}: no answer "
            f"within source.connect-timeout={params.get('connect_timeout', 10)}s / source.read-timeout="
            f"{params.get('read_timeout') or DEFAULT_READ_TIMEOUT}s); check that the server is up and the "
            "network path to it passes data, or raise those timeouts"
        )
    return RuntimeFailure(
        f"cannot connect to {who} (MySQL error {code}); "
        "check source.hostname, source.port, source.username and source.password"
    )


def tls_refusal(params: dict[str, Any], exc: BaseException) -> str | None:
    """Why TLS kept a connection from opening, naming the setting to change; None: not TLS."""
    t = Tls.of(params)
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    text = " ".join(map(str, exc.args))
    if code == 3159 or "insecure transport" in text:
        return (f"the server accepts only encrypted connections (MySQL error 3159) and source.tls.mode is "
                f"{t.mode}: set source.tls.mode to required, verify-ca or verify-identity")
    if code == 1045 and t.mode == "disabled":  # MariaDB refuses a plain login to a TLS-only server this way
        return ("the server refused the login over a plain connection (MySQL error 1045): either the server "
                "accepts only encrypted connections or the password is wrong; set source.tls.mode to required "
                "or stricter, or check source.username and source.password")
    if "mismatch" in text and ("hostname" in text.lower() or "IP address" in text):
        return (f"the server's certificate does not name {params['host']} (source.tls.mode=verify-identity); "
                "connect by a name the certificate holds (source.hostname), or set source.tls.mode=verify-ca")
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        signer = "the CA in source.tls.ca" if t.ca else "a CA this machine trusts (no source.tls.ca set)"
        return (f"the server's certificate is not signed by {signer} (source.tls.mode={t.mode}); set "
                "source.tls.ca to the CA that signed the server's certificate")
    if "doesn't support" in text and "SSL" in text or code == 2026:
        return (f"source.tls.mode is {t.mode} but the server offers no TLS (MySQL error {code or 2026}); "
                "enable TLS on the server, or set source.tls.mode=preferred")
    return None


def bulk_connect(params: dict[str, Any]) -> Any:
    """A connection for reading many rows: the C client when it is installed (mysqlclient, several
    times faster than PyMySQL at decoding rows), else PyMySQL. Both return the same Python values;
    `schema.Column.encode` makes any difference in form irrelevant. Autocommit, UTC, utf8mb4."""
    try:
        import MySQLdb
    except ImportError:
        return connect(params)
    args = Tls.of(params).mysqlclient_args(params["host"], int(params["port"]))
    if args is None:
        return connect(params)
    try:
        conn = MySQLdb.connect(**_basics(params), **args, autocommit=True, charset="utf8mb4", init_command=SESSION)
    except MySQLdb.MySQLError as exc:
        raise cannot_connect(params, exc) from None
    conn.binlake_epoch = int(params.get("epoch") or 0)
    return conn


class Connections:
    """The connections one reader keeps across its chunk reads: a control connection (watermarks,
    settles, key comparisons, mysql-replication's questions) and a bulk one (the chunk SELECTs).

    A new connection costs a TLS handshake where the server offers TLS: measured here against MySQL
    9.7, 20 ms by PyMySQL and about 100 ms by mysqlclient (MariaDB's Connector/C makes a TLS context
    per connection), more than the read of a 1,000-row chunk, which used to open three. A held
    connection idle for a while is pinged before it is handed out and opened again when it has gone
    (the server's `wait_timeout`, a restart); after a failed read the caller `reset`s, so a retry
    starts from new connections and never from one left inside a transaction.
    """

    IDLE = 1.0  # seconds after which a held connection is pinged before use

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self._held: dict[str, Any] = {}
        self._used: dict[str, float] = {}

    def control(self) -> pymysql.connections.Connection:
        return self._get("control", connect)

    def bulk(self) -> Any:
        return self._get("bulk", bulk_connect)

    def _get(self, kind: str, opener: Any) -> Any:
        conn = self._held.get(kind)
        if conn is not None and time.monotonic() - self._used[kind] > self.IDLE:
            try:
                conn.ping()
            except Exception:  # noqa: BLE001 - gone: open another below
                self._close(kind)
                conn = None
        if conn is None:
            conn = self._held[kind] = opener(self.params)
        self._used[kind] = time.monotonic()
        return conn

    def _close(self, kind: str) -> None:
        conn = self._held.pop(kind, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a connection that broke
                pass

    def reset(self) -> None:
        """Close both: the next read opens new ones."""
        for kind in list(self._held):
            self._close(kind)

    close = reset
