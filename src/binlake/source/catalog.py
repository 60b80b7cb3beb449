"""The captured tables of the source and their schemas."""

from __future__ import annotations

import dataclasses
import re

import pymysql
import pymysql.cursors

from binlake.columns import ColumnChoice
from binlake.config import Config
from binlake.errors import ConfigError, RuntimeFailure
from binlake.schema import Column, TableSchema

SYSTEM_DATABASES = {"mysql", "information_schema", "performance_schema", "sys"}


def captured_tables(conn: pymysql.connections.Connection, patterns: list[str]) -> list[tuple[str, str]]:
    """Base tables whose `db.table` fully matches one of the regexes, in name order."""
    compiled = [re.compile(p) for p in patterns]
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME"
        )
        rows = cur.fetchall()
    return [
        (db, t) for db, t in rows
        if db not in SYSTEM_DATABASES and any(p.fullmatch(f"{db}.{t}") for p in compiled)
    ]


def matches(patterns: list[str], database: str, table: str) -> bool:
    return database not in SYSTEM_DATABASES and any(re.fullmatch(p, f"{database}.{table}") for p in patterns)


def load_schema(
    conn: pymysql.connections.Connection, database: str, table: str, chunk_keys: dict[str, list[str]] | None = None,
    choice: ColumnChoice | None = None, strict: bool = True, row_filter: str | None = None,
) -> TableSchema:
    """The table's schema, its columns as `choice` (`source.columns`) selects them. `strict` refuses
    a list naming a column the table does not have, or leaving out a key column (at the table's first
    capture); without it (the table as it is after a schema change) such names are passed over."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, NUMERIC_SCALE, "
            "DATETIME_PRECISION, CHARACTER_MAXIMUM_LENGTH, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        cols = tuple(
            Column(
                name=r["COLUMN_NAME"], data_type=r["DATA_TYPE"].lower(), column_type=r["COLUMN_TYPE"].lower(),
                nullable=r["IS_NULLABLE"] == "YES",
                precision=int(r["NUMERIC_PRECISION"]) if r["NUMERIC_PRECISION"] is not None else None,
                scale=int(r["NUMERIC_SCALE"]) if r["NUMERIC_SCALE"] is not None else None,
                fraction=int(r["DATETIME_PRECISION"] or 0),
                length=int(r["CHARACTER_MAXIMUM_LENGTH"]) if r["CHARACTER_MAXIMUM_LENGTH"] is not None else None,
                collation=r["COLLATION_NAME"],
            )
            for r in cur.fetchall()
        )
        if not cols:
            raise RuntimeFailure(f"table {database}.{table} does not exist or has no columns visible to this user")
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (database, table),
        )
        pk = tuple(r["COLUMN_NAME"] for r in cur.fetchall())
        cur.execute(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND NON_UNIQUE = 0",
            (database, table),
        )
        unique: dict[str, set[str]] = {}
        for r in cur.fetchall():
            unique.setdefault(r["INDEX_NAME"], set()).add(r["COLUMN_NAME"])
    name = f"{database}.{table}"
    configured = tuple((chunk_keys or {}).get(name, ()))
    cols = tuple(dataclasses.replace(c, in_key=True) if c.name in pk or c.name in configured else c for c in cols)
    names = {c.name for c in cols}
    for k in configured:
        if k not in names:
            raise ConfigError(
                f"source.chunk-key for {name} names column {k!r}, which the table does not have; "
                f"set it to columns of {name}: {', '.join(sorted(names))}"
            )
        if next(c for c in cols if c.name == k).nullable:
            raise ConfigError(
                f"source.chunk-key column {name}.{k} is NULLable; binlake needs NOT NULL chunk-key columns: "
                "choose NOT NULL columns or ALTER the column"
            )
    if not pk and not configured:
        raise ConfigError(
            f"table {name} has no primary key; binlake needs a chunk key: set source.chunk-key "
            f"{{'{name}': [NOT NULL columns]}} or add a primary key"
        )
    # the chunk key identifies a row if a UNIQUE index over NOT NULL columns lies within it (a UNIQUE
    # index admits any number of rows with a NULL in it)
    nullable = {c.name for c in cols if c.nullable}
    key_unique = any(idx <= set(configured) and not idx & nullable for idx in unique.values())
    if choice is not None:
        why = choice.refusal(name, [c.name for c in cols], (*pk, *configured)) if strict else None
        if why:
            raise ConfigError(why)
        cols = tuple(c for c in cols if c.in_key or choice.keeps(c.name))
    return TableSchema(database, table, cols, pk, configured, bool(configured) and key_unique, choice, row_filter)


def load_captured(conn: pymysql.connections.Connection, cfg: Config, database: str, table: str,
                  strict: bool = True) -> TableSchema:
    """A captured table's schema as the configuration takes it: its `source.chunk-key`, its
    `source.columns` list and its `source.row-filter`. The run loads each table through here, and so
    does `binlake check`, so that the check refuses exactly what a run would (`strict` as for
    `load_schema`: true at the table's first capture)."""
    name = f"{database}.{table}"
    return load_schema(conn, database, table, cfg.get("source.chunk-key"), cfg.column_choices.get(name),
                       strict=strict, row_filter=cfg.get("source.row-filter").get(name))
