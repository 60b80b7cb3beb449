"""Encrypted connections: `source.tls.*`, with MySQL's `ssl-mode` names, applied to every connection
binlake opens (through `binlake.source.connection`).

    disabled         plain TCP
    preferred        TLS when the server offers it, without verifying its certificate (the default)
    required         TLS, without verifying the certificate
    verify-ca        TLS, the certificate signed by `source.tls.ca` (or the system's CAs)
    verify-identity  verify-ca, and the certificate names `source.hostname`

`source.tls.cert` / `source.tls.key` present a client certificate (an account `REQUIRE X509`).
`source.tls.ca` is a file, or the PEM text itself (a CA kept in a Databricks secret).

Each process builds one TLS context per setting and reuses it: building one loads the system's CA
store, which costs tens of milliseconds a connection. Under `preferred` the first connection to a
server learns whether it offers TLS; later ones ask for TLS, or not, accordingly.
"""

from __future__ import annotations

import functools
import os
import ssl
from dataclasses import dataclass
from typing import Any

from binlake.errors import ConfigError

MODES = ("disabled", "preferred", "required", "verify-ca", "verify-identity")
VERIFYING = ("verify-ca", "verify-identity")

# (host, port) -> does the server offer TLS; learned by `learn` under `preferred`
_OFFERED: dict[tuple[str, int], bool] = {}


@dataclass(frozen=True)
class Tls:
    mode: str = "preferred"
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @classmethod
    def of(cls, params: dict[str, Any]) -> Tls:
        t = params.get("tls") or {}
        return cls(t.get("mode") or "preferred", t.get("ca"), t.get("cert"), t.get("key"))

    def problem(self) -> str | None:
        """What is wrong with the settings together, as the end of a one-line error; None: nothing."""
        if self.mode not in MODES:
            return f"source.tls.mode is {self.mode!r}; binlake needs one of {', '.join(MODES)}: fix source.tls.mode"
        if bool(self.cert) != bool(self.key):
            have, lacks = ("cert", "key") if self.cert else ("key", "cert")
            return (f"source.tls.{have} is set but source.tls.{lacks} is not; a client certificate needs both: "
                    f"set source.tls.{lacks}")
        if self.cert and self.mode in ("disabled", "preferred"):
            return (f"source.tls.cert is set but source.tls.mode is {self.mode}; a client certificate needs TLS: "
                    "set source.tls.mode to required, verify-ca or verify-identity")
        if self.ca and self.mode not in VERIFYING:
            return (f"source.tls.ca is set but source.tls.mode is {self.mode}, which verifies nothing: set "
                    "source.tls.mode to verify-ca or verify-identity")
        return None

    @property
    def ca_text(self) -> bool:
        return bool(self.ca) and self.ca.lstrip().startswith("-----BEGIN")  # type: ignore[union-attr]

    def context(self) -> ssl.SSLContext:
        return _context(self)

    def pymysql_args(self, host: str, port: int) -> dict[str, Any]:
        """PyMySQL's (and so mysql-replication's) TLS arguments."""
        if self.mode == "disabled":
            return {"ssl_disabled": True}
        if self.mode == "preferred":
            offered = _OFFERED.get((host, port))
            if offered is None:
                return {}  # PyMySQL's own preferred mode; `learn` records what the server offered
            return {"ssl": self.context()} if offered else {"ssl_disabled": True}
        return {"ssl": self.context()}

    def mysqlclient_args(self, host: str, port: int) -> dict[str, Any] | None:
        """mysqlclient's TLS arguments; None: use PyMySQL instead. The verifying modes go through
        PyMySQL: MariaDB's Connector/C, which mysqlclient links here, checks the host name whenever
        it checks the CA, so it cannot do `verify-ca` alone."""
        if self.mode in VERIFYING:
            return None
        if self.mode == "disabled":
            return {"ssl_mode": "DISABLED"}
        if self.mode == "preferred":
            offered = _OFFERED.get((host, port))
            if offered is None:
                return None  # learn it first, through PyMySQL
            return {"ssl_mode": "REQUIRED" if offered else "DISABLED"}
        args: dict[str, Any] = {"ssl_mode": "REQUIRED"}
        if self.cert:
            args["ssl"] = {"cert": self.cert, "key": self.key}
        return args


def learn(host: str, port: int, conn: Any) -> None:
    """Record whether the server behind a PyMySQL connection offers TLS (its handshake says)."""
    from pymysql.constants import CLIENT

    _OFFERED[(host, port)] = bool(getattr(conn, "server_capabilities", 0) & CLIENT.SSL)


@functools.lru_cache(maxsize=8)
def _context(tls: Tls) -> ssl.SSLContext:
    for name in ("ca", "cert", "key"):
        path = getattr(tls, name)
        if path and not (name == "ca" and tls.ca_text) and not os.access(path, os.R_OK):
            raise ConfigError(f"source.tls.{name} is {path}, which is not a readable file; binlake needs the PEM "
                              f"file there: fix source.tls.{name}")
    verify = tls.mode in VERIFYING
    try:
        if verify:
            ctx = ssl.create_default_context(cadata=tls.ca) if tls.ca_text else \
                ssl.create_default_context(cafile=tls.ca)
            # certificates a server generates for itself (MySQL's auto_generate_certs) are not strict X.509
            ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
            ctx.check_hostname = tls.mode == "verify-identity"
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if tls.cert:
            ctx.load_cert_chain(tls.cert, keyfile=tls.key)
    except ssl.SSLError as exc:
        raise ConfigError(f"TLS files do not load ({exc.reason or exc}); binlake needs PEM files: check "
                          "source.tls.ca, source.tls.cert and source.tls.key") from None
    return ctx

