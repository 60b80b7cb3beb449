#!/usr/bin/env bash
# Installs everything binlake needs on a Debian/Ubuntu machine: the MariaDB server and client
# library (apt), a virtualenv with binlake and its pinned Python stack, and the Delta jars (Maven).
# Idempotent: every step is skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

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
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "binlake setup: installing Python packages into $VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e '.[local,dev]'
  touch "$stamp"
fi

if [ ! -f "$JARS/$DELTA_ARTIFACT-$DELTA_VERSION.jar" ]; then
  echo "binlake setup: fetching Delta $DELTA_VERSION jars from Maven Central"
  mkdir -p "$JARS"
  # Maven's own client reaches Central where Spark's Ivy resolver may not; Spark itself provides
  # Scala, Hadoop and Parquet, so only Delta's own two jars go on the classpath.
  for a in "$DELTA_ARTIFACT" delta-storage; do
    mvn -q -B dependency:copy -Dartifact="io.delta:$a:$DELTA_VERSION" -DoutputDirectory="$JARS" \
      -Dmdep.overWriteIfNewer=true
  done
fi
# Spark and Delta's classes, pre-parsed for the JVM: a local run starts in about two thirds of the time
archive="$JARS/binlake-classes.jsa"
if [ ! -f "$archive" ] || [ "$stamp" -nt "$archive" ]; then
  echo "binlake setup: writing the JVM class archive (about a minute, once)"
  "$VENV/bin/python" -m binlake.spark.jvm_archive || true
fi
echo "binlake setup: ready ($VENV/bin/binlake)"
