"""binlake's processes run Python's cycle collector less often and take Arrow's buffers from the
system's allocator (binlake.memory): the CLI and the Databricks entry points set both before they do
anything else, and leave a collector set higher, or turned off, and an allocator the user named, as
they were."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from binlake import cli, memory
from binlake.databricks import entrypoints

DEFAULT = (700, 10, 10)


@pytest.fixture(autouse=True)
def _process_as_started(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    kept, pool = gc.get_threshold(), pa.default_memory_pool()
    gc.set_threshold(*DEFAULT)
    monkeypatch.setenv(memory.ALLOCATOR, "")  # so that the variable is restored as it was, set or not
    monkeypatch.delenv(memory.ALLOCATOR)
    yield
    gc.set_threshold(*kept)
    pa.set_memory_pool(pool)


def test_the_cli_sets_the_thresholds_before_its_command(tmp_path: Path) -> None:
    code = cli.main(["config", "show", "-c", str(tmp_path / "absent.yml")])
    assert code != 0  # the command failed: the thresholds were set before it ran
    assert gc.get_threshold() == memory.THRESHOLDS


def test_an_entry_point_sets_the_thresholds_and_the_allocator() -> None:
    seen = []
    entrypoints._run("binlake-plan", lambda: seen.append((gc.get_threshold(), pa.default_memory_pool().backend_name)))
    assert seen == [(memory.THRESHOLDS, "system")]


@pytest.mark.parametrize("set_before", [(0, 10, 10), (100_000, 5, 5)])
def test_a_collector_turned_off_or_set_higher_stays(set_before: tuple[int, int, int]) -> None:
    gc.set_threshold(*set_before)
    memory.collect_less()
    assert gc.get_threshold() == set_before


def _allocator_after_the_cli(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    """In a process of its own, as a user starts it: Arrow's allocator after `binlake config show`
    (pyarrow imported only after it), and the one a process it starts finds."""
    code = ("import subprocess, sys\n"
            "from binlake import cli\n"
            f"cli.main(['config', 'show', '-c', {str(tmp_path / 'absent.yml')!r}])\n"
            "import pyarrow as pa\n"
            "child = subprocess.run([sys.executable, '-c', 'import pyarrow as pa; print(pa.default_memory_pool()"
            ".backend_name)'], capture_output=True, text=True, check=True).stdout.strip()\n"
            "print(pa.default_memory_pool().backend_name, child)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    here, child = out.stdout.split()
    return here, child


def test_the_cli_takes_arrows_buffers_from_the_system_for_itself_and_what_it_starts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != memory.ALLOCATOR}
    assert _allocator_after_the_cli(tmp_path, env) == ("system", "system")


def test_an_allocator_the_user_names_stays(tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if k != memory.ALLOCATOR}, memory.ALLOCATOR: "mimalloc"}
    assert _allocator_after_the_cli(tmp_path, env) == ("mimalloc", "mimalloc")


def test_a_process_with_pyarrow_imported_takes_its_buffers_from_the_system() -> None:
    pa.set_memory_pool(pa.mimalloc_memory_pool())  # as a Spark worker's pyarrow starts
    memory.arrow_from_system()
    assert pa.default_memory_pool().backend_name == "system"
    assert pa.array(range(1000)).buffers()[1] is not None and pa.system_memory_pool().bytes_allocated() > 0
