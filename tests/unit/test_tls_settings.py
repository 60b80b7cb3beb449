"""source.tls.* settings that contradict each other, or name files that are not there, are refused
with one line before any connection is tried."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake import cli, config
from binlake.source.connection import settings
from binlake.source.tls import Tls


def test_settings_that_contradict_each_other_are_refused() -> None:
    cases = {
        ("source.tls.mode=preferred", "source.tls.cert=/c.pem", "source.tls.key=/k.pem"): "a client certificate needs TLS",
        ("source.tls.mode=required", "source.tls.cert=/c.pem"): "source.tls.key is not",
        ("source.tls.mode=required", "source.tls.ca=/ca.pem"): "verifies nothing",
        ("source.tls.mode=verify",): "source.tls.mode is 'verify'",
    }
    for overrides, expected in cases.items():
        with pytest.raises(config.ConfigError, match=expected):
            config.load(None, list(overrides), env={})


def test_a_missing_file_is_named_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["check", "--set", "source.tls.mode=verify-ca", "--set", "source.tls.ca=/missing/ca.pem",
                     "--set", "source.port=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "/missing/ca.pem" in err[0] and "source.tls.ca" in err[0], err


def test_each_mode_gives_pymysql_its_own_arguments(tmp_path: Path) -> None:
    base = {"host": "db.example", "port": 3306, "user": "u", "password": "p"}
    assert settings({**base, "tls": {"mode": "disabled"}})["ssl_disabled"] is True
    assert "ssl" not in settings({**base, "tls": {"mode": "preferred"}})  # until a handshake says what the server offers
    required = settings({**base, "tls": {"mode": "required"}})["ssl"]
    assert required.verify_mode.name == "CERT_NONE" and not required.check_hostname
    assert settings({**base, "tls": {"mode": "required"}})["ssl"] is required  # one context per process and setting
    identity = settings({**base, "tls": {"mode": "verify-identity"}})["ssl"]
    assert identity.verify_mode.name == "CERT_REQUIRED" and identity.check_hostname
    assert Tls.of(base) == Tls("preferred")


def test_nested_yaml_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "binlake.yml"
    path.write_text("source:\n  tls:\n    mode: verify-ca\n    ca: /etc/ca.pem\n")
    assert config.load(path, env={}).connection()["tls"] == {"mode": "verify-ca", "ca": "/etc/ca.pem", "cert": None,
                                                             "key": None}
    assert config.load(path, env={"BINLAKE_SOURCE_TLS_MODE": "verify-identity"}).get("source.tls.mode") == \
        "verify-identity"
    path.write_text("source:\n  tls:\n    mod: required\n")
    with pytest.raises(config.ConfigError, match="unknown configuration key 'source.tls.mod'.*source.tls.mode"):
        config.load(path, env={})


def test_on_databricks_the_ca_can_come_from_the_secret_scope() -> None:
    from binlake.databricks.entrypoints import load_with_secret

    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    reads: list[tuple[str, str]] = []

    class Secrets:
        def get(self, scope: str, key: str) -> str:
            reads.append((scope, key))
            return {"pw": "s3cr3t", "ca": pem}[key]

    class DbUtils:
        secrets = Secrets()

    cfg = load_with_secret(["databricks.secret-scope=binlake", "databricks.secret-key=pw",
                            "databricks.tls-ca-secret-key=ca", "source.tls.mode=verify-ca"], lambda: DbUtils())
    assert cfg.get("source.tls.ca") == pem and cfg.get("source.password") == "s3cr3t"
    assert sorted(reads) == [("binlake", "ca"), ("binlake", "pw")]
    assert Tls.of(cfg.connection()).ca_text
    with pytest.raises(config.ConfigError, match="both set"):
        load_with_secret(["databricks.secret-scope=binlake", "databricks.tls-ca-secret-key=ca",
                          "source.tls.mode=verify-ca", "source.tls.ca=/etc/ca.pem"], lambda: DbUtils())
