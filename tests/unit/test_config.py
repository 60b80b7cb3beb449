"""Configuration loading: file, `${ENV}` interpolation, environment and `--set` overrides, refusals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from binlake import cli, config
from binlake.errors import ConfigError

SECRET = "Hv4-config-Secret!z"
ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "binlake.yml"
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def no_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """cli.main reads os.environ; a developer's exported BINLAKE_* variables must not leak in."""
    for section, keys in config.SCHEMA.items():
        for key in keys:
            monkeypatch.delenv(f"BINLAKE_{section}_{key}".upper().replace("-", "_"), raising=False)


SAMPLE = """
source:
  hostname: db.internal
  port: 3307
  username: cdc
  password: ${BINLAKE_SOURCE_PASSWORD}
  tables: ['shop\\.orders', 'shop\\.customer.*']
  server-id: 5400-5404
target:
  path: ./lake
snapshot:
  chunk-size: 500
"""


def test_yaml_file_with_defaults_for_the_rest(tmp_path: Path) -> None:
    cfg = config.load(write(tmp_path, SAMPLE), env={"BINLAKE_SOURCE_PASSWORD": SECRET})
    assert cfg.connection() == {"host": "db.internal", "port": 3307, "user": "cdc", "password": SECRET,
                                "connect_timeout": 10, "read_timeout": 60,
                                "tls": {"mode": "preferred", "ca": None, "cert": None, "key": None}}
    assert cfg.tables == [r"shop\.orders", r"shop\.customer.*"]
    assert cfg.chunk_size == 500
    assert cfg.parallelism == config.SCHEMA["snapshot"]["parallelism"][1]
    assert (cfg.server_ids.first, cfg.server_ids.last, len(cfg.server_ids)) == (5400, 5404, 5)
    assert cfg.target_path == str((Path.cwd() / "lake").resolve())
    assert cfg.origin == str(tmp_path / "binlake.yml")


def test_no_file_gives_the_schema_defaults() -> None:
    cfg = config.load(None, env={})
    for section, keys in config.SCHEMA.items():
        for key, (_parser, default, _description) in keys.items():
            assert cfg.get(f"{section}.{key}") == default


def test_env_interpolation_inside_strings_and_lists(tmp_path: Path) -> None:
    path = write(tmp_path, "source:\n  hostname: db-${ZONE}.internal\n  port: ${PORT}\n"
                           "  tables: ['${DB}\\..*']\n")
    cfg = config.load(path, env={"ZONE": "eu", "PORT": "3310", "DB": "shop"})
    assert cfg.get("source.hostname") == "db-eu.internal"
    assert cfg.get("source.port") == 3310
    assert cfg.tables == [r"shop\..*"]


def test_env_interpolation_default(tmp_path: Path) -> None:
    path = write(tmp_path, "source:\n  password: ${BINLAKE_SOURCE_PASSWORD:-}\n"
                           "  hostname: ${HOST:-127.0.0.2}\n")
    cfg = config.load(path, env={})
    assert (cfg.get("source.password"), cfg.get("source.hostname")) == ("", "127.0.0.2")


def test_missing_env_variable_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "source:\n  password: ${CDC_PASSWORD_NOT_SET}\n")
    with pytest.raises(ConfigError) as err:
        config.load(path, env={})
    message = str(err.value)
    assert "source.password refers to ${CDC_PASSWORD_NOT_SET}, which is not set" in message
    assert "export CDC_PASSWORD_NOT_SET=" in message
    assert err.value.exit_code == 2


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    env = {"BINLAKE_SOURCE_PASSWORD": SECRET, "BINLAKE_SOURCE_PORT": "4406",
           "BINLAKE_SNAPSHOT_CHUNK_SIZE": "1000", "BINLAKE_SOURCE_TABLES": "a\\.b, c\\..*"}
    cfg = config.load(write(tmp_path, SAMPLE), env=env)
    assert cfg.get("source.port") == 4406
    assert cfg.chunk_size == 1000  # dashes in keys become underscores in the variable name
    assert cfg.tables == [r"a\.b", r"c\..*"]
    assert cfg.get("source.hostname") == "db.internal"  # not overridden, the file's value stays


def test_set_overrides_the_environment_and_the_file(tmp_path: Path) -> None:
    env = {"BINLAKE_SOURCE_PASSWORD": SECRET, "BINLAKE_SOURCE_PORT": "4406"}
    cfg = config.load(write(tmp_path, SAMPLE), ["source.port=5506", "snapshot.chunk-size=64"], env=env)
    assert cfg.get("source.port") == 5506
    assert cfg.chunk_size == 64


def test_passwords_are_taken_verbatim() -> None:
    # YAML would read 0123 as a number and yes as a boolean; a password must stay the text typed
    assert config.load(None, env={"BINLAKE_SOURCE_PASSWORD": "0123"}).get("source.password") == "0123"
    assert config.load(None, ["source.password=yes"], env={}).get("source.password") == "yes"


