"""Encrypted connections (`source.tls.*`) against a private server that accepts only TLS
(`require_secure_transport=ON`) with certificates made here by `cryptography`: a CA, the server's
certificate for 127.0.0.1, a client certificate, and a second CA that signed nothing of the server.

A run works with `required` (the chunk SELECTs through mysqlclient, TLS without verification) and
with `verify-identity` as an account that requires a client certificate (`REQUIRE X509`); every way
the settings and the server disagree ends in one line naming the setting."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from binlake import config
from binlake.commands.devdb import DevDb
from binlake.errors import RuntimeFailure
from binlake.source.connection import bulk_connect, connect, encryption

from ..conftest import SERVERS
from .helpers import seq
from .workload import run_cli

X509_USER, X509_PASSWORD = "tls_reader", "Tls-r3ader-pw"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _certificate(subject: str, key: rsa.RSAPrivateKey, issuer: x509.Certificate | None, issuer_key: rsa.RSAPrivateKey,
                 ca: bool, ip: str | None = None) -> x509.Certificate:
    """An X.509 certificate for `subject`, signed by `issuer` (itself when None), valid for two days."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer.subject if issuer else name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    if ip:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
                                        critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certificates(folder: Path) -> dict[str, Path]:
    """ca.pem signs server.pem (for IP 127.0.0.1) and client.pem; other-ca.pem signs nothing here."""
    folder.mkdir(parents=True, exist_ok=True)

    def write(name: str, cert: x509.Certificate, key: rsa.RSAPrivateKey) -> None:
        (folder / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (folder / f"{name}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))

    cas: dict[str, tuple[x509.Certificate, rsa.RSAPrivateKey]] = {}
    for ca in ("ca", "other-ca"):
        key = _key()
        cas[ca] = (_certificate(f"binlake test {ca}", key, None, key, ca=True), key)
        write(ca, *cas[ca])
    ca_cert, ca_key = cas["ca"]
    for leaf, cn, ip in (("server", "127.0.0.1", "127.0.0.1"), ("client", X509_USER, None)):
        key = _key()
        write(leaf, _certificate(cn, key, ca_cert, ca_key, ca=False, ip=ip), key)
    return {name: folder / f"{name}.pem" for name in ("ca", "other-ca", "server", "client")} | {
        "server-key": folder / "server.key", "client-key": folder / "client.key"}


@pytest.fixture(scope="module", params=SERVERS)
def tls_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevDb]:
    root = tmp_path_factory.mktemp(f"tls-{request.param}")
    certs = make_certificates(root / "certs")
    db = DevDb(datadir=root / "db", server=request.param, server_id=71,
               extra_options=(f"--ssl-ca={certs['ca']}", f"--ssl-cert={certs['server']}",
                              f"--ssl-key={certs['server-key']}", "--require-secure-transport=ON"))
    db.certs = certs  # type: ignore[attr-defined]
    db.start()  # its readiness probe, like every client here, negotiates TLS (PyMySQL's preferred mode)
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{X509_USER}'@'%' IDENTIFIED BY '{X509_PASSWORD}' REQUIRE X509")
        cur.execute(f"GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* "
                    f"TO '{X509_USER}'@'%'")
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT INTO shop.t SELECT seq, CONCAT('v', seq) FROM {seq(1, 3000)}")
    yield db
    db.stop()


def _params(db: DevDb, mode: str, user: str = "root", password: str = "", host: str = "127.0.0.1",
            **files: Path) -> dict[str, Any]:
    return {"host": host, "port": db.running_port(), "user": user, "password": password, "connect_timeout": 5,
            "read_timeout": 20, "tls": {"mode": mode, **{k: str(v) for k, v in files.items()}}}


def _tls_args(db: DevDb, mode: str, **files: Path) -> list[str]:
    return [a for k, v in {"mode": mode, **files}.items() for a in ("--set", f"source.tls.{k}={v}")]


def test_a_run_over_required_then_verify_identity_with_a_client_certificate(tls_server: DevDb, spark: Any,
                                                                             tmp_path: Path) -> None:
    certs = tls_server.certs  # type: ignore[attr-defined]
    port = tls_server.running_port()
    assert port is not None
    cfg = tmp_path / "binlake.yml"
    cfg.write_text(f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
                   f"  tables: ['shop\\.t']\n  server-id: 5700-5704\n  tls:\n    mode: required\n"
                   f"target:\n  path: {tmp_path / 'lake'}\nsnapshot:\n  chunk-size: 500\n")
    # required: the chunk SELECTs go through mysqlclient (MariaDB Connector/C) with TLS, unverified
    first = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert first.returncode == 0, first.stderr[-3000:]
    with tls_server.connect("shop") as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 'after' WHERE id <= 10")
        cur.execute("DELETE FROM t WHERE id > 2990")
    # verify-identity, as the REQUIRE X509 account with its certificate: every connection verified
    cert = ["--set", f"source.username={X509_USER}", "--set", f"source.password={X509_PASSWORD}",
            *_tls_args(tls_server, "verify-identity", ca=certs["ca"], cert=certs["client"], key=certs["client-key"])]
    checked = run_cli("check", "-c", str(cfg), *cert)
    assert checked.returncode == 0, checked.stderr
    assert "connection encrypted: TLSv1." in checked.stdout and "source.tls.mode=verify-identity" in checked.stdout
    second = run_cli("run", "-c", str(cfg), "--until-caught-up", *cert)
    assert second.returncode == 0, second.stderr[-3000:]
    assert X509_PASSWORD not in second.stderr + second.stdout
    loaded = config.load(cfg)
    from binlake.lake.target import Target

    silver = Target.of(loaded).silver("shop.t").location
    got = sorted((r["id"], r["v"]) for r in spark.read.format("delta").load(silver).select("id", "v").collect())
    with tls_server.connect("shop") as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t ORDER BY id")
        assert got == [tuple(r) for r in cur.fetchall()]


@pytest.mark.parametrize("mode", ["required", "verify-ca", "verify-identity"])
def test_every_connection_kind_is_encrypted(tls_server: DevDb, mode: str) -> None:
    """Metadata (PyMySQL) and bulk (mysqlclient, or PyMySQL under the verifying modes) connections."""
    certs = tls_server.certs  # type: ignore[attr-defined]
    files = {"ca": certs["ca"]} if mode != "required" else {}
    p = _params(tls_server, mode, **files)
    for opened in (connect(p), bulk_connect(p)):
        try:
            assert (encryption(opened) or "").startswith("TLSv1."), type(opened)
        finally:
            opened.close()


def _one_line(args: list[str]) -> str:
    """`binlake check` with `args`: exit 2, one line on stderr, returned."""
    done = run_cli("check", *args)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return lines[0]


def test_each_refusal_is_one_line_naming_the_setting(tls_server: DevDb) -> None:
    certs = tls_server.certs  # type: ignore[attr-defined]
    base = ["--set", f"source.port={tls_server.running_port()}", "--set", "source.connect-timeout=5"]
    # the certificate names 127.0.0.1, not localhost
    line = _one_line([*base, "--set", "source.hostname=localhost",
                      *_tls_args(tls_server, "verify-identity", ca=certs["ca"])])
    assert "does not name localhost" in line and "source.tls.mode=verify-ca" in line, line
    line = _one_line([*base, *_tls_args(tls_server, "verify-ca", ca=certs["other-ca"])])
    assert "not signed by the CA in source.tls.ca" in line, line
    line = _one_line([*base, *_tls_args(tls_server, "disabled")])
    assert "accepts only encrypted connections" in line and "set source.tls.mode to required" in line, line
    # the X509 account without its certificate
    line = _one_line([*base, "--set", f"source.username={X509_USER}", "--set", f"source.password={X509_PASSWORD}",
                      *_tls_args(tls_server, "required")])
    assert "1045" in line and "source.tls.cert" in line and X509_PASSWORD not in line, line
    # the same refusals from a run's own connections
    with pytest.raises(RuntimeFailure, match="not signed by the CA in source.tls.ca"):
        connect(_params(tls_server, "verify-ca", ca=certs["other-ca"]))
    with pytest.raises(RuntimeFailure, match="accepts only encrypted connections.*set source.tls.mode to required"):
        bulk_connect(_params(tls_server, "disabled"))
