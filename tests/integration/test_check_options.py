"""`binlake check` against the capture options, on real MariaDB and MySQL servers: each option a run
would refuse is one line naming the setting and the table, exit code 2, before anything runs.

One database per test holds `customers` and `orders` (primary keys), `log` (no primary key; its
chunk key `ts` is not unique) and `audit`, which the pattern does not capture. The row filters are
tried on the test session's Spark; the passing case runs before the first of them, so that where no
other test of the process started Spark it starts (and stops) its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from binlake import cli, config
from binlake.commands.check import check
from binlake.lake.evolution import History
from binlake.lake.target import Target
from binlake.source.catalog import load_captured
from binlake.source.connection import connect

ACCOUNT = r"'[^']+'@'[^']*'"


@pytest.fixture(autouse=True)
def no_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads BINLAKE_* variables; a developer's exported ones must not change these tests."""
    for section, keys in config.SCHEMA.items():
        for key in keys:
            monkeypatch.delenv(f"BINLAKE_{section}_{key}".upper().replace("-", "_").replace(".", "_"), raising=False)


@pytest.fixture
def shop(dev_db: Any, database: str) -> str:
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE customers (id INT PRIMARY KEY, email VARCHAR(80), name VARCHAR(50), tenant INT)")
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, customer_id INT, total DECIMAL(12,2))")
        cur.execute("CREATE TABLE log (ts INT NOT NULL, msg VARCHAR(50))")
        cur.execute("CREATE TABLE audit (id INT PRIMARY KEY, note VARCHAR(50))")
    return database


def overrides(dev_db: Any, db: str, lake: Path, *more: str) -> list[str]:
    """--set values: the shop's three captured tables, `log` chunked by `ts`, and `more`."""
    return [f"source.port={dev_db.running_port()}", f"source.tables={db}\\.(customers|orders|log)",
            f"source.chunk-key={{{db}.log: [ts]}}", f"target.path={lake}", *more]


def problems(dev_db: Any, db: str, lake: Path, *more: str) -> list[str]:
    return check(config.load(None, overrides(dev_db, db, lake, *more), env={})).problems


