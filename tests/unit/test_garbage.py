"""binlake's processes run Python's cycle collector less often (binlake.garbage): the CLI and the
Databricks entry points set the thresholds before they do anything else, and leave a collector set
higher, or turned off, as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from binlake import cli, garbage
from binlake.databricks import entrypoints

DEFAULT = (700, 10, 10)


@pytest.fixture(autouse=True)
def _thresholds() -> Iterator[None]:
    kept = gc.get_threshold()
    gc.set_threshold(*DEFAULT)
    yield
    gc.set_threshold(*kept)


def test_the_cli_sets_the_thresholds_before_its_command(tmp_path: Path) -> None:
    code = cli.main(["config", "show", "-c", str(tmp_path / "absent.yml")])
    assert code != 0  # the command failed: the thresholds were set before it ran
    assert gc.get_threshold() == garbage.THRESHOLDS


def test_an_entry_point_sets_the_thresholds() -> None:
    seen = []
    entrypoints._run("binlake-plan", lambda: seen.append(gc.get_threshold()))
    assert seen == [garbage.THRESHOLDS]


@pytest.mark.parametrize("set_before", [(0, 10, 10), (100_000, 5, 5)])
def test_a_collector_turned_off_or_set_higher_stays(set_before: tuple[int, int, int]) -> None:
    gc.set_threshold(*set_before)
    garbage.collect_less()
    assert gc.get_threshold() == set_before
