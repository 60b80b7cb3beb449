.PHONY: setup setup-cluster test test-cluster test-cluster-all test-all test-mysql unit demo bench soak clean dev-db-stop

setup:
	@bash scripts/setup.sh

# what the cluster tests need beyond setup: SeaweedFS (built from the Go module proxy, once) and Hadoop's S3A jars
setup-cluster: setup
	@bash scripts/setup_cluster.sh

# every test on both servers, the slow ones in turns of seven days (tests/conftest.py says why), in two processes
# (much of a test is waiting for a server, a JVM or a catch-up, so two share the two cores well)
test: setup
	.venv/bin/python -m pytest -q -n 2 --dist worksteal --durations=30 --ignore=tests/cluster tests

# binlake under spark-submit on a standalone Spark cluster (master, worker, two executors) and with its lake
# on a SeaweedFS S3 server, both started by the tests (tests/cluster); each test on the day's server
# (tests/cluster/conftest.py), on both with test-cluster-all
test-cluster: setup-cluster
	.venv/bin/python -m pytest -q --durations=10 tests/cluster

test-cluster-all: setup-cluster
	BINLAKE_TEST_CLUSTER_SERVERS=mariadb,mysql .venv/bin/python -m pytest -q --durations=10 tests/cluster

# every test, the slow ones on both servers (over an hour on 2 cores)
test-all: setup
	BINLAKE_TEST_SLOW_SERVERS=mariadb,mysql .venv/bin/python -m pytest -q -n 2 --dist worksteal --durations=30 --ignore=tests/cluster tests

# the whole integration suite on MySQL alone, slow tests included
test-mysql: setup
	BINLAKE_TEST_SERVERS=mysql BINLAKE_TEST_SLOW_SERVERS=mysql .venv/bin/python -m pytest -q -n 2 --dist worksteal --durations=30 tests/integration

unit: setup
	.venv/bin/python -m pytest -q tests/unit tests/bundle

# the demo runs on MariaDB alone: setup leaves out MySQL's private root, the JVM class archive and the
# native row encoding, which the tests use (`make test` adds them)
demo:
	@BINLAKE_SKIP_MYSQL=1 BINLAKE_SKIP_CLASS_ARCHIVE=1 BINLAKE_SKIP_NATIVE=1 bash scripts/setup.sh
	@bash scripts/demo.sh

# the snapshot section's standalone-cluster run needs only what setup installs (pyspark's scripts, Delta's
# jars), not setup-cluster's SeaweedFS and S3A jars
bench: setup
	.venv/bin/python bench/run.py

# The long forms, on both servers; each prints its counts: the chunk oracle (20,000 reads) and its
# mutation runs, the sustained-writes run 20 times with every fsync 20 ms slower, 200 random kills,
# the source killed mid-snapshot and mid-stream on both servers.
soak: setup
	BINLAKE_ORACLE_READS=$${BINLAKE_ORACLE_READS:-20000} BINLAKE_ORACLE_MUTATIONS=1 \
		BINLAKE_TEST_SLOW_SERVERS=mariadb,mysql .venv/bin/python -m pytest -q -s tests/integration/test_chunk_oracle.py
	BINLAKE_SOAK_RUNS=$${BINLAKE_SOAK_RUNS:-20} BINLAKE_FSYNC_DELAY_US=20000 \
		.venv/bin/python -m pytest -q -s tests/integration/test_sustained_writes.py
	BINLAKE_SIDE_ROWS=$${BINLAKE_SIDE_ROWS:-1000000} .venv/bin/python -m pytest -q -s \
		tests/integration/test_side_snapshot.py -k under_writers
	BINLAKE_KILLS=$${BINLAKE_KILLS:-200} BINLAKE_KILL_SERVERS=mariadb,mysql \
		.venv/bin/python -m pytest -q -s tests/integration/test_random_kills.py
	BINLAKE_TEST_SLOW_SERVERS=mariadb,mysql .venv/bin/python -m pytest -q -s tests/integration/test_source_killed.py

dev-db-stop:
	-.venv/bin/binlake dev-db stop

clean: dev-db-stop
	rm -rf .binlake lake
