#!/usr/bin/env bash
# Installs everything binlake needs on a Debian/Ubuntu machine: the MariaDB server and client
# library (apt), MySQL 9.7 in a private root (Debian's unstable suite; BINLAKE_SKIP_MYSQL=1 leaves it
# out, as `make demo` does), a virtualenv with binlake and the Python stack of requirements.lock, and
# the Delta jars (Maven).
# Idempotent: every step is skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/quiet.sh

DELTA_VERSION=4.4.0
DELTA_ARTIFACT=delta-spark_4.2_2.13
VENV=.venv
JARS="$VENV/share/binlake/jars"

need_apt=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need_apt+=(mariadb-server)
command -v mariadb-binlog >/dev/null 2>&1 || need_apt+=(mariadb-client)
[ -f /usr/include/mariadb/mysql.h ] || need_apt+=(libmariadb-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
# debootstrap only builds MySQL's private root (below)
[ -n "${BINLAKE_SKIP_MYSQL:-}" ] || command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] ||
  need_apt+=(debootstrap)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "binlake setup: missing ${need_apt[*]}; run as root: sudo apt-get install -y ${need_apt[*]}" >&2
    exit 2
  fi
  echo "binlake setup: apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${need_apt[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && apt-get install -y -q "${need_apt[@]}" >/dev/null; }
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
stamp="$VENV/.binlake-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements.lock -nt "$stamp" ]; then
  echo "binlake setup: installing Python packages into $VENV (requirements.lock)"
  # the exact versions binlake is tested with; pyproject.toml's ranges are what the wheel asks of others.
  # uv (itself in the lock) downloads and installs them in parallel: pip alone took minutes longer.
  "$VENV/bin/pip" install -q "$(grep '^uv==' requirements.lock)"
  "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -r requirements.lock
  "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --no-deps -e .
  touch "$stamp"
fi

if [ ! -f "$JARS/$DELTA_ARTIFACT-$DELTA_VERSION.jar" ]; then
  echo "binlake setup: fetching Delta $DELTA_VERSION jars from Maven Central"
  mkdir -p "$JARS"
  # Maven's own client reaches Central where Spark's Ivy resolver may not; Spark itself provides
  # Scala, Hadoop and Parquet, so only Delta's own two jars go on the classpath.
  for a in "$DELTA_ARTIFACT" delta-storage; do
    quiet "$VENV/maven.log" mvn -q -B dependency:copy -Dartifact="io.delta:$a:$DELTA_VERSION" \
      -DoutputDirectory="$JARS" -Dmdep.overWriteIfNewer=true
  done
fi
# MySQL 9.7 LTS for the tests and `binlake dev-db --server mysql`. Debian 12 has no MySQL; Debian's
# unstable suite has mysql-server-core, whose binaries need its newer C library, so it goes into a
# minimal root of its own. mysqld runs from there through that root's own dynamic loader, with no
# chroot: the system's packages and sources stay untouched.
MYSQL_ROOT="$VENV/share/binlake/mysql-root"
if [ ! -x "$MYSQL_ROOT/usr/sbin/mysqld" ] && [ -z "${BINLAKE_SKIP_MYSQL:-}" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "binlake setup: MySQL's private root needs root once: sudo make setup (or set BINLAKE_SKIP_MYSQL=1)" >&2
    exit 2
  fi
  echo "binlake setup: installing MySQL 9.7 into $MYSQL_ROOT (debootstrap sid, about a minute)"
  rm -rf "$MYSQL_ROOT.partial"
  mkdir -p "$(dirname "$MYSQL_ROOT")"
  /usr/sbin/debootstrap --variant=minbase sid "$MYSQL_ROOT.partial" >"$VENV/mysql-root.log" 2>&1 || {
    echo "binlake setup: debootstrap sid failed; see $VENV/mysql-root.log" >&2; exit 1; }
  chroot "$MYSQL_ROOT.partial" apt-get install -y -q --no-install-recommends mysql-server-core \
    mysql-client-core >>"$VENV/mysql-root.log" 2>&1 || {
    echo "binlake setup: apt-get install mysql-server-core in the sid root failed; see $VENV/mysql-root.log" >&2
    exit 1; }
  chroot "$MYSQL_ROOT.partial" apt-get clean >/dev/null 2>&1 || true
  mv "$MYSQL_ROOT.partial" "$MYSQL_ROOT"
fi

# Spark and Delta's classes, pre-parsed for the JVM: a local run starts in about two thirds of the time.
# It takes about a minute to write and pays off over many runs (the tests), not over the demo's few:
# BINLAKE_SKIP_CLASS_ARCHIVE=1 (`make demo`) leaves it for a later setup.
archive="$JARS/binlake-classes.jsa"
if [ -z "${BINLAKE_SKIP_CLASS_ARCHIVE:-}" ] && { [ ! -f "$archive" ] || [ "$stamp" -nt "$archive" ]; }; then
  echo "binlake setup: writing the JVM class archive (about a minute, once)"
  "$VENV/bin/python" -m binlake.spark.jvm_archive || true
fi
# binlake's native row encoding (native/rowtext, Rust through PyO3): the stream's row events to bronze's
# text without Python values in between. Built where cargo is; without it (BINLAKE_SKIP_NATIVE=1, as
# `make demo` sets, or no Rust here) binlake takes its Python path for every row, with the same result.
native=src/binlake/source/_rowtext.abi3.so
if [ -z "${BINLAKE_SKIP_NATIVE:-}" ] && { [ ! -f "$native" ] ||
    [ -n "$(find native/rowtext -type f -newer "$native" -not -path '*/target/*' | head -1)" ]; }; then
  if command -v cargo >/dev/null 2>&1; then
    echo "binlake setup: building the native row encoding (Rust, about a minute, once)"
    cargo build -q --release --locked --manifest-path native/rowtext/Cargo.toml
    cp native/rowtext/target/release/lib_rowtext.so "$native"
  else
    echo "binlake setup: no cargo here, so no native row encoding: binlake encodes rows in Python (install Rust" \
      "from rustup.rs and run make setup again for the native one)"
  fi
fi
echo "binlake setup: ready ($VENV/bin/binlake)"
