"""A lake on S3: `target.path: s3a://…` on a real S3 server (SeaweedFS), binlake under spark-submit.
Snapshot and stream under concurrent writers, a restart that streams on from the checkpoint in the
bucket; then silver, read from the bucket by delta-rs, equals the source, and every file binlake keeps
beside its tables is an object in the bucket (none landed on the local disk)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.integration.workload import Writers, create_table, source_rows, write_config

from .parts import ROOT, S3, said, silver, submit, submit_command


def fs_selector(s3: S3, prefix: str) -> Any:
    from pyarrow import fs

    return fs.FileSelector(f"{s3.bucket}/{prefix}", recursive=True, allow_not_found=True)


def bucket_files(s3: S3, prefix: str) -> set[str]:
    """The objects under `prefix` in the bucket, by pyarrow's own S3 client."""
    from pyarrow import fs

    found = s3.store().get_file_info(fs_selector(s3, prefix))
    return {f.path.removeprefix(f"{s3.bucket}/{prefix}/") for f in found if f.type == fs.FileType.File}


def test_snapshot_stream_and_restart_with_the_lake_on_s3(dev_db, database, s3: S3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    rows = 3000
    create_table(port, database, rows)
    cfg = write_config(tmp_path / "binlake.yml", port, database, f"s3a://{s3.bucket}/{database}",  # type: ignore[arg-type]
                       chunk_size=400, group_size=2)
    command = submit_command("local[2]", tmp_path, "run", "-c", str(cfg), "--until-caught-up",
                             conf=s3.hadoop_conf(), s3=True)
    with Writers(port, database, rows, threads=1, pause=0.01):
        first = submit(command)
    assert first.returncode == 0, said(first)
    location = f"s3://{s3.bucket}/{database}"
    table = f"{database}__t"
    snapshot_rows = len(silver(f"{location}/bronze/{table}", s3.storage_options(), "_op = 'r'"))
    assert snapshot_rows >= rows * 3 // 4

    with Writers(port, database, rows, threads=1, pause=0.005) as more:
        while more.ops < 300:
            time.sleep(0.05)
    second = submit(command)  # the restart: streams on from the checkpoint in the bucket
    assert second.returncode == 0, said(second)

    assert silver(f"{location}/silver/{table}", s3.storage_options()) == source_rows(port, database)
    # no second snapshot: the restart found its split state, schemas and checkpoint in the bucket
    assert len(silver(f"{location}/bronze/{table}", s3.storage_options(), "_op = 'r'")) == snapshot_rows
    kept = bucket_files(s3, f"{database}/_binlake")
    expected = {"source.json", "gtids.json", "stream.json", f"schemas/{table}.json", "checkpoint/binlake-stream-id"}
    assert expected <= kept, kept
    assert not any(name.endswith(".tmp") for name in kept), kept
    assert not list(ROOT.glob("s3a*")) and not list(tmp_path.glob("s3a*"))


def test_storage_calls_on_s3(s3: S3, tmp_path: Path) -> None:
    """Each call of the storage layer on a real S3 server: a write replaces an object whole (no
    temporary object left), a first write is a conditional put that the second loses, and of six
    first writes started together exactly one wins (a look before the write would let several)."""
    command = submit_command("local[1]", tmp_path, conf=s3.hadoop_conf(), s3=True)
    command[-1] = str(Path(__file__).with_name("storage_calls.py"))  # in place of binlake's launcher
    done = submit([*command, f"s3a://{s3.bucket}/storage-calls"])
    assert done.returncode == 0, said(done)
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("STORAGE ")]
    assert json.loads(line.removeprefix("STORAGE ")) == {
        "before": False, "replaced": "two", "first": True, "second": False, "kept": "first",
        "race": [True] * 5, "names": ["intents", "race", "start.json"], "is_dir": True, "unlinked": True,
        "removed": True}
    assert not s3.store().get_file_info(fs_selector(s3, "storage-calls"))
