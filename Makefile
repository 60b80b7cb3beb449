.PHONY: setup test unit demo bench clean dev-db-stop

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

dev-db-stop:
	-.venv/bin/binlake dev-db stop

clean: dev-db-stop
	rm -rf .binlake lake
