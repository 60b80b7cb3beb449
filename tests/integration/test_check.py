"""`binlake check` against real MariaDB and MySQL servers: every way a source can be unready, one line each.

Privilege cases run on the shared test server (they only add and drop their own accounts). Cases that
change global server state run on private servers of the same kind in a temporary directory, because
other tests (and other test runs) stream from the shared server's binlog and would see a
STATEMENT-format binlog.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from binlake import cli, config
from binlake.commands.devdb import BINLOG_SETTINGS, DevDb, Server, free_port
from binlake.source.validation import SourceFacts, check, problems

# Distinctive, so that finding it in any output is certainly a leak.
PASSWORD = "Kx7-binlake-Pw!q2"


@pytest.fixture(autouse=True)
def no_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads BINLAKE_* variables; a developer's exported ones must not change these tests."""
    for section, keys in config.SCHEMA.items():
        for key in keys:
            monkeypatch.delenv(f"BINLAKE_{section}_{key}".upper().replace("-", "_").replace(".", "_"), raising=False)


def cfg_for(port: int | None, user: str = "root", password: str = "",
            tables: list[str] | None = None) -> config.Config:
    overrides = [f"source.port={port}", f"source.username={user}", f"source.password={password}",
                 "source.connect-timeout=3"]
    if tables:
        overrides.append(f"source.tables={','.join(tables)}")
    return config.load(None, overrides, env={})


def run_fix(db: DevDb, line: str) -> None:
    """Execute the SQL fix a problem line ends with, to prove the advice works."""
    fix = line.rsplit(": ", 1)[1]
    statement = re.match(r"(GRANT .*|SET GLOBAL \w+='\w+')", fix)
    assert statement, f"no runnable fix in {line!r}"
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute(statement.group(1))


@contextmanager
def private_server(datadir: Path, server: Server, *options: str, binlog: bool = True) -> Iterator[DevDb]:
    db = DevDb(datadir=datadir, server_id=7, binlog=binlog, extra_options=options, server=server)
    db.start()
    try:
        yield db
    finally:
        db.stop()


@pytest.fixture(scope="module")
def scratch_db(dev_db: DevDb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevDb]:
    with private_server(tmp_path_factory.mktemp(f"check-{dev_db.server}") / "db", dev_db.server) as db:
        yield db


