"""The command line itself: `--version`, and `-v` before or after the command."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest

from binlake import cli


def binlake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "binlake", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_version_prints_the_installed_package_version() -> None:
    shown = binlake("--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"binlake {version('binlake')}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["-v", "status", "--json"],
        ["status", "-v", "--json"],
        ["status", "--json", "--verbose"],
        ["-v", "dev-db", "status"],
        ["dev-db", "status", "-v"],
    ],
)
def test_verbose_before_or_after_the_command(argv: list[str]) -> None:
    assert cli.build_parser().parse_args(argv).verbose is True


@pytest.mark.parametrize("argv", [["status"], ["dev-db", "status"], ["config", "show"]])
def test_not_verbose_unless_asked(argv: list[str]) -> None:
    assert cli.build_parser().parse_args(argv).verbose is False


@pytest.mark.parametrize("argv", [["-v", "config", "show"], ["config", "show", "-v"]])
def test_verbose_after_the_command_logs_each_step(argv: list[str]) -> None:
    # the level main sets up, in a process of its own (pytest's log capture owns this one's root logger)
    code = ("import logging, sys; from binlake import cli; cli.main(sys.argv[1:]); "
            "print(logging.getLevelName(logging.getLogger().level), file=sys.stderr)")
    shown = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                           check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.strip().splitlines()[-1] == "INFO"
