"""A private MariaDB or MySQL server for the demo and the tests: own data directory, 127.0.0.1, binlog on.

`binlake dev-db start` installs `mariadb-server` with apt-get when `mariadbd` is missing, initialises
`.binlake/mariadb` (ignored by git) and starts the server on a free port with the binlog settings the
algorithm needs. Starting a running server is a no-op; `stop` shuts it down cleanly.

`--server mysql` runs MySQL 9.7 from the private root `make setup` installs (Debian unstable's
`mysql-server-core` in `.venv/share/binlake/mysql-root`). Its binaries need that root's newer C
library, so `mysqld` runs through the root's own dynamic loader, with no chroot.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pymysql

from binlake.errors import ConfigError, RuntimeFailure

BINLOG_SETTINGS = (
    "--log-bin=mysql-bin",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
)
MYSQL_GTIDS = ("--gtid-mode=ON", "--enforce-gtid-consistency=ON")


def _find(binary: str) -> str | None:
    return shutil.which(binary) or next(
        (str(p) for p in (Path("/usr/sbin") / binary, Path("/usr/bin") / binary) if p.exists()), None
    )


def ensure_installed() -> str:
    """Path of mariadbd, installing the Debian package when it is missing."""
    found = _find("mariadbd")
    if found:
        return found
    if os.geteuid() != 0:
        raise ConfigError(
            "mariadbd is not installed; binlake's dev-db needs it: run sudo apt-get install -y mariadb-server"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "mariadb-server", "mariadb-client"]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(f"apt-get install mariadb-server failed: {done.stderr.strip()[-300:]}")
    found = _find("mariadbd")
    if not found:
        raise ConfigError("mariadbd is still missing after apt-get; install mariadb-server by hand")
    return found


Server = Literal["mariadb", "mysql"]


def mysql_root() -> Path:
    return Path(os.environ.get("BINLAKE_MYSQL_ROOT") or Path(sys.prefix) / "share" / "binlake" / "mysql-root")


def mysqld_command() -> list[str]:
    """How to run the private root's mysqld from outside that root: its loader, its libraries."""
    root = mysql_root()
    mysqld = root / "usr" / "sbin" / "mysqld"
    if not mysqld.exists():
        raise ConfigError(f"MySQL is not installed in {root}; binlake's MySQL dev-db needs it: run make setup "
                          "(as root once), or point BINLAKE_MYSQL_ROOT at a root with usr/sbin/mysqld")
    return root_program(mysqld)


def root_program(program: Path) -> list[str]:
    """How to run a program of the private root (mysqld, mysqlbinlog) from outside it: through the
    root's own loader, with the root's libraries."""
    root = mysql_root()
    return [str(root / "lib64" / "ld-linux-x86-64.so.2"), "--library-path",
            str(root / "usr" / "lib" / "x86_64-linux-gnu"), str(program)]


def mysql_files() -> tuple[str, ...]:
    """Where the private root keeps what mysqld would look for under /usr."""
    share = mysql_root() / "usr" / "share" / "mysql"
    return (f"--basedir={mysql_root() / 'usr'}", f"--lc-messages-dir={share}",
            f"--character-sets-dir={share / 'charsets'}", f"--plugin-dir={mysql_root() / 'usr/lib/mysql/plugin'}")


