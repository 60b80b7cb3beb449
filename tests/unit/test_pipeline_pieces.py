from __future__ import annotations

import io

import pytest

from binlake.config import load
from binlake.errors import ConfigError
from binlake.capture.context import Context
from binlake.capture.snapshot import Progress


def test_each_concurrent_reader_gets_its_own_server_id() -> None:
    ctx = Context(load(None, ["source.server-id=7000-7004", "snapshot.parallelism=3"]))
    ids = ctx.reader_ids()
    assert ids == [7001, 7002, 7003]
    assert ctx.cfg.server_ids.pick(0) not in ids  # the stream's id


def test_too_few_server_ids_is_a_configuration_error_naming_the_option() -> None:
    ctx = Context(load(None, ["source.server-id=7000", "snapshot.parallelism=2"]))
    with pytest.raises(ConfigError, match="source.server-id") as err:
        ctx.reader_ids()
    assert err.value.exit_code == 2


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_chunks_rows_and_rate_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    out = Tty()
    monkeypatch.setattr("sys.stderr", out)
    p = Progress({"d.t": 10}, {"d.t": 2})
    p.update("d.t", 4, 1234)
    p.finish()
    text = out.getvalue()
    assert "d.t: chunks 6/10, rows 1,234" in text and "rows/s" in text
    assert "snapshot: 6 chunks, 1,234 rows" in text.splitlines()[-1]


def test_progress_is_silent_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    p = Progress({"d.t": 1}, {})
    p.update("d.t", 1, 5)
    p.finish()
    assert out.getvalue() == ""


def test_databricks_pipeline_refuses_a_table_without_a_unique_key() -> None:
    from binlake.databricks.pipeline_source import _define_table
    from binlake.schema import Column, TableSchema

    cols = (Column("g", "int", "int(11)", False), Column("v", "int", "int(11)"))
    keyless = TableSchema("d", "t", cols, (), ("g",), chunk_key_unique=False)
    assert keyless.multiset and keyless.key == ("g", "v")
    with pytest.raises(ConfigError, match=r"source.chunk-key for d.t is not unique"):
        _define_table(None, None, None, "d.t", keyless, 1)  # type: ignore[arg-type]
    unique = TableSchema("d", "t", cols, (), ("g",), chunk_key_unique=True)
    assert not unique.multiset and unique.key == ("g",)


def test_snapshot_batches_hold_at_most_batch_rows_and_about_batch_bytes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from binlake.spark import sources

    monkeypatch.setattr(sources, "BATCH_ROWS", 4)
    monkeypatch.setattr(sources, "BATCH_BYTES", 10)
    ids = [str(i) for i in range(10)]
    narrow = list(sources._parts([ids, ids], []))
    assert narrow == [(0, 4), (4, 8), (8, 10)]
    blobs = ["x" * 6, None, "x" * 3, "x" * 12, "", "x", "x" * 9, "x", "x", "x"]
    cut = list(sources._parts([ids, blobs], [1]))
    # every row once, in order; no batch over 4 rows; a batch passes 10 bytes only by its last row
    assert [r for b, e in cut for r in range(b, e)] == list(range(10))
    assert all(e - b <= 4 for b, e in cut)
    for b, e in cut:
        assert sum(len(v or "") for v in blobs[b:e - 1]) < 10
    assert cut == [(0, 4), (4, 7), (7, 8), (8, 10)]
