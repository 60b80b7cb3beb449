"""The cluster tests' parts, one of each for the session: a SeaweedFS S3 server and a standalone
Spark cluster (tests/cluster/parts.py). `make setup-cluster` builds what they need; without it every
test here fails, naming the step."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .parts import S3, Cluster, missing_tools, seaweedfs, standalone_cluster


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

