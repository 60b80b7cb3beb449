"""binlake adjusts private methods of one mysql-replication release (binlake.source.binlog_types):
the pin in pyproject.toml, the release the check accepts and the methods it relies on move together."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from binlake.errors import LibraryVersionError
from binlake.source import binlog_types

ROOT = Path(__file__).resolve().parents[2]


def pyproject_pin() -> str:
    found = re.findall(r'"mysql-replication\s*([=<>!~]=?[^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert len(found) == 1, f"pyproject.toml names mysql-replication {len(found)} times: {found}"
    assert found[0].startswith("==") and "," not in found[0], (
        f"mysql-replication is pinned as {found[0]!r}; binlake adjusts private methods of one release, so it "
        "needs an exact pin (==)")
    return found[0][2:].strip()


def test_the_check_accepts_the_pinned_release_and_it_is_installed() -> None:
    # moving the pin means re-reading the library against binlog_types.install and RELIED_ON, then
    # updating binlog_types.PINNED
    assert binlog_types.PINNED == pyproject_pin()
    assert version("mysql-replication") == binlog_types.PINNED
    binlog_types.check_version()


@pytest.mark.parametrize(("cls", "name"), list(binlog_types.RELIED_ON))
def test_each_method_relied_on_is_the_library_s_own_with_the_parameters_passed(cls: type, name: str) -> None:
    method = binlog_types.LIBRARY[(cls, name)]  # as the library defines it, before install replaced it
    assert method is not None, f"mysql-replication {version('mysql-replication')} has no {cls.__name__}.{name}"
    assert method.__module__.startswith("pymysqlreplication.")
    assert tuple(inspect.signature(method).parameters) == binlog_types.RELIED_ON[(cls, name)]


def test_another_release_is_refused_in_one_line() -> None:
    with pytest.raises(LibraryVersionError) as err:
        binlog_types.check_version("1.0.18")
    message = err.value.message
    assert message == ("mysql-replication is 1.0.18 here; binlake needs mysql-replication 1.0.17 exactly (it adjusts "
                       "private methods of that release to decode row events): pip install 'mysql-replication==1.0.17'")
    assert err.value.exit_code == 2


def test_install_refuses_another_release_before_it_replaces_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binlog_types, "_installed", False)
    monkeypatch.setattr(binlog_types, "version", lambda package: "2.0.0")
    key = (binlog_types._row_event.RowsEvent, "_RowsEvent__read_values_name")
    before = key[0].__dict__[key[1]]
    with pytest.raises(LibraryVersionError, match="mysql-replication is 2.0.0 here"):
        binlog_types.install()
    assert key[0].__dict__[key[1]] is before


@pytest.mark.parametrize("command", ["run", "stream", "snapshot"])
def test_the_commands_reading_the_binlog_refuse_another_release_at_start(tmp_path: Path, command: str) -> None:
    # another release installed ahead of the pinned one: its metadata is what importlib finds first
    dist = tmp_path / "mysql_replication-9.9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mysql-replication\nVersion: 9.9.9\n")
    shown = subprocess.run([sys.executable, "-m", "binlake", command, "--set", "source.port=1"], capture_output=True,
                           text=True, timeout=120, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, check=False)
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr.splitlines() == [(
        "binlake: mysql-replication is 9.9.9 here; binlake needs mysql-replication 1.0.17 exactly (it adjusts "
        "private methods of that release to decode row events): pip install 'mysql-replication==1.0.17'")]
