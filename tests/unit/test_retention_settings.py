"""`lake.retention` and `lake.retention-interval`: lengths of time as written, `off`, and refusals in
one line; and the pieces of a Delta log retention reads (binlake.lake.table_log) that need no table."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from binlake import cli, config, duration
from binlake.errors import ConfigError
from binlake.lake.deletion_vectors import z85_decode
from binlake.lake.table_log import dv_file


@pytest.fixture(autouse=True)
def no_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BINLAKE_LAKE_RETENTION", "BINLAKE_LAKE_RETENTION_INTERVAL"):
        monkeypatch.delenv(name, raising=False)


def test_the_defaults_are_delta_s_week_and_an_hour() -> None:
    cfg = config.load(None, env={})
    assert (cfg.get("lake.retention"), cfg.get("lake.retention-interval")) == ("7d", "1h")
    assert duration.seconds(cfg.get("lake.retention")) == 7 * 86400
    assert duration.seconds(cfg.get("lake.retention-interval")) == 3600


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800),
                                               (" 2h ", 7200), ("off", None), ("OFF", None)])
def test_lengths_of_time_as_written(text: str, seconds: int | None) -> None:
    cfg = config.load(None, [f"lake.retention={text}"], env={})
    assert duration.seconds(cfg.get("lake.retention")) == seconds


def test_the_file_keeps_what_was_written(tmp_path: Path) -> None:
    # YAML reads a bare off as False and 7d as text: the setting takes the text as written
    path = tmp_path / "binlake.yml"
    path.write_text("lake:\n  retention: off\n  retention-interval: 10m\n")
    cfg = config.load(path, env={})
    assert (cfg.get("lake.retention"), cfg.get("lake.retention-interval")) == ("off", "10m")
    assert config.load(None, env={"BINLAKE_LAKE_RETENTION": "36h"}).get("lake.retention") == "36h"


@pytest.mark.parametrize("text", ["7", "0s", "1.5h", "7 days", "1w", "-1d", "", "1h30m"])
def test_a_bad_retention_is_refused_in_one_line(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(None, [f"lake.retention={text}"], env={})
    assert err.value.message == (f"lake.retention is {text!r} in --set; binlake needs a length of time: a whole "
                                 "number above 0 and s, m, h or d, like 7d, 12h, 30m or 90s; or off: fix "
                                 "lake.retention")
    assert cli.main(["config", "show", "--set", f"lake.retention={text}"]) == 2
    assert capsys.readouterr().err == f"binlake: {err.value.message}\n"


def test_the_interval_has_no_off(tmp_path: Path) -> None:
    # a refused value from the file is shown as YAML read it, as for every setting: `off` is False
    path = tmp_path / "binlake.yml"
    path.write_text("lake:\n  retention-interval: off\n")
    with pytest.raises(ConfigError, match=r"^lake\.retention-interval is False in .*binlake.yml; binlake needs a "
                                          r"length of time: .* 90s: fix lake\.retention-interval$"):
        config.load(path, env={})
    path.write_text("lake:\n  retention: [1d]\n")
    with pytest.raises(ConfigError, match=r"^lake\.retention is \['1d'\] in .*; binlake needs a length of time"):
        config.load(path, env={})


def test_a_deletion_vector_s_file_by_the_protocol_s_examples() -> None:
    # the Delta protocol's example: prefix `ab`, then the Z85 of the UUID
    assert uuid.UUID(bytes=z85_decode("^-aqEH.-t@S}K{vb[*k^")) == uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4, "sizeInBytes": 40,
          "cardinality": 6}
    assert dv_file("/lake/t", dv) == "/lake/t/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert dv_file("/lake/t", {**dv, "pathOrInlineDv": "^-aqEH.-t@S}K{vb[*k^"}) == \
        "/lake/t/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert dv_file("/lake/t", {"storageType": "p", "pathOrInlineDv": "file:/lake/t/x%20y/dv.bin"}) == \
        "/lake/t/x y/dv.bin"
    assert dv_file("/lake/t", {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"}) is None
    assert dv_file("/lake/t", None) is None
