"""The cluster tests' parts, one of each for the session: a SeaweedFS S3 server and a standalone
Spark cluster (tests/cluster/parts.py). `make setup-cluster` builds what they need; without it every
test here fails, naming the step.

Each test runs on one server a day, the other the next (the day's server of the slow tests'
rotation, `DAY_SERVER`): on both, the suite took 35 minutes here, which with `make test` would pass
CI's limit. BINLAKE_TEST_CLUSTER_SERVERS names the servers to run them on instead (`make
test-cluster-all`: both)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ..conftest import DAY_SERVER, _server
from .parts import S3, Cluster, missing_tools, seaweedfs, standalone_cluster

CLUSTER_SERVERS = {s for s in os.environ.get("BINLAKE_TEST_CLUSTER_SERVERS", "").split(",") if s} or {DAY_SERVER}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        server = _server(item)
        if item.nodeid.startswith("tests/cluster/") and server is not None and server not in CLUSTER_SERVERS:
            item.add_marker(pytest.mark.skip(reason=f"cluster test on {server}: not its day (runs when "
                                                    f"BINLAKE_TEST_CLUSTER_SERVERS includes {server})"))


@pytest.fixture(scope="session")
def tools() -> None:
    missing = missing_tools()
    if missing:
        pytest.fail(missing)


@pytest.fixture(scope="session")
def s3(tools: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    with seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture(scope="session")
def spark_cluster(tools: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster

