#!/usr/bin/env bash
# What the cluster tests (make test-cluster) need beyond make setup, in .venv/share/binlake/cluster:
# SeaweedFS's `weed` (an Apache-2.0 S3 server, built from the Go module proxy) and the jars of
# Hadoop's S3A connector at the versions of pyspark's own Hadoop (Maven Central).
# Idempotent: every step is skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/quiet.sh

VENV=.venv
OUT="$VENV/share/binlake/cluster"
SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6
HADOOP_VERSION=3.5.0      # pyspark 4.2's: its jars/hadoop-client-api-3.5.0.jar
AWS_SDK_VERSION=2.35.4    # the AWS SDK v2 bundle hadoop-aws 3.5.0 is built against (its pom)
ANALYTICS_VERSION=1.3.1   # hadoop-aws 3.5.0's other compile dependency: the S3 analytics accelerator

spark_jars="$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
if [ ! -f "$spark_jars/hadoop-client-api-$HADOOP_VERSION.jar" ]; then
  echo "binlake setup-cluster: pyspark's Hadoop is not $HADOOP_VERSION ($(ls "$spark_jars" | grep hadoop-client-api)); set HADOOP_VERSION and AWS_SDK_VERSION in scripts/setup_cluster.sh to match" >&2
  exit 2
fi

mkdir -p "$OUT/jars"
for artifact in "org.apache.hadoop:hadoop-aws:$HADOOP_VERSION" "software.amazon.awssdk:bundle:$AWS_SDK_VERSION" \
    "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:$ANALYTICS_VERSION"; do
  IFS=: read -r _ name version <<<"$artifact"
  if [ ! -f "$OUT/jars/$name-$version.jar" ]; then
    echo "binlake setup-cluster: fetching $artifact from Maven Central"
    quiet "$OUT/maven.log" mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$OUT/jars"
  fi
done

if [ ! -x "$OUT/weed" ]; then
  if ! command -v go >/dev/null 2>&1; then
    echo "binlake setup-cluster: go is missing; SeaweedFS needs Go 1.26 or newer to build: install it from go.dev/dl and put it on PATH" >&2
    exit 2
  fi
  echo "binlake setup-cluster: building SeaweedFS $SEAWEEDFS_VERSION (several minutes, once)"
  # `go install .../weed@version` refuses a module whose go.mod has replace directives, as
  # SeaweedFS's has: the module is downloaded, and built as the main module of a copy of it
  source_dir="$(go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" |
    "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  build="$(mktemp -d)"
  trap 'rm -rf "$build"' EXIT
  cp -r "$source_dir/." "$build"
  chmod -R u+w "$build"
  out="$(cd "$OUT" && pwd)"
  # -trimpath: the build cache keys no longer hold the temporary folder, so a second build reuses the first's
  (cd "$build" && go build -trimpath -o "$out/weed.partial" ./weed)
  mv "$OUT/weed.partial" "$OUT/weed"
fi
echo "binlake setup-cluster: ready ($OUT)"