def _alive(pid: int) -> bool:
    """A process that runs: a server this process started and that has died stays a zombie until reaped."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: its parent reaps it
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _ended(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class DevDb:
    """One private server: `datadir` holds the data, the binlog, the socket, the pid and the port."""

    datadir: Path = field(default_factory=lambda: Path(".binlake/mariadb"))
    port: int | None = None
    server_id: int = 1
    binlog: bool = True
    extra_options: tuple[str, ...] = ()
    server: Server = "mariadb"
    env: dict[str, str] = field(default_factory=dict)  # added to mysqld's environment (LD_PRELOAD in tests)

    def __post_init__(self) -> None:
        self.datadir = Path(self.datadir).resolve()

    @property
    def socket_path(self) -> Path:
        return self.datadir / "mysqld.sock"

    @property
    def pid_path(self) -> Path:
        return self.datadir / "mysqld.pid"

    @property
    def port_path(self) -> Path:
        return self.datadir / "binlake.port"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None

    def running_port(self) -> int | None:
        if self.pid() is None or not self.port_path.exists():
            return None
        return int(self.port_path.read_text())

    @property
    def data_path(self) -> Path:
        """The server's own data directory: MySQL's --initialize wants one it creates itself."""
        return self.datadir / "data" if self.server == "mysql" else self.datadir

    def _initialise(self) -> None:
        if (self.data_path / "mysql").is_dir():
            return
        self.datadir.mkdir(parents=True, exist_ok=True)
        if self.server == "mysql":
            self._initialise_mysql()
            return
        install = _find("mariadb-install-db") or _find("mysql_install_db")
        if install is None:
            raise ConfigError("mariadb-install-db is missing; run apt-get install -y mariadb-server")
        cmd = [install, f"--datadir={self.datadir}", "--auth-root-authentication-method=normal",
               "--skip-test-db", "--no-defaults"]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        # its own temporary folder, as the server's (`--tmpdir`): a starting server removes every `#sql*`
        # file in its tmpdir, so two installs at once in /tmp (the tests' two workers) removed each
        # other's temporary tables, and one failed
        self.tmp_path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TMPDIR": str(self.tmp_path)})
        if done.returncode != 0:
            raise RuntimeFailure(f"mariadb-install-db failed in {self.datadir}: {done.stderr.strip()[-400:]}")

    def _initialise_mysql(self) -> None:
        # --initialize makes root@localhost only, which a TCP client from 127.0.0.1 is not under
        # --skip-name-resolve
        init = self.datadir / "init.sql"
        init.write_text("CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY '';\n"
                        "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n")
        cmd = [*mysqld_command(), "--no-defaults", "--initialize-insecure", f"--datadir={self.data_path}",
               f"--init-file={init}", *mysql_files()]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeFailure(f"mysqld --initialize-insecure failed in {self.datadir}: {done.stderr.strip()[-400:]}")

    @property
    def tmp_path(self) -> Path:
        """The server's own temporary folder: servers sharing /tmp clash on the names of their temporary tables."""
        return self.datadir.with_name(self.datadir.name + ".tmp")

    def _command(self, port: int, log: Path) -> list[str]:
        self.tmp_path.mkdir(parents=True, exist_ok=True)
        common = [
            f"--socket={self.socket_path}", f"--tmpdir={self.tmp_path}", f"--pid-file={self.pid_path}",
            f"--port={port}",
            "--bind-address=127.0.0.1", f"--server-id={self.server_id}", "--skip-name-resolve",
            f"--log-error={log}", "--innodb-buffer-pool-size=512M", "--max-allowed-packet=1G",
            "--max-connections=500", "--character-set-server=utf8mb4",
            "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0",
        ]
        if self.server == "mysql":
            # MySQL keeps its default collation (utf8mb4_0900_ai_ci, NO PAD): binlake must follow it
            return [*mysqld_command(), "--no-defaults", f"--datadir={self.data_path}", *mysql_files(),
                    *common, "--secure-file-priv=", "--mysqlx=OFF", "--innodb-redo-log-capacity=512M",
                    # GTIDs stay on without a binlog too (MySQL keeps them in mysql.gtid_executed): a
                    # server without log_bin then differs from a ready one in log_bin alone
                    *(BINLOG_SETTINGS if self.binlog else ("--skip-log-bin",)), *MYSQL_GTIDS,
                    *self.extra_options]
        return [ensure_installed(), "--no-defaults", f"--datadir={self.datadir}", *common,
                "--collation-server=utf8mb4_general_ci", "--innodb-log-file-size=256M",
                *(BINLOG_SETTINGS if self.binlog else ()), *self.extra_options]

    def start(self, timeout: float = 60.0) -> int:
        """Start the server (no-op when running); returns its port."""
        port = self.running_port()
        if port is not None:
            return port
        self._initialise()
        port = self.port or free_port()
        log = self.datadir / "mysqld.log"
        cmd = self._command(port, log)
        if os.geteuid() == 0:
            cmd.append("--user=root")
        self.port_path.write_text(str(port))
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                pymysql.connect(host="127.0.0.1", port=port, user="root", password="", connect_timeout=2).close()
                return port
            except pymysql.err.OperationalError:
                time.sleep(0.2)
        tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
        raise RuntimeFailure(f"{self.label} in {self.datadir} did not accept connections on port {port} within "
                             f"{timeout:.0f}s; log tail: {tail}")

    @property
    def label(self) -> str:
        return "MySQL" if self.server == "mysql" else "MariaDB"

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM, a clean shutdown; SIGKILL if it has not ended within `timeout` seconds."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        if not _ended(pid, timeout):
            self.kill()

    def kill(self, timeout: float = 60.0) -> None:
        """SIGKILL, as a crash would: no shutdown, so the next start runs the server's crash recovery."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        if not _ended(pid, timeout):
            raise RuntimeFailure(f"{self.label} (pid {pid}) outlived SIGKILL by {timeout:.0f}s")
        self.pid_path.unlink(missing_ok=True)

    def status(self) -> str:
        port = self.running_port()
        if port is None:
            return f"stopped (datadir {self.datadir})"
        return f"running on 127.0.0.1:{port} (pid {self.pid()}, datadir {self.datadir})"

    def connect(self, database: str | None = None, **kw: object) -> pymysql.connections.Connection:
        port = self.running_port()
        if port is None:
            raise RuntimeFailure(f"dev-db in {self.datadir} is not running; run binlake dev-db start")
        return pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                               autocommit=True, charset="utf8mb4", **kw)  # type: ignore[arg-type]
