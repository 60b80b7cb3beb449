.PHONY: setup test unit demo bench soak clean dev-db-stop

setup:
	@bash scripts/setup.sh

test: setup
	.venv/bin/python -m pytest -q --durations=30 tests

unit: setup
	.venv/bin/python -m pytest -q tests/unit tests/bundle

demo: setup
	@bash scripts/demo.sh

bench: setup
	.venv/bin/python bench/run.py

# the chunk oracle's long form and its mutation runs; each run prints its counts
soak: setup
	BINLAKE_ORACLE_READS=$${BINLAKE_ORACLE_READS:-20000} BINLAKE_ORACLE_MUTATIONS=1 \
		.venv/bin/python -m pytest -q -s tests/integration/test_chunk_oracle.py

dev-db-stop:
	-.venv/bin/binlake dev-db stop

clean: dev-db-stop
	rm -rf .binlake lake
