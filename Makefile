# The two commands of the README's quick start.
.PHONY: demo test lint bootstrap

bootstrap:
	@scripts/bootstrap.sh

## Bring up the local real cluster (Kubernetes API server + kwok + Slurm) and run the demo.
demo: bootstrap
	.venv/bin/sunk demo

## Lint, type-check and run every test suite (the dev cluster is brought up on demand).
test: bootstrap lint
	.venv/bin/pytest
	SUNK_TEST_CLUSTER=accounting .venv/bin/pytest tests/e2e/test_accounting.py

lint: bootstrap
	.venv/bin/ruff check src tests bench
	.venv/bin/ruff format --check src tests bench
	.venv/bin/mypy
