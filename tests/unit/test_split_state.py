"""The split state kept by either writer: delta-rs for a local lake, Spark where delta-rs cannot (a
lake behind a URI; here `BINLAKE_ARROW_ROWS=0`'s switch). Both answer the same, honour each other's
keyed appends (a retried plan is never written twice) and continue a table the other wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from binlake.lake import arrow_commit, split_state
from binlake.offsets import BinlogPosition
from binlake.splits import Split

HW = BinlogPosition("b.000001", 400)


def plan(table: str, number: int, count: int, first: int = 0, width: int = 10) -> list[Split]:
    """`count` splits of `table` from chunk `first`, `width` keys each, the 12th open (the table's last)."""
    return [Split(table, number, i, (i * width,) if i else None, ((i + 1) * width,) if i < 11 else None,
                  group_size=4) for i in range(first, first + count)]


def writer(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setattr(arrow_commit, "ARROW_ROWS", 0 if kind == "spark" else 50_000)


def fill(spark: Any, path: str, monkeypatch: pytest.MonkeyPatch, kinds: tuple[str, str]) -> None:
    """A split state planned by the first writer and carried on by the second."""
    writer(monkeypatch, kinds[0])
    split_state.ensure(spark, path)
    split_state.add_planned(spark, path, plan("d.a", 1, 6))
    split_state.add_planned(spark, path, plan("d.b", 2, 3))
    split_state.record(spark, path, [s.landed_at(HW, 10) for s in plan("d.a", 1, 5)])
    writer(monkeypatch, kinds[1])
    split_state.ensure(spark, path)  # there already: kept as it is
    # a retried batch, planned again over rows that changed meanwhile: written before, so skipped
    split_state.add_planned(spark, path, plan("d.a", 1, 6, width=7))
    split_state.add_planned(spark, path, plan("d.a", 1, 6, 6))
    split_state.record(spark, path, [s.landed_at(HW, 10).applied() for s in plan("d.a", 1, 4)])


def answers(spark: Any, path: str) -> tuple[Any, ...]:
    loaded = split_state.load(spark, path, 4)
    numbers, last = split_state.planned(spark, path)
    return (loaded, split_state.groups(spark, path, "done"), split_state.groups(spark, path, "landed"),
            numbers, {t: (s.index, s.end) for t, s in last.items()})


@pytest.mark.parametrize("kinds", [("delta-rs", "delta-rs"), ("spark", "spark"), ("spark", "delta-rs"),
                                   ("delta-rs", "spark")])
def test_either_writer_keeps_the_same_split_state(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  kinds: tuple[str, str]) -> None:
    path = str(tmp_path / "splits")
    fill(spark, path, monkeypatch, kinds)
    for reader in ("delta-rs", "spark"):
        writer(monkeypatch, reader)
        loaded, done, landed, numbers, last = answers(spark, path)
        assert [s.status for s in loaded["d.a"]] == ["done"] * 4 + ["landed", "planned"] + ["planned"] * 6, reader
        assert [s.index for s in loaded["d.a"]] == list(range(12)), reader
        assert [s.end for s in loaded["d.a"][4:6]] == [(50,), (60,)], reader  # the retry wrote nothing
        assert [s.status for s in loaded["d.b"]] == ["planned"] * 3
        assert loaded["d.a"][4].hw == HW and loaded["d.a"][4].rows == 10
        # groups of 4: d.a's first is done, its second landed in part, its third planned
        assert done == ({"d.a": [1_000_001, 1_000_002], "d.b": [2_000_000]}, {"d.a": (12, 5), "d.b": (3, 0)})
        assert landed[0] == {"d.a": [1_000_001, 1_000_002], "d.b": [2_000_000]}
        assert numbers == {"d.a": 1, "d.b": 2}
        assert last == {"d.a": (11, None), "d.b": (2, (30,))}


def test_a_local_split_state_is_written_by_delta_rs(spark: Any, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    path = str(tmp_path / "splits")
    split_state.ensure(spark, path)
    split_state.add_planned(spark, path, plan("d.a", 1, 3))
    history = DeltaTable(path).history()
    assert [h.get("engineInfo", "") for h in history if h["operation"] == "WRITE"][0].startswith("delta-rs")
    assert DeltaTable(path).transaction_version("binlake-plan-1-d.a") == 0
