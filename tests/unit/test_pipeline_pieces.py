from __future__ import annotations

import pytest

from binlake.capture.context import Context
from binlake.config import load
from binlake.errors import ConfigError


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


def test_reads_at_once_never_share_a_server_id_and_are_served_in_turn() -> None:
    import threading
    import time

    ctx = Context(load(None, ["source.server-id=7000-7004", "snapshot.parallelism=2"]))
    held: list[int] = []
    lock = threading.Lock()
    clashes: list[int] = []
    order: list[str] = []

    def read(name: str, count: int) -> None:
        with ctx.readers(count) as ids:
            assert ids and len(ids) <= 2  # at most the reading slots, however many were asked
            with lock:
                clashes.extend(i for i in ids if i in held)
                held.extend(ids)
                order.append(name)
            time.sleep(0.05)
            with lock:
                for i in ids:
                    held.remove(i)

    threads = [threading.Thread(target=read, args=(f"r{n}", 1 + n % 3)) for n in range(12)]
    for t in threads:
        t.start()
        time.sleep(0.005)  # asked in this order
    for t in threads:
        t.join()
    assert clashes == []
    assert order == [f"r{n}" for n in range(12)]
    with ctx.readers(1) as ids:  # the stream's id is never lent
        assert ctx.cfg.server_ids.pick(0) not in ids


def test_planning_stores_small_tables_together_and_hands_each_over_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from binlake.capture import plan as planning
    from binlake.lake import split_state
    from binlake.splits import Split

    stored: list[list[str]] = []
    monkeypatch.setattr(split_state, "add_planned", lambda spark, path, splits: stored.append([s.id for s in splits]))
    monkeypatch.setattr(planning, "PLAN_BATCH", 4)
    monkeypatch.setattr(planning, "PLAN_FLUSH_SECONDS", 3600.0)
    handed: list[tuple[str, list[int] | None]] = []

    class Ctx:
        target = Context(load(None, [])).target

        def session(self) -> None:
            return None

    batches = planning._Batches(Ctx(), lambda table, whole: handed.append(
        (table, None if whole is None else [s.index for s in whole])))  # type: ignore[arg-type]
    for index in range(2):  # a small table, planned whole
        batches.add(Split("d.a", 1, index, None if index == 0 else ("5",), ("5",) if index == 0 else None, 2))
    batches.table_done("d.a", whole=True)
    batches.add(Split("d.b", 2, 7, ("9",), None, 2))  # the rest of a table a crash cut short
    batches.table_done("d.b", whole=False)
    assert stored == [] and handed == []  # three splits: under PLAN_BATCH, not stored yet
    batches.add(Split("d.c", 3, 0, None, ("3",), 2))
    batches.add(Split("d.c", 3, 1, ("3",), ("6",), 2))
    # planning cuts a big table's batch at a group boundary and hands over all but that table
    batches.hand_over(batches.store(), read=False)
    assert stored == [["d.a#0", "d.a#1", "d.b#7", "d.c#0", "d.c#1"]]
    assert handed == [("d.a", [0, 1]), ("d.b", None)]
    batches.add(Split("d.c", 3, 2, ("6",), None, 2))
    batches.table_done("d.c", whole=True)  # planned from 0, but not within one batch: not whole
    batches.flush()
    assert stored[-1] == ["d.c#2"] and handed[-1] == ("d.c", None)
