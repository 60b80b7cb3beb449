"""A table snapshotted again while the others keep their place: when it changed during its own
snapshot (a column added between two chunks, one dropped before a chunk's SELECT), when evolve meets
a change silver cannot follow in place, and by `binlake resnapshot`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from binlake.capture import snapshot as snapshot_step
from binlake.cli import main

from .capture import run_once, silver, write_config
from .helpers import execute, seq
from .test_schema_evolution import data_columns, lake_table, source_table


@pytest.mark.slow
def test_tables_changed_during_their_snapshot_are_snapshotted_again(dev_db, database, spark, tmp_path: Path,
                                                                    monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for t in ("a", "b"):
        execute(dev_db, database, f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, gone INT)",
                f"INSERT INTO {t} SELECT seq, seq, seq FROM {seq(1, 60)}")
    read_group, read_ahead = snapshot_step.read_group, snapshot_step.read_ahead
    groups: dict[str, int] = {}

    def read(schema: Any) -> None:
        groups[schema.table] = groups.get(schema.table, 0) + 1
        if groups[schema.table] == 1 and schema.table == "a":  # the next chunks' SELECTs lack w
            execute(dev_db, database, "ALTER TABLE a ADD COLUMN w INT DEFAULT 3", "UPDATE a SET w = 9 WHERE id > 40")
        if groups[schema.table] == 1 and schema.table == "b":  # the next chunk's SELECT fails
            execute(dev_db, database, "ALTER TABLE b DROP COLUMN gone", "UPDATE b SET v = -v WHERE id > 40")

    def then_change(ctx: Any, schema: Any, splits: Any, *rest: Any) -> Any:
        landed = read_group(ctx, schema, splits, *rest)
        read(schema)
        return landed

    def then_change_ahead(ctx: Any, schema: Any, splits: Any, *rest: Any) -> Any:
        rows = read_ahead(ctx, schema, splits, *rest)  # a group read while the one before lands
        if rows is not None:
            read(schema)
        return rows

    monkeypatch.setattr(snapshot_step, "read_group", then_change)
    monkeypatch.setattr(snapshot_step, "read_ahead", then_change_ahead)
    cfg_path = write_config(tmp_path / "binlake.yml", dev_db.running_port(), [f"{database}\\.(a|b)"],
                            tmp_path / "lake", "6350-6354", chunk_size=20, group_size=1)
    cfg = run_once(cfg_path)
    assert groups == {"a": 6, "b": 4}  # a read whole twice; b stopped at its second group, then read whole
    for t, names in (("a", ["id", "v", "gone", "w"]), ("b", ["id", "v"])):
        assert source_table(dev_db, database, t) == (names, lake_table(spark, cfg, f"{database}.{t}", names))
        assert data_columns(spark, cfg, f"{database}.{t}") == names


@pytest.mark.slow
def test_a_type_silver_cannot_widen_to_is_snapshotted_again_and_binlake_resnapshot_takes_one_table(
        dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    for t in ("ev", "other"):
        execute(dev_db, database, f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO {t} SELECT seq, seq FROM {seq(1, 30)}")
    cfg_path = write_config(tmp_path / "ev.yml", port, [f"{database}\\.(ev|other)"], tmp_path / "lake", "6355-6359",
                            chunk_size=20, group_size=2)
    cfg = run_once(cfg_path)
    execute(dev_db, database, "UPDATE ev SET v = 0 WHERE id = 1", "ALTER TABLE ev MODIFY v VARCHAR(20)",
            "UPDATE ev SET v = 'text' WHERE id = 2", "UPDATE other SET v = -v WHERE id < 5")

    run_once(cfg_path)  # int -> string: Delta cannot widen; evolve takes a fresh snapshot of ev alone
    assert dict(silver(spark, cfg, f"{database}.ev").dtypes)["v"] == "string"
    for t in ("ev", "other"):
        assert source_table(dev_db, database, t) == (["id", "v"], lake_table(spark, cfg, f"{database}.{t}", ["id", "v"]))

    execute(dev_db, database, "UPDATE other SET v = 100 WHERE id = 7", "UPDATE ev SET v = 'x' WHERE id = 3")
    assert main(["resnapshot", "-c", str(cfg_path), f"{database}.other"]) == 0
    assert len([p for p in (tmp_path / "lake" / "_binlake" / "resnapshot").iterdir()]) == 0  # intent carried out
    assert main(["resnapshot", "-c", str(cfg_path), f"{database}.nope"]) == 2  # not captured: a one-line error
    execute(dev_db, database, "UPDATE other SET v = 101 WHERE id = 8")
    run_once(cfg_path)
    for t in ("ev", "other"):
        assert source_table(dev_db, database, t) == (["id", "v"], lake_table(spark, cfg, f"{database}.{t}", ["id", "v"]))
