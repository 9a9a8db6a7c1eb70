# The two commands of the README's quick start.
.PHONY: demo test lint bootstrap

bootstrap:
	@scripts/bootstrap.sh

## Bring up the local real cluster (Kubernetes API server + kwok + Slurm) and run the demo.
demo: bootstrap
	.venv/bin/sunk demo

## Lint, type-check and run every test suite (the dev cluster is brought up on demand):
## everything on the default Slurm (24.11), Slurm in Pods on three real kubelet Nodes, then
## the schedule, lifecycle and workload flows on the other supported versions, so a dialect
## change that breaks one of them fails here.
VERSION_SUITE = tests/integration/test_slurm_client.py tests/e2e/test_schedule_flow.py \
	tests/e2e/test_lifecycle.py tests/e2e/test_workloads.py tests/e2e/test_gangs.py tests/e2e/test_packing.py
# On real kubelet Nodes: Slurm in Pods from plain manifests, what the chart needs of the dev
# cluster (kube-scheduler, volumes, the sunk and MariaDB images), the Slurm chart itself, jobs
# confined in cgroups inside slurmd Pods, people from the directory logging in and running jobs as
# themselves, job steps in container images from the cluster's registry, the train-and-serve
# example (PyTorch trained with sbatch, served by Pods sunk places, preempted by training),
# metrics, alerts and dashboards against a real Prometheus scraping the release, then a
# short operator fault run (20 faults; no job may be killed).
REAL_SUITE = tests/e2e/test_real_nodes.py tests/e2e/test_dev_platform_support.py tests/e2e/test_platform.py \
	tests/e2e/test_confinement.py tests/e2e/test_people.py tests/e2e/test_containers.py \
	tests/e2e/test_train_and_serve.py tests/e2e/test_prometheus.py tests/faults/test_operator_chaos.py
# Each suite's time is printed at the end (or where one fails): scripts/timed-suite.sh.
SUITE = scripts/timed-suite.sh
test: bootstrap lint
	@rm -f .suite-times
	$(SUITE) default .venv/bin/pytest
	$(SUITE) accounting env SUNK_TEST_CLUSTER=accounting .venv/bin/pytest tests/e2e/test_accounting.py tests/e2e/test_account_sync.py
	$(SUITE) real-nodes env SUNK_TEST_CLUSTER=real .venv/bin/pytest $(REAL_SUITE)
	$(SUITE) slurm-26.05 env SUNK_TEST_SLURM=26.05 .venv/bin/pytest $(VERSION_SUITE)
	$(SUITE) real-nodes-26.05 env SUNK_TEST_CLUSTER=real SUNK_TEST_SLURM=26.05 .venv/bin/pytest tests/e2e/test_real_nodes.py
	$(SUITE) --last slurm-22.05 env SUNK_TEST_SLURM=22.05 .venv/bin/pytest $(VERSION_SUITE)

lint: bootstrap
	.venv/bin/ruff check src dev tests bench
	.venv/bin/ruff format --check src dev tests bench
	.venv/bin/mypy
