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
VERSION_SUITE = tests/integration/test_slurm_client.py tests/chart/test_partition_options.py tests/e2e/test_schedule_flow.py \
	tests/e2e/test_lifecycle.py tests/e2e/test_workloads.py tests/e2e/test_gangs.py tests/e2e/test_packing.py
# On real kubelet Nodes: Slurm in Pods from plain manifests, NetworkPolicies enforced (a canary), what the chart needs of the dev
# cluster (kube-scheduler, volumes, the sunk and MariaDB images), the Slurm chart itself, jobs
# confined in cgroups inside slurmd Pods, people from the directory logging in and running jobs as
# themselves, job steps in container images from the cluster's registry, the train-and-serve
# example (PyTorch trained with sbatch, served by Pods sunk places, preempted by training),
# metrics, alerts and dashboards against a real Prometheus scraping the release, then a
# short operator fault run (20 faults; no job may be killed).
REAL_SUITE = tests/e2e/test_real_nodes.py tests/e2e/test_network_policies.py tests/e2e/test_dev_platform_support.py \
	tests/e2e/test_platform.py \
	tests/e2e/test_confinement.py tests/e2e/test_people.py tests/e2e/test_containers.py \
	tests/e2e/test_train_and_serve.py tests/e2e/test_prometheus.py tests/e2e/test_node_health.py \
	tests/faults/test_operator_chaos.py
# On 26.05 the chart's jobs also get a PID namespace each (namespace/linux): proven there too.
CONFINEMENT_26_05 = test_issue36_two_jobs_on_one_node_each_see_their_own_tmp_and_shm_removed_at_the_end \
	test_issue49_two_jobs_on_one_member_see_each_others_processes_only_without_pid_namespaces
# Two lanes side by side, as most of the real-Node suite's time is spent waiting on kubelets and
# Slurm: the real-Node suites on the one cluster with real Nodes a machine may hold, and the
# kwok-only suites on their own cluster (state dir and ports apart). Each lane's output is
# printed whole when it ends; each suite's time is printed at the end (scripts/timed-suite.sh).
SUITE = scripts/timed-suite.sh
KWOK_LANE = env SUNK_DEV_DIR=/tmp/sunk-kwok-lane SUNK_DEV_PORT_OFFSET=5000
.PHONY: test-real-lane test-kwok-lane
test: bootstrap lint
	@rm -f .suite-times
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-real-lane test-kwok-lane; rc=$$?; \
	  echo "time per suite:"; cat .suite-times; exit $$rc

test-real-lane:
	$(SUITE) real-nodes env SUNK_TEST_CLUSTER=real .venv/bin/pytest --durations=25 $(REAL_SUITE)
	$(SUITE) real-nodes-26.05 env SUNK_TEST_CLUSTER=real SUNK_TEST_SLURM=26.05 .venv/bin/pytest tests/e2e/test_real_nodes.py \
	  $(addprefix tests/e2e/test_confinement.py::,$(CONFINEMENT_26_05))

test-kwok-lane:
	$(SUITE) default $(KWOK_LANE) .venv/bin/pytest --durations=15
	$(SUITE) accounting $(KWOK_LANE) SUNK_TEST_CLUSTER=accounting .venv/bin/pytest tests/e2e/test_accounting.py tests/e2e/test_account_sync.py
	$(SUITE) slurm-26.05 $(KWOK_LANE) SUNK_TEST_SLURM=26.05 .venv/bin/pytest $(VERSION_SUITE)
	$(SUITE) slurm-22.05 $(KWOK_LANE) SUNK_TEST_SLURM=22.05 .venv/bin/pytest $(VERSION_SUITE)

lint: bootstrap
	.venv/bin/ruff check src dev tests bench
	.venv/bin/ruff format --check src dev tests bench
	.venv/bin/mypy