@pytest.mark.parametrize(
    ("text", "overrides", "unknown", "suggestion"),
    [
        ("source:\n  hostnme: x\n", [], "source.hostnme", "source.hostname"),
        ("snapshot:\n  chunksize: 10\n", [], "snapshot.chunksize", "snapshot.chunk-size"),
        ("", ["source.prot=3306"], "source.prot", "source.port"),
    ],
)
def test_unknown_key_is_refused_with_the_closest(tmp_path: Path, text: str, overrides: list[str],
                                                 unknown: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(write(tmp_path, text), overrides, env={})
    assert f"unknown configuration key '{unknown}'" in str(err.value)
    assert f"did you mean '{suggestion}'?" in str(err.value)


def test_unknown_section_is_refused_with_the_closest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown configuration section 'sorce'.*did you mean 'source'\?"):
        config.load(write(tmp_path, "sorce:\n  port: 1\n"), env={})


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("source:\n  port: abc\n", r"source\.port is 'abc' in .*; binlake needs .*: fix source\.port"),
        ("source:\n  port: true\n", r"source\.port is True .*a whole number"),
        ("source:\n  tables: {a: b}\n", r"source\.tables is \{'a': 'b'\} .*a list of strings"),
        ("source:\n  port: 3.5\n", r"source\.port is 3\.5 .*a whole number"),
        ("source:\n  hostname: [a, b]\n", r"source\.hostname is \['a', 'b'\] .*binlake needs text"),
        ("source:\n  tables: ['shop\\.(']\n", r"source\.tables pattern 'shop\\\\.\(' is not a valid regex"),
        ("source:\n  server-id: 5404-5400\n", r"source\.server-id is '5404-5400'; binlake needs 1 <= first"),
        ("source:\n  server-id: five\n", r"source\.server-id is 'five'; binlake needs a number or a range"),
        ("source:\n  chunk-key: [a, b]\n", r"source\.chunk-key is \['a', 'b'\] .*a mapping"),
        ("snapshot:\n  chunk-size: 0\n", r"snapshot\.chunk-size is 0; binlake needs a number >= 1"),
        ("source:\n  signal-table: signals\n", r"source\.signal-table is 'signals'; binlake needs db\.table"),
        ("source:\n  tables: ['shop\\..*']\n  signal-table: shop.signal\n",
         r"source\.signal-table shop\.signal is matched by source\.tables too.*leave it out of source\.tables"),
        ("source: 3306\n", r"section 'source' .* is not a mapping"),
        ("- a\n- b\n", r"holds a list; binlake needs a mapping of sections"),
        ("source:\n  port: [1\n", r"is not valid YAML at line \d+"),
    ],
)
def test_bad_values_are_refused(tmp_path: Path, text: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        config.load(write(tmp_path, text), env={})


def test_text_settings_keep_the_text_given() -> None:
    # YAML would read these as False, None, 31, True and a date: a text setting takes them as typed
    cfg = config.load(None, ["source.username=no", "source.hostname=null", "target.catalog=yes",
                             "stream.startup-position=2024-01-01"],
                      env={"BINLAKE_DATABRICKS_SECRET_KEY": "0x1F", "BINLAKE_TARGET_PATH": "on",
                           "BINLAKE_TARGET_SCHEMA": "007", "BINLAKE_SOURCE_TABLES": "no,1"})
    assert cfg.get("source.username") == "no"
    assert cfg.get("source.hostname") == "null"
    assert cfg.get("target.catalog") == "yes"
    assert cfg.get("stream.startup-position") == "2024-01-01"
    assert cfg.get("target.schema") == "007"
    assert cfg.get("databricks.secret-key") == "0x1F"
    assert cfg.get("target.path") == "on"
    assert cfg.tables == ["no", "1"]
    assert config.load(None, env={"BINLAKE_SOURCE_HOSTNAME": "0x1F"}).get("source.hostname") == "0x1F"
    assert config.load(None, ["source.hostname= db "], env={}).get("source.hostname") == " db "


def test_text_settings_in_the_file_keep_the_scalar_as_written(tmp_path: Path) -> None:
    path = write(tmp_path, "source:\n  username: no\n  hostname: null\n  password: 0123\n  server-id: 5400\n"
                           "  tables: [yes, 1, 'a\\.b']\n  chunk-key: {shop.log: [on, seq]}\n"
                           "  tls:\n    ca: ~\n    mode: required\ntarget:\n  catalog:\n  schema: 007\n")
    cfg = config.load(path, env={})
    assert cfg.get("source.username") == "no"
    assert cfg.get("source.hostname") == "null"
    assert cfg.get("source.password") == "0123"
    assert cfg.get("source.server-id") == "5400"
    assert cfg.tables == ["yes", "1", r"a\.b"]
    assert cfg.get("source.chunk-key") == {"shop.log": ["on", "seq"]}
    # YAML's null keeps its meaning where a setting may be unset
    assert cfg.get("source.tls.ca") is None and cfg.get("target.catalog") is None
    assert cfg.get("target.schema") == "007"
    assert config.load(write(tmp_path, "source:\n  password:\n"), env={}).get("source.password") == ""


def test_numbers_in_the_file_keep_their_yaml_reading(tmp_path: Path) -> None:
    cfg = config.load(write(tmp_path, "source:\n  port: 3307\n  connect-timeout: '5'\n"
                                      "stream:\n  startup-timestamp: ~\n"), env={})
    assert (cfg.get("source.port"), cfg.get("source.connect-timeout")) == (3307, 5)
    assert cfg.get("stream.startup-timestamp") is None


def test_numbers_given_as_text_are_read_as_numbers() -> None:
    cfg = config.load(None, ["source.port=3307", "stream.startup-timestamp=1700000000", "snapshot.chunk-size= 64 "],
                      env={"BINLAKE_SOURCE_READ_TIMEOUT": "+30"})
    assert (cfg.get("source.port"), cfg.get("source.read-timeout")) == (3307, 30)
    assert cfg.get("stream.startup-timestamp") == 1_700_000_000 and cfg.chunk_size == 64
    # an empty text leaves an optional setting unset
    assert config.load(None, ["stream.startup-timestamp=", "target.catalog="], env={}).get("target.catalog") is None


@pytest.mark.parametrize(
    ("overrides", "env", "message"),
    [
        (["source.port=0x1F"], {}, "source.port is '0x1F' in --set; binlake needs a whole number in decimal "
                                   "digits: fix source.port"),
        ([], {"BINLAKE_SNAPSHOT_CHUNK_SIZE": "1e3"}, "snapshot.chunk-size is '1e3' in environment variable "
                                                     "BINLAKE_SNAPSHOT_CHUNK_SIZE; binlake needs a whole number"),
        (["source.port=true"], {}, "source.port is 'true' in --set; binlake needs a whole number"),
        (["stream.startup-timestamp=null"], {}, "stream.startup-timestamp is 'null' in --set; binlake needs a whole "
                                                "number in decimal digits, or nothing: fix stream.startup-timestamp"),
        (["source.chunk-key={a: [b"], {}, "source.chunk-key is '{a: [b' in --set; binlake needs a mapping"),
        (["stream.on-purged=no"], {}, "stream.on-purged is 'no' in --set; binlake needs 'fail' or 'resnapshot'"),
    ],
)
def test_a_bad_value_given_as_text_gets_one_line(overrides: list[str], env: dict[str, str], message: str,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(None, overrides, env=env)
    assert message in err.value.message
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["config", "show", *[a for o in overrides for a in ("--set", o)]]) == 2
    out, stderr = capsys.readouterr()
    assert stderr == f"binlake: {err.value.message}\n" and out == ""
    assert "invalid literal" not in stderr and "Traceback" not in stderr


def test_structured_settings_given_as_text() -> None:
    cfg = config.load(None, ["source.chunk-key={shop.log: [ts, no]}", r"source.tables=['a\.b', no]"], env={})
    assert cfg.get("source.chunk-key") == {"shop.log": ["ts", "no"]}
    assert cfg.tables == [r"a\.b", "no"]


def test_bad_set_flag() -> None:
    with pytest.raises(ConfigError, match=r"--set 'source.port' has no '='"):
        config.load(None, ["source.port"], env={})
    with pytest.raises(ConfigError, match=r"source\.port is 'x' in --set"):
        config.load(None, ["source.port=x"], env={})


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["config", "show", "-c", str(tmp_path / "nope.yml")]) == 2
    assert "nope.yml does not exist" in capsys.readouterr().err


