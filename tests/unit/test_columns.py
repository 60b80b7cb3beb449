"""source.columns without a server: the setting as written, the checks that refuse a list, and what a
list does to a table's schema changes (a change that touches only columns left out changes nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake import config
from binlake.columns import ColumnChoice
from binlake.errors import ConfigError
from binlake.lake.evolution import alter_ops, by_shape, by_statement
from binlake.offsets import BinlogPosition
from binlake.schema import Column, TableSchema
from binlake.source.schema_changes import Guard, ShapeColumn, TableShape, shape_difference

EXCLUDE = ColumnChoice("exclude", ("ssn", "Notes"))


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> config.Config:
    path = tmp_path / "binlake.yml"
    path.write_text(text)
    return config.load(path, env=env or {})


def test_include_and_exclude_lists_are_read_from_the_file_the_environment_and_set(tmp_path: Path) -> None:
    cfg = load(tmp_path, "source:\n  columns: {shop.customers: {exclude: [ssn, notes]}, "
                         "shop.orders: {include: [id, total]}}\n")
    assert cfg.column_choices == {"shop.customers": ColumnChoice("exclude", ("ssn", "notes")),
                                  "shop.orders": ColumnChoice("include", ("id", "total"))}
    cfg = load(tmp_path, "", {"BINLAKE_SOURCE_COLUMNS": "{shop.orders: {include: [id, 'no']}}"})
    assert cfg.column_choices == {"shop.orders": ColumnChoice("include", ("id", "no"))}
    assert config.load(None, ["source.columns="], env={}).column_choices == {}
    assert config.load(None, [], env={}).column_choices == {}


@pytest.mark.parametrize("text, pattern", [
    ("source:\n  columns: {shop.orders: {include: [id], exclude: [ssn]}}\n",
     (r"^source\.columns for shop\.orders has include and exclude; binlake needs one list per table, include or "
      r"exclude: keep one of them for shop\.orders$")),
    ("source:\n  columns: {shop.orders: [id]}\n",
     (r"^source\.columns is \{'shop\.orders': \['id'\]\} in .*; binlake needs a mapping of 'db\.table' to "
      r"\{include: \[columns\]\} or \{exclude: \[columns\]\}")),
    ("source:\n  columns: {shop.orders: {only: [id]}}\n", r"^source\.columns is .* binlake needs a mapping"),
    ("source:\n  columns: {shop.orders: {}}\n", r"^source\.columns is .* binlake needs a mapping"),
    ("source:\n  columns: [a]\n", r"^source\.columns is \['a'\] .* binlake needs a mapping"),
])
def test_a_list_that_cannot_be_read_is_refused_in_one_line(tmp_path: Path, text: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as caught:
        load(tmp_path, text)
    assert "\n" not in caught.value.message


def test_a_list_naming_an_unknown_column_or_leaving_out_the_key_is_refused_naming_it() -> None:
    columns = ["id", "name", "ssn", "notes"]
    assert EXCLUDE.refusal("shop.c", columns, ("id",)) is None
    assert ColumnChoice("include", ("ID", "name")).refusal("shop.c", columns, ("id",)) is None  # as MySQL: any case
    assert ColumnChoice("exclude", ("sn",)).refusal("shop.c", columns, ("id",)) == (
        "source.columns for shop.c names column 'sn', which the table does not have; binlake needs columns of "
        "shop.c (id, name, notes, ssn): fix the exclude list")
    assert ColumnChoice("include", ("name",)).refusal("shop.c", columns, ("id",)) is None  # the key comes along
    assert ColumnChoice("exclude", ("name", "id")).refusal("shop.c", columns, ("id",)) == (
        "source.columns for shop.c leaves out key column 'id'; binlake always captures the primary key and the "
        "chunk key: take id out of the exclude list")


def test_a_choice_keeps_its_columns_and_survives_a_schema_record() -> None:
    assert [n for n in ("id", "name", "SSN", "notes") if EXCLUDE.keeps(n)] == ["id", "name"]
    include = ColumnChoice("include", ("total",))
    assert [n for n in ("id", "total", "new") if include.keeps(n)] == ["total"]
    schema = TableSchema("d", "t", (Column("id", "int", "int"),), ("id",), choice=include)
    assert schema.keeps("id") and schema.keeps("total") and not schema.keeps("new")  # the key always
    assert TableSchema.from_dict(schema.to_dict()) == schema
    assert "choice" not in TableSchema("d", "t", (), ("id",)).to_dict()  # records without a list stay as they were


INT = Column("id", "int", "int(11)", False, in_key=True)
NAME = Column("name", "varchar", "varchar(10)")
SCHEMA = TableSchema("d", "t", (INT, NAME), ("id",), choice=EXCLUDE)  # columns ssn and notes left out
AT = BinlogPosition("b.000001", 400)


def shape(*names_types: tuple[str, int]) -> TableShape:
    return TableShape("d.t", tuple(ShapeColumn(n, t) for n, t in names_types), "b.000001", 400)


def test_a_table_map_with_or_without_the_columns_left_out_fits_the_schema() -> None:
    assert shape_difference(SCHEMA, shape(("id", 3), ("name", 15), ("ssn", 15), ("notes", 252))) is None
    assert shape_difference(SCHEMA, shape(("id", 3), ("name", 15))) is None  # notes and ssn dropped
    assert shape_difference(SCHEMA, shape(("id", 3), ("name", 15), ("ssn", 3))) is None  # ssn retyped
    assert shape_difference(SCHEMA, shape(("id", 3), ("name", 15), ("w", 3))) == "columns added: w"
    new, _renames, defaults = by_shape(SCHEMA, shape(("id", 3), ("ssn", 3), ("name", 15), ("w", 3)), None, {})
    assert new.names == ["id", "name", "w"] and defaults == {"w": None} and new.choice == EXCLUDE


def test_an_alter_of_columns_left_out_only_changes_nothing_downstream() -> None:
    now = SCHEMA  # the server, as load_schema gives it under the same list
    for statement in ("ALTER TABLE t ADD COLUMN notes TEXT", "ALTER TABLE t DROP COLUMN ssn",
                      "ALTER TABLE t MODIFY ssn BIGINT", "ALTER TABLE t RENAME COLUMN ssn TO notes"):
        assert by_statement(SCHEMA, alter_ops(statement), now, {}) is None, statement
    guard = Guard({"d.t": SCHEMA}, lambda name: now)
    guard.check(shape(("id", 3), ("name", 15), ("ssn", 3)))  # no SchemaChangedError
    # a column renamed to a name the list leaves out leaves the capture
    renamed = TableSchema("d", "t", (INT,), ("id",), choice=EXCLUDE)
    new, renames, _ = by_statement(SCHEMA, alter_ops("ALTER TABLE t RENAME COLUMN name TO ssn"), renamed, {})
    assert new.names == ["id"] and renames == {}