@pytest.fixture(scope="module")
def spare_datadir(dev_db: DevDb, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data directory for the servers started with odd options, initialised once, used in turn."""
    return tmp_path_factory.mktemp(f"check-spare-{dev_db.server}") / "db"


@pytest.fixture
def captured(dev_db: DevDb, database: str) -> list[str]:
    """Two tables in a fresh database, and the source.tables pattern that captures them."""
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total DECIMAL(12,2))")
        cur.execute("CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(50))")
    return [rf"{database}\..*"]


@pytest.fixture
def make_user(dev_db: DevDb) -> Iterator[Callable[..., str]]:
    """Create an account with exactly the given GRANT clauses; every account is dropped afterwards."""
    made: list[str] = []

    def make(*grants: str) -> str:
        name = f"bl_{uuid.uuid4().hex[:8]}"
        with dev_db.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{name}'@'%%' IDENTIFIED BY %s", (PASSWORD,))
            made.append(name)
            for grant in grants:
                cur.execute(f"GRANT {grant} TO '{name}'@'%'")
        return name

    yield make
    with dev_db.connect() as conn, conn.cursor() as cur:
        for name in made:
            cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")


def client_privilege(db: DevDb) -> str:
    """REPLICATION CLIENT under the name the server prints: MariaDB 10.5+ calls it BINLOG MONITOR."""
    return "BINLOG MONITOR" if db.server == "mariadb" else "REPLICATION CLIENT"


def assert_no_secret(*outputs: object) -> None:
    for out in outputs:
        assert PASSWORD not in str(out)


def test_ready_server_passes(dev_db: DevDb, captured: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    port = dev_db.running_port()
    assert check(cfg_for(port, tables=captured)) == []

    code = cli.main(["check", "--set", f"source.port={port}", "--set", f"source.tables={captured[0]}"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.startswith("source ok:")


@pytest.mark.parametrize(
    ("variable", "bad", "good"),
    [
        ("binlog_format", "STATEMENT", "ROW"),
        ("binlog_format", "MIXED", "ROW"),
        ("binlog_row_image", "MINIMAL", "FULL"),
        ("binlog_row_metadata", "MINIMAL", "FULL"),
    ],
)
def test_binlog_variable_not_as_needed(scratch_db: DevDb, variable: str, bad: str, good: str) -> None:
    cfg = cfg_for(scratch_db.running_port())
    with scratch_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SET GLOBAL {variable}='{bad}'")
        try:
            found = check(cfg)
            assert len(found) == 1, found
            assert found[0].startswith(f"{variable} is {bad}; binlake needs {good}: ")
            assert f"SET GLOBAL {variable}='{good}'" in found[0]
            run_fix(scratch_db, found[0])
            assert check(cfg) == []
        finally:
            cur.execute(f"SET GLOBAL {variable}='{good}'")


def test_log_bin_off(dev_db: DevDb, spare_datadir: Path) -> None:
    # the other binlog settings as needed, so log_bin is the only thing wrong
    with private_server(spare_datadir, dev_db.server, *BINLOG_SETTINGS[1:], binlog=False) as db:
        expected = ("log_bin is OFF; binlake needs ON: start the server with log_bin=mysql-bin in its config "
                    "(it cannot be set at runtime)")
        assert check(cfg_for(db.running_port())) == [expected]


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ("10.4.99-MariaDB-log", "server version is MariaDB 10.4.99; binlake needs MariaDB 10.5 or later"),
        ("5.7.44-log", "server version is MySQL 5.7.44; binlake needs MySQL 8.0 or later"),
        ("8.0.36", None),
    ],
    ids=["mariadb-10.4", "mysql-5.7", "mysql-8.0"],
)
def test_server_version(dev_db: DevDb, spare_datadir: Path, reported: str, expected: str | None) -> None:
    # MariaDB reports whatever --version says, which lets a real server pose as an older one.
    if dev_db.server != "mariadb":
        pytest.skip("only MariaDB's --version sets the version a server reports (MySQL's prints it, exits)")
    with private_server(spare_datadir, dev_db.server, f"--version={reported}") as db:
        found = check(cfg_for(db.running_port()))
    # a MariaDB posing as MySQL lacks MySQL's gtid_mode, which the check rightly names too
    assert [line for line in found if line.startswith("server version")] == (
        [f"{expected}: upgrade the server"] if expected else [])


def test_gtid_mode_off_on_mysql(scratch_db: DevDb) -> None:
    if scratch_db.server != "mysql":
        pytest.skip("MariaDB has no gtid_mode: its chunk reads settle by its committed binlog end, not GTIDs")
    cfg = cfg_for(scratch_db.running_port())
    steps = ["ON_PERMISSIVE", "OFF_PERMISSIVE", "OFF"]
    with scratch_db.connect() as conn, conn.cursor() as cur:
        try:
            for mode in steps:  # gtid_mode moves one step at a time
                cur.execute(f"SET GLOBAL gtid_mode='{mode}'")
            found = check(cfg)
            assert len(found) == 1, found
            assert found[0].startswith("gtid_mode is OFF; binlake needs ON for its exact chunk read on MySQL")
            assert "SET GLOBAL gtid_mode to OFF_PERMISSIVE, ON_PERMISSIVE and" in found[0]
            assert "gtid_mode=ON and enforce_gtid_consistency=ON in the server config" in found[0]
        finally:
            for mode in [*reversed(steps[:-1]), "ON"]:
                cur.execute(f"SET GLOBAL gtid_mode='{mode}'")
    assert check(cfg) == []


def test_variable_missing_on_old_mysql() -> None:
    # No local server lacks binlog_row_metadata, so this rule is checked on hand-made facts.
    facts = SourceFacts(
        version="8.0.13",
        variables={"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "gtid_mode": "ON"},
        account="'cdc'@'%'",
        grants=("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`",),
        visible_tables=("shop.orders",),
    )
    expected = (
        "binlog_row_metadata does not exist on MySQL 8.0.13; binlake needs binlog_row_metadata=FULL, which "
        "MariaDB 10.5+ and MySQL 8.0.14+ have: upgrade the server, then SET GLOBAL "
        "binlog_row_metadata='FULL', put binlog_row_metadata=FULL in the server config "
        "and reconnect the writers"
    )
    assert problems(facts, [r"shop\..*"]) == [expected]


@pytest.mark.parametrize(
    ("grants", "missing"),
    [
        (["SELECT, REPLICATION CLIENT ON *.*"], "REPLICATION SLAVE"),
        (["SELECT, REPLICATION SLAVE ON *.*"], "REPLICATION CLIENT"),
        (["REPLICATION SLAVE, REPLICATION CLIENT ON *.*"], "SELECT"),
    ],
)
def test_missing_privilege(dev_db: DevDb, captured: list[str], make_user: Callable[..., str],
                           grants: list[str], missing: str) -> None:
    user = make_user(*grants)
    cfg = cfg_for(dev_db.running_port(), user, PASSWORD, captured)
    found = check(cfg)
    assert len(found) == 1, found
    assert found[0].startswith(f"privilege {missing} is missing: '{user}'@'%' has ")
    assert found[0].endswith(f"GRANT {missing} ON *.* TO '{user}'@'%'")
    assert_no_secret(found)
    run_fix(dev_db, found[0])
    assert check(cfg) == []


def test_privilege_names_that_only_look_alike(dev_db: DevDb, captured: list[str],
                                              make_user: Callable[..., str]) -> None:
    # REPLICATION SLAVE ADMIN and SLAVE MONITOR (MySQL: REPLICATION_SLAVE_ADMIN, REPLICATION_APPLIER)
    # contain the needed names but do not grant them
    if dev_db.server == "mariadb":
        user = make_user("SELECT, REPLICATION SLAVE ADMIN, SLAVE MONITOR, BINLOG ADMIN ON *.*")
    else:
        user = make_user("SELECT, REPLICATION_SLAVE_ADMIN, REPLICATION_APPLIER, BINLOG_ADMIN ON *.*")
    found = check(cfg_for(dev_db.running_port(), user, PASSWORD, captured))
    assert [line.split(" is missing")[0] for line in found] == [
        "privilege REPLICATION SLAVE", "privilege REPLICATION CLIENT"
    ]
    assert_no_secret(found)


@pytest.mark.parametrize(
    "grants",
    [
        ["ALL PRIVILEGES ON *.*"],
        ["REPLICATION SLAVE, {client} ON *.*", "SELECT ON `{db}`.*"],
        ["REPLICATION SLAVE, REPLICATION CLIENT ON *.*", "ALL PRIVILEGES ON `{db}`.*"],
        ["REPLICATION SLAVE, REPLICATION CLIENT ON *.*", "SELECT ON `{prefix}%`.*"],
        ["REPLICATION SLAVE, REPLICATION CLIENT ON *.*", "SELECT ON `{db}`.orders",
         "SELECT ON `{db}`.customers"],
    ],
)
def test_sufficient_grants(dev_db: DevDb, database: str, captured: list[str], make_user: Callable[..., str],
                           grants: list[str]) -> None:
    client = client_privilege(dev_db)
    user = make_user(*(g.format(db=database, prefix=database[:6], client=client) for g in grants))
    assert check(cfg_for(dev_db.running_port(), user, PASSWORD, captured)) == []


def test_select_missing_on_one_captured_table(dev_db: DevDb, database: str, captured: list[str],
                                              make_user: Callable[..., str]) -> None:
    # a column grant makes the table visible but does not let a chunk read every column
    user = make_user("REPLICATION SLAVE, REPLICATION CLIENT ON *.*", f"SELECT ON `{database}`.customers",
                     f"SELECT (id) ON `{database}`.orders")
    cfg = cfg_for(dev_db.running_port(), user, PASSWORD, captured)
    found = check(cfg)
    assert len(found) == 1, found
    assert found[0].startswith(f"privilege SELECT is missing on {database}.orders: '{user}'@'%' has ")
    assert_no_secret(found)
    run_fix(dev_db, found[0])
    assert check(cfg) == []


def test_select_only_on_another_database(dev_db: DevDb, captured: list[str],
                                         make_user: Callable[..., str]) -> None:
    user = make_user("REPLICATION SLAVE, REPLICATION CLIENT ON *.*", "SELECT ON `elsewhere`.*")
    found = check(cfg_for(dev_db.running_port(), user, PASSWORD, captured))
    assert len(found) == 1, found
    assert found[0].startswith(f"source.tables {captured} matches no table '{user}'@'%' can see")
    assert_no_secret(found)


def test_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # nothing listens there
    code = cli.main(["check", "--set", f"source.port={port}", "--set", "source.username=cdc_probe",
                     "--set", f"source.password={PASSWORD}", "--set", "source.connect-timeout=3"])
    out, err = capsys.readouterr()
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"cannot connect to source.hostname=127.0.0.1 source.port={port} as "
                               "source.username=cdc_probe (2003 ")
    assert_no_secret(out, err)


def test_wrong_password(dev_db: DevDb, make_user: Callable[..., str],
                        capsys: pytest.CaptureFixture[str]) -> None:
    user = make_user("SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.*")
    wrong = PASSWORD + "-wrong"
    code = cli.main(["check", "--set", f"source.port={dev_db.running_port()}",
                     "--set", f"source.username={user}", "--set", f"source.password={wrong}"])
    out, err = capsys.readouterr()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert "(1045 Access denied" in err and f"source.username={user}" in err
    assert_no_secret(out, err)


def test_cli_reports_one_line_and_exit_code_2(dev_db: DevDb, captured: list[str],
                                              make_user: Callable[..., str], tmp_path: Path) -> None:
    client = client_privilege(dev_db)
    user = make_user(f"SELECT, {client} ON *.*")
    cfg_file = tmp_path / "binlake.yml"
    cfg_file.write_text(
        "source:\n"
        "  hostname: 127.0.0.1\n"
        f"  port: {dev_db.running_port()}\n"
        f"  username: {user}\n"
        "  password: ${BINLAKE_SOURCE_PASSWORD}\n"
        f"  tables: ['{captured[0]}']\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_SOURCE_")}
    env["BINLAKE_SOURCE_PASSWORD"] = PASSWORD
    binlake = Path(sys.executable).with_name("binlake")
    done = subprocess.run([str(binlake), "check", "-c", str(cfg_file)], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    expected = (
        f"privilege REPLICATION SLAVE is missing: '{user}'@'%' has {client}, SELECT ON *.*; "
        f"binlake needs REPLICATION SLAVE ON *.* to read the binlog: "
        f"GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%'"
    )
    assert done.stderr.splitlines() == [expected]
    assert_no_secret(done.stdout, done.stderr)
