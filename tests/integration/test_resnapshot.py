"""A table snapshotted again while the others keep their place: when it changed during its own
snapshot (a column added between two chunks, one dropped before a chunk's SELECT), when evolve meets
a change silver cannot follow in place, and by `binlake resnapshot`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from binlake import pipeline
from binlake.cli import main
from binlake.errors import SchemaChangedError

from .capture import run_once, silver, with_stream, write_config
from .helpers import execute
from .test_schema_evolution import data_columns, lake_table, source_table


def test_tables_changed_during_their_snapshot_are_snapshotted_again(dev_db, database, spark, tmp_path: Path,
                                                                    monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for t in ("a", "b"):
        execute(dev_db, database, f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, gone INT)",
                f"INSERT INTO {t} SELECT seq, seq, seq FROM seq_1_to_60")
    read_group = pipeline.read_group
    groups: dict[str, int] = {}

    def then_change(ctx: Any, schema: Any, splits: Any, ids: Any) -> Any:
        landed = read_group(ctx, schema, splits, ids)
        groups[schema.table] = groups.get(schema.table, 0) + 1
        if groups[schema.table] == 1 and schema.table == "a":  # the next chunks' SELECTs lack w
            execute(dev_db, database, "ALTER TABLE a ADD COLUMN w INT DEFAULT 3", "UPDATE a SET w = 9 WHERE id > 40")
        if groups[schema.table] == 1 and schema.table == "b":  # the next chunk's SELECT fails
            execute(dev_db, database, "ALTER TABLE b DROP COLUMN gone", "UPDATE b SET v = -v WHERE id > 40")
        return landed

    monkeypatch.setattr(pipeline, "read_group", then_change)
    cfg_path = write_config(tmp_path / "binlake.yml", dev_db.running_port(), [f"{database}\\.(a|b)"],
                            tmp_path / "lake", "6350-6354", chunk_size=10, group_size=1)
    cfg = run_once(cfg_path)
    assert groups == {"a": 12, "b": 7}  # a read whole twice; b stopped at its second group, then read whole
    for t, names in (("a", ["id", "v", "gone", "w"]), ("b", ["id", "v"])):
        assert source_table(dev_db, database, t) == (names, lake_table(spark, cfg, f"{database}.{t}", names))
        assert data_columns(spark, cfg, f"{database}.{t}") == names


def test_a_type_silver_cannot_widen_to_evolve_snapshots_again_lenient_stops_and_resnapshot_mends(
        dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    for t in ("ev", "le"):
        execute(dev_db, database, f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_30")
    execute(dev_db, database, "CREATE TABLE other (id INT PRIMARY KEY, v INT)", "INSERT INTO other VALUES (1, 1)")
    ev = write_config(tmp_path / "ev.yml", port, [f"{database}\\.ev"], tmp_path / "lake_ev", "6355-6359",
                      chunk_size=20, group_size=2)
    le = with_stream(write_config(tmp_path / "le.yml", port, [f"{database}\\.(le|other)"], tmp_path / "lake_le",
                                  "6360-6364", chunk_size=20, group_size=2), schema_changes="lenient")
    cfg_ev, cfg_le = run_once(ev), run_once(le)
    for t in ("ev", "le"):
        execute(dev_db, database, f"UPDATE {t} SET v = 0 WHERE id = 1", f"ALTER TABLE {t} MODIFY v VARCHAR(20)",
                f"UPDATE {t} SET v = 'text' WHERE id = 2")
    execute(dev_db, database, "UPDATE other SET v = 2")

    run_once(ev)  # int -> string: Delta cannot widen; evolve takes a fresh snapshot of the table
    assert source_table(dev_db, database, "ev") == (["id", "v"], lake_table(spark, cfg_ev, f"{database}.ev", ["id", "v"]))
    assert dict(silver(spark, cfg_ev, f"{database}.ev").dtypes)["v"] == "string"

    with pytest.raises(SchemaChangedError, match=rf"binlake resnapshot {database}\.le"):
        run_once(le)
    assert main(["resnapshot", "-c", str(le), f"{database}.le"]) == 0
    assert main(["resnapshot", "-c", str(le), f"{database}.nope"]) == 2  # not captured: a one-line error
    run_once(le)
    for t in ("le", "other"):
        assert source_table(dev_db, database, t) == (["id", "v"], lake_table(spark, cfg_le, f"{database}.{t}", ["id", "v"]))
