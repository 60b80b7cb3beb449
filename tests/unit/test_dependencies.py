"""The wheel's metadata names ranges, requirements.lock the exact set: every requirement of
pyproject.toml (and of each extra) is met by the lock's pin, nothing in the lock is unpinned, and only
the two releases binlake must match exactly are exact in the metadata."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parents[2]
# mysql-replication: binlog_types patches one release's private methods; delta-spark: its JVM jar
# (scripts/setup.sh's DELTA_VERSION) must be the same release
EXACT = {"mysql-replication", "delta-spark"}


def requirements() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return {group: [Requirement(r) for r in reqs] for group, reqs in groups.items()}


def lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==(\S+)", line.strip())
            assert m, f"requirements.lock: {line!r} is not an exact pin"
            pins[canonicalize_name(m[1])] = m[3]
    return pins


def test_the_lock_meets_every_range_of_the_metadata() -> None:
    pins = lock()
    for group, reqs in requirements().items():
        for req in reqs:
            name = canonicalize_name(req.name)
            assert name in pins, f"{req} ({group}) is not in requirements.lock"
            assert req.specifier.contains(pins[name], prereleases=True), (group, str(req), pins[name])


def test_only_what_must_match_exactly_is_exact_in_the_metadata() -> None:
    for group, reqs in requirements().items():
        for req in reqs:
            exact = any(s.operator in ("==", "===") for s in req.specifier)
            assert exact == (canonicalize_name(req.name) in EXACT), (group, str(req))


def test_setup_installs_the_lock_and_the_delta_jar_of_the_same_release() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "-r requirements.lock" in setup and "--no-deps -e ." in setup and "^uv==" in setup
    (jar,) = re.findall(r"^DELTA_VERSION=(\S+)$", setup, re.MULTILINE)
    assert lock()["delta-spark"] == jar


def test_bench_only_packages_are_in_the_bench_extra() -> None:
    groups = {g: {canonicalize_name(r.name) for r in reqs} for g, reqs in requirements().items()}
    assert {"psutil", "matplotlib"} <= groups["bench"]
    assert not {"psutil", "matplotlib"} & (groups["dependencies"] | groups["local"] | groups["dev"])
    assert "databricks-bundles" in groups["dev"] and "databricks-bundles" not in groups["local"]