def test_options_that_fit_pass(dev_db: Any, shop: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = shop
    args = overrides(dev_db, db, tmp_path / "lake",
                     f"source.columns={{{db}.customers: {{exclude: [EMAIL]}}, {db}.orders: {{include: [total]}}}}",
                     f"source.row-filter={{{db}.customers: 'tenant = 7 AND name IS NOT NULL', {db}.orders: 'total > 10'}}")
    code = cli.main(["check", *(a for o in args for a in ("--set", o))])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert (f"capture options ok: source.columns ({db}.customers, {db}.orders), source.row-filter "
            f"({db}.customers, {db}.orders) fit the captured tables") in out.splitlines()


def test_a_list_naming_a_column_the_table_does_not_have(dev_db: Any, shop: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    db = shop
    args = overrides(dev_db, db, tmp_path / "lake", f"source.columns={{{db}.customers: {{include: [id, nmae]}}}}")
    code = cli.main(["check", *(a for o in args for a in ("--set", o))])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"source.columns for {db}.customers names column 'nmae', which the table does not have; binlake needs "
        f"columns of {db}.customers (email, id, name, tenant): fix the include list"]


def test_a_list_leaving_out_a_key_column(dev_db: Any, shop: str, tmp_path: Path) -> None:
    db = shop
    columns = f"source.columns={{{db}.customers: {{exclude: [email, ID]}}, {db}.log: {{exclude: [ts]}}}}"
    assert problems(dev_db, db, tmp_path / "lake", columns) == [
        f"source.columns for {db}.customers leaves out key column 'id'; binlake always captures the primary key "
        "and the chunk key: take id out of the exclude list",
        f"source.columns for {db}.log leaves out key column 'ts'; binlake always captures the primary key and the "
        "chunk key: take ts out of the exclude list",
    ]


def test_a_list_is_checked_at_the_tables_first_capture_only(dev_db: Any, shop: str, tmp_path: Path) -> None:
    # as in the run: a column a captured table's list names may have been dropped since
    db, lake = shop, tmp_path / "lake"
    columns = f"source.columns={{{db}.customers: {{exclude: [email, ssn]}}}}"
    assert len(problems(dev_db, db, lake, columns)) == 1
    cfg = config.load(None, overrides(dev_db, db, lake, columns), env={})
    conn = connect(cfg.connection())
    try:
        schema = load_captured(conn, cfg, db, "customers", strict=False)
    finally:
        conn.close()
    History(Target.of(cfg).captured_schema(schema.name)).start(schema)
    assert problems(dev_db, db, lake, columns) == []


@pytest.mark.parametrize("option", ["source.columns", "source.row-filter"])
def test_an_option_naming_a_table_not_captured(dev_db: Any, shop: str, tmp_path: Path, option: str) -> None:
    db = shop
    given = "{exclude: [note]}" if option == "source.columns" else "'id > 0'"
    found = problems(dev_db, db, tmp_path / "lake", f"{option}={{{db}.audit: {given}, {db}.custmers: {given}}}")
    assert found[0] == (f"{option} names table {db}.audit, which source.tables ['{db}\\\\.(customers|orders|log)'] "
                        f"does not capture; binlake applies {option} to captured tables only: add it to "
                        f"source.tables, or take it out of {option}")
    assert re.fullmatch(f"{option} names table {db}.custmers, which is no table {ACCOUNT} can see on the server; "
                        f"binlake applies {option} to captured tables only: fix the name \\({db}.customers\\?\\), "
                        f"or take it out of {option}", found[1]), found[1]
    assert len(found) == 2, found


@pytest.mark.parametrize(
    ("predicate", "why"),
    [
        ("tenant = = 7", r"\(\[PARSE_SYNTAX_ERROR\] .*\)"),
        ("tenat = 7", r"\(\[UNRESOLVED_COLUMN\.WITH_SUGGESTION\] .*`tenat`.*\)"),
        ("email = 'a@b'", r"\(\[UNRESOLVED_COLUMN\.WITH_SUGGESTION\] .*`email`.*\)"),  # left out by source.columns
        ("name", "a string value, not true or false"),
    ],
    ids=["syntax", "unknown-column", "column-left-out", "not-boolean"],
)
def test_a_row_filter_spark_cannot_evaluate(dev_db: Any, shop: str, tmp_path: Path, spark: Any,
                                            predicate: str, why: str) -> None:
    db = shop
    found = problems(dev_db, db, tmp_path / "lake", f"source.columns={{{db}.customers: {{exclude: [email]}}}}",
                     f"source.row-filter={{{db}.customers: \"{predicate}\"}}")
    assert len(found) == 1, found
    head = re.escape(f"source.row-filter for {db}.customers is {predicate!r}")
    tail = re.escape("; binlake needs one Spark SQL predicate over the table's captured columns (id, name, tenant), "
                     "like tenant_id = 7: fix the predicate")
    assert re.fullmatch(f"{head},? {why}{tail}", found[0]), found[0]


def test_a_table_without_a_unique_key(dev_db: Any, shop: str, tmp_path: Path, spark: Any) -> None:
    # log's chunk key lets it be captured (check once refused it for want of a primary key), but its
    # identical rows are only counted: no row filter, no soft deletes
    db, lake = shop, tmp_path / "lake"
    assert problems(dev_db, db, lake) == []
    found = problems(dev_db, db, lake, f"source.row-filter={{{db}.log: 'ts > 0'}}")
    assert len(found) == 1, found
    assert found[0].startswith(f"source.row-filter for {db}.log: the table has no unique key, ")
    found = problems(dev_db, db, lake, "silver.deletes=soft")
    assert len(found) == 1, found
    assert found[0].startswith(f"{db}.log has no unique key (no primary key, and its source.chunk-key is not a "
                               "UNIQUE NOT NULL index), and silver.deletes: soft, silver.history: 1 needs one")
