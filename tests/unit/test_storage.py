"""The lake's storage layer: the same calls on a local path (Python's file calls) and on a Hadoop URI
(Hadoop's FileSystem through the Spark session; `file:` here, `s3a://` in tests/cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.config import Config
from binlake.errors import ConfigError
from binlake.lake.storage import HadoopLocation, LocalLocation, is_local, location
from binlake.lake.target import Target


def roots(tmp_path: Path) -> list[str]:
    return [str(tmp_path / "local"), f"file:{tmp_path}/hadoop"]


@pytest.mark.parametrize("kind", ["local", "hadoop"])
def test_files_round_trip(spark, tmp_path: Path, kind: str) -> None:  # type: ignore[no-untyped-def]
    root = location(roots(tmp_path)[kind == "hadoop"])
    assert isinstance(root, HadoopLocation if kind == "hadoop" else LocalLocation)
    f = root / "_binlake" / "start.json"
    assert not f.exists() and not root.is_dir() and list(root.iterdir()) == []
    with pytest.raises(FileNotFoundError):
        f.read_text()
    f.write_text('{"a": 1}')
    f.write_text('{"a": 2}')  # replaced whole, no temporary file left beside it
    assert f.read_text() == '{"a": 2}' and f.exists() and f.parent.is_dir()
    assert [p.name for p in f.parent.iterdir()] == ["start.json"]
    # a first write wins; a second one leaves it as it was
    once = root / "_binlake" / "resnapshot" / "db__t"
    assert once.create_text("db.t") is True
    assert once.create_text("other") is False
    assert once.read_text() == "db.t"
    assert [p.name for p in (root / "_binlake").iterdir()] == ["resnapshot", "start.json"]
    once.unlink()
    once.unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError):
        once.unlink()
    (root / "_binlake").remove_tree()
    assert not f.exists()
    (root / "_binlake").remove_tree()  # gone already: nothing to do


def test_target_places_files_under_a_uri(tmp_path: Path) -> None:
    uri = Target(f"file:{tmp_path}/lake/")
    assert uri.silver("shop.orders").location == f"file:{tmp_path}/lake/silver/shop__orders"
    assert str(uri.stream_start) == f"file:{tmp_path}/lake/_binlake/start.json"
    assert isinstance(uri.captured_schema("shop.orders"), HadoopLocation)
    assert uri.spark_log.is_absolute() and not str(uri.spark_log).startswith("file:")
    local = Target(tmp_path / "lake")
    assert isinstance(local.stream_start, LocalLocation)
    assert local.spark_log == tmp_path / "lake" / "_binlake" / "spark.log"


def test_target_path_takes_a_uri_or_a_local_path(tmp_path: Path) -> None:
    def path(value: str) -> str:
        return Config({"target": {"path": value}}).target_path

    assert path("s3a://bucket/lake/") == "s3a://bucket/lake"
    assert path("abfss://c@account.dfs.core.windows.net/lake") == "abfss://c@account.dfs.core.windows.net/lake"
    assert path(str(tmp_path / "x" / ".." / "lake")) == str(tmp_path / "lake")
    assert not is_local("gs://b/lake") and not is_local("file:/tmp/lake") and is_local("/tmp/lake")
    with pytest.raises(ConfigError, match=r"^target.path is s3://bucket/lake; .* set target.path to s3a://bucket/lake$"):
        path("s3://bucket/lake")
