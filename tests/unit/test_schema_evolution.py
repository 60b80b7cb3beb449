"""Schema versions without a server: what an ALTER statement does to columns, the version a statement
or a row event's table map starts, the recorded history and what silver holds under each policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.errors import SchemaChangedError
from binlake.lake.evolution import Evolver, History, Version, alter_ops, by_shape, by_statement, from_table_map, version_at
from binlake.offsets import BinlogPosition
from binlake.schema import Column, TableSchema
from binlake.source.schema_changes import ShapeColumn, TableShape, column_difference

INT = Column("id", "int", "int(11)", False)


def table(*columns: Column, key: tuple[str, ...] = ("id",)) -> TableSchema:
    return TableSchema("d", "t", (INT, *columns), key)


def col(name: str, data_type: str = "int", column_type: str | None = None) -> Column:
    return Column(name, data_type, column_type or data_type)


@pytest.mark.parametrize("statement, ops", [
    ("ALTER TABLE t ADD COLUMN w INT DEFAULT 7", [("add", "w", "w")]),
    ("alter table `d`.`t` add (a int, `b c` varchar(9) default 'x,y'), drop column if exists z",
     [("add", "a", "a"), ("add", "b c", "b c"), ("drop", "z", "z")]),
    ("ALTER TABLE t CHANGE v w BIGINT, CHANGE COLUMN x x TEXT, MODIFY y DOUBLE", [("rename", "v", "w"),
                                                                               ("modify", "x", "x"),
                                                                               ("modify", "y", "y")]),
    ("ALTER TABLE t RENAME COLUMN `a``b` TO c", [("rename", "a`b", "c")]),
    ("ALTER TABLE t ADD INDEX i (v), RENAME INDEX i TO j, ALTER COLUMN v SET DEFAULT 1, ENGINE=InnoDB", []),
    ("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)", [("key", "", ""), ("key", "", "")]),
    ("ALTER TABLE t RENAME TO u", [("table", "", "")]),
    ("/* c */ ALTER ONLINE TABLE t WAIT 5 DROP w", [("drop", "w", "w")]),
    ("CREATE TABLE t (id INT)", []),
])
def test_alter_ops_names_each_column_operation(statement: str, ops: list[tuple[str, str, str]]) -> None:
    assert alter_ops(statement) == ops


def test_a_statement_takes_definitions_from_the_server_and_keeps_renamed_data_under_the_new_name() -> None:
    old = table(col("v"), col("s", "varchar", "varchar(10)"), col("gone"))
    now = table(col("v", "bigint"), col("label", "varchar", "varchar(10)"), col("w"))
    new, renames, defaults = by_statement(
        old, alter_ops("ALTER TABLE t RENAME COLUMN s TO label, MODIFY v BIGINT, DROP gone, ADD w INT DEFAULT 7"),
        now, {"w": "7", "v": None})
    assert new.names == ["id", "v", "label", "w"] and new.column("v").data_type == "bigint"
    assert renames == {"s": "label"} and defaults == {"w": "7"}
    # a column added by this statement and gone from the server by now is left to the rows' table maps
    assert by_statement(old, alter_ops("ALTER TABLE t ADD x INT"), now, {}) is None
    # nothing that touches columns: no version
    assert by_statement(old, alter_ops("ALTER TABLE t MODIFY v INT COMMENT 'c'"), old, {}) is None


def test_a_key_that_changes_or_a_table_that_left_cannot_be_followed_in_place() -> None:
    old = table(col("v"))
    with pytest.raises(SchemaChangedError, match="primary key or chunk key changed"):
        by_statement(old, alter_ops("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)"),
                     table(col("v"), key=("id", "v")), {})
    with pytest.raises(SchemaChangedError, match="primary key or chunk key changed"):
        by_statement(old, alter_ops("ALTER TABLE t RENAME COLUMN id TO ident"), None or table(col("v")), {})
    with pytest.raises(SchemaChangedError, match="is gone after ALTER TABLE"):
        by_statement(old, alter_ops("ALTER TABLE t ADD w INT"), None, {})
    with pytest.raises(SchemaChangedError, match="no primary key"):
        by_statement(table(col("v"), key=()), alter_ops("ALTER TABLE t ADD w INT"), table(col("v"), col("w"), key=()), {})


def shape(*columns: ShapeColumn) -> TableShape:
    return TableShape("d.t", (ShapeColumn("id", 3), *columns), "mysql-bin.000002", 500, BinlogPosition("mysql-bin.000002", 400))


def test_a_table_map_types_columns_the_server_no_longer_has() -> None:
    old = table(col("v"))
    new, renames, defaults = by_shape(old, shape(ShapeColumn("v", 3), ShapeColumn("w", 246, precision=12, scale=3),
                                                 ShapeColumn("b", 252, binary=True),
                                                 ShapeColumn("t", 18, fsp=3)), table(col("v")), {})
    assert [(c.name, c.spark_type()) for c in new.columns] == [
        ("id", "int"), ("v", "int"), ("w", "decimal(12,3)"), ("b", "binary"), ("t", "timestamp_ntz")]
    assert renames == {} and defaults == {"w": None, "b": None, "t": None}
    for got in (ShapeColumn("x", 8, unsigned=True), ShapeColumn("x", 16, bits=5), ShapeColumn("x", 254, binary=True),
                ShapeColumn("x", 248, set_values=("a", "b")), ShapeColumn("x", 11, fsp=2)):
        made = from_table_map(got)
        assert made is not None and column_difference(made, got) is None, got
    assert from_table_map(ShapeColumn("g", 255)) is None


def test_history_records_each_version_once_and_tells_the_one_in_effect(tmp_path: Path) -> None:
    history = History(tmp_path / "t.json")
    base = table(col("v"))
    history.start(base)
    at = [BinlogPosition("mysql-bin.000002", p) for p in (900, 400)]
    v1 = Version("d.t", at[0], table(col("v"), col("w")), renames={}, defaults={"w": "7"})
    v0 = Version("d.t", at[1], table(col("v"), col("x")))
    history.record([v1])
    history.record([v0, Version("d.t", at[0], table())])  # the one at 900 is kept as first recorded
    versions = history.versions()
    assert [v.at for v in versions] == [None, at[1], at[0]] and versions[2] == v1
    assert version_at(versions, BinlogPosition("mysql-bin.000002", 100)).at is None
    assert version_at(versions, BinlogPosition("mysql-bin.000002", 900)) == v1
    assert version_at(versions, BinlogPosition("mysql-bin.000003", 4)) == v1
    assert history.latest() == v1.schema


def test_the_reader_reuses_a_recorded_version_whatever_the_server_says_now() -> None:
    base = table(col("v"))
    at = BinlogPosition("mysql-bin.000002", 400)
    recorded = Version("d.t", at, table(col("v"), col("w")), defaults={"w": "7"})
    asked: list[str] = []

    def now(name: str) -> TableSchema:
        asked.append(name)
        return table(col("v"), col("w"), col("later"))  # the server is past a later change

    evolver = Evolver({"d.t": [Version("d.t", None, base), recorded]}, BinlogPosition("mysql-bin.000002", 4), now,
                      lambda name: {}, lambda name, at: True)
    assert evolver.schema("d.t") == base
    assert evolver.on_statement("d.t", "alter", "ALTER TABLE t ADD w INT DEFAULT 7", at) == recorded
    assert asked == [] and evolver.schema("d.t") == recorded.schema
    # rows that fit need no version; a TRUNCATE is a version of its own with the same columns
    assert evolver.on_shape(shape(ShapeColumn("v", 3), ShapeColumn("w", 3)), at) is None
    cut = evolver.on_statement("d.t", "truncate", "TRUNCATE t", BinlogPosition("mysql-bin.000002", 800))
    assert cut is not None and cut.kind == "truncate" and cut.schema == recorded.schema
    # starting past the recorded version: it is the one in effect
    later = Evolver({"d.t": [Version("d.t", None, base), recorded]}, BinlogPosition("mysql-bin.000003", 4), now,
                    lambda name: {}, lambda name, at: True)
    assert later.schema("d.t") == recorded.schema


def test_silver_columns_under_each_policy_and_which_types_widen() -> None:
    from pyspark.sql import types as T

    from binlake.lake.evolve import _widens, silver_columns

    at = [BinlogPosition("mysql-bin.000002", p) for p in (400, 900)]
    versions = [Version("d.t", None, table(col("v"), col("s", "varchar", "varchar(9)"))),
                Version("d.t", at[0], table(col("v", "bigint"), col("label", "varchar", "varchar(9)")),
                        renames={"s": "label"}),
                Version("d.t", at[1], table(col("label", "varchar", "varchar(9)"), col("w")), defaults={"w": "3"})]
    assert silver_columns("evolve", versions).names == ["id", "label", "w"]
    lenient = silver_columns("lenient", versions)
    assert lenient.names == ["id", "v", "s", "label", "w"] and lenient.column("v").data_type == "bigint"
    with pytest.raises(SchemaChangedError, match="column 'v' .* is now bigint"):
        silver_columns("ignore", versions)
    assert silver_columns("ignore", [versions[0], Version("d.t", at[0], table(col("s", "varchar", "varchar(99)")))]) \
        == versions[0].schema
    assert _widens(T.IntegerType(), T.LongType()) and _widens(T.FloatType(), T.DoubleType())
    assert _widens(T.DecimalType(10, 2), T.DecimalType(12, 3)) and _widens(T.IntegerType(), T.DecimalType(12, 2))
    assert not _widens(T.LongType(), T.IntegerType()) and not _widens(T.DecimalType(10, 2), T.DecimalType(10, 3))
    assert not _widens(T.IntegerType(), T.StringType()) and not _widens(T.StringType(), T.BinaryType())


def test_a_statement_names_columns_in_any_case() -> None:
    old = table(col("Value"))
    now = table(col("Label"))
    new, renames, _ = by_statement(old, alter_ops("ALTER TABLE t CHANGE value LABEL INT"), now, {})
    assert new.names == ["id", "Label"] and renames == {"Value": "Label"}
    new, _, _ = by_statement(old, alter_ops("ALTER TABLE t DROP VALUE"), table(), {})
    assert new.names == ["id"]