def test_config_show_masks_the_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BINLAKE_SOURCE_PASSWORD", SECRET)
    assert cli.main(["config", "show", "-c", str(write(tmp_path, SAMPLE)), "--set", "source.port=3399"]) == 0
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    assert "password: '******'" in out
    assert "hostname: db.internal" in out and "port: 3399" in out and "chunk-size: 500" in out

    assert cli.main(["config", "show", "--set", f"source.password={SECRET}"]) == 0
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    assert "password: '******'" in out


def test_bad_password_value_is_not_echoed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # even a refused file must not put the secret on the terminal
    path = write(tmp_path, f"source:\n  password: {SECRET}\n  port: nope\n")
    assert cli.main(["config", "show", "-c", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "source.port is 'nope'" in err
    assert SECRET not in out + err


def readme_config_table() -> str:
    rows = ["| key | default | environment variable | description |", "|---|---|---|---|"]
    for section, keys in config.SCHEMA.items():
        for key, (_parser, default, description) in keys.items():
            if default is None:
                shown = "(none)"
            elif default in ("", [], {}):
                shown = "(empty)"
            else:
                shown = f"`{default}`"
            env = f"BINLAKE_{section}_{key}".upper().replace("-", "_").replace(".", "_")
            rows.append(f"| `{section}.{key}` | {shown} | `{env}` | {description} |")
    return "\n".join(rows)


def test_readme_lists_every_key() -> None:
    # docs/operating.md's table is this function's output; when a key changes, paste the new table there
    reference = (ROOT / "docs" / "operating.md").read_text()
    table = readme_config_table()
    assert table in reference, "docs/operating.md's table of every setting is out of date; replace it with:\n" + table
    assert re.search(r"--set section\.key=value", (ROOT / "README.md").read_text())
