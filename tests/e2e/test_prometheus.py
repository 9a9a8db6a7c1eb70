"""Issue #50 end to end: the chart's metrics, alerts and dashboards against a real Prometheus.

The Slurm chart on the dev cluster's real Nodes, scraped by the dev cluster's Prometheus
(Debian's server, `sunk_dev.prometheus`), which finds the operator and the Pod scheduler by
their Services' scrape annotations and evaluates the chart's own rules, read from the
ConfigMap `metrics.rules.configMap` renders, with two thresholds lowered so the alerts fire
within a minute. Proven here: metrics move as the NodeSet scales and as jobs start, wait and
end; an alert fires for a node Slurm drained by itself and clears when it returns, and stays
quiet for an administrator's drain; the operator-wedge alert fires for a roll-out held by a
running job and clears once the job ends; every dashboard query returns data.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`). One install for the
module; the tests run in file order (the NodeSet grows from 2 to 3 members in the second).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sunk_dev import DevCluster, procs, prometheus
from sunk_dev.dashboards import reading
from sunk_dev.dashboards.reading import Query, queries
from sunk_dev.kubeapi import AdminKube
from sunk_dev.platform import Platform, nodeset
from tests.e2e.slurm_in_pods import containers_running, delete_namespace
from tests.support import holds_for, make_pod, wait_for

pytestmark = pytest.mark.real_nodes
NAMESPACE = "prom"
RELEASE = "slurm"
NS = f'namespace="{NAMESPACE}"'
DASHBOARDS = Path(__file__).resolve().parents[2] / "charts" / "slurm" / "dashboards"
VALUES = {
    "metrics": {
        # The operator serves the slurm_* families on every Slurm version (slurmctld's own
        # endpoint would need a scrape job per path, which annotations cannot say).
        "slurmctld": {"enabled": False},
        "rules": {
            "configMap": True,
            "alerts": {
                "SlurmNodeDrainedNoReason": {"for": "10s"},
                "SunkNodeSetNotUpToDate": {"after": "20s", "for": "0s"},
            },
        },
    }
}
# What Grafana puts in place of its own variables, and the dashboards' (this release's).
VARIABLES = {"__rate_interval": "2m", "__interval": "1m", "__range": "1h"}
VARIABLES |= {"namespace": NAMESPACE, "nodeset": "compute", "datasource": "prometheus"}
# Queries that are empty on this cluster by the metrics' own definition (docs/operations.md).
EMPTY_HERE = {
    "sunk_nodeset_replicas_max": "absent for a NodeSet not in demand mode, as compute is",
    "(max by (partition) (slurm_partition_gpus": "the share of GPUs: the dev cluster's Nodes have none",
}


def compute(replicas: int, **spec: Any) -> dict[str, Any]:
    return nodeset("compute", ["main"], replicas=replicas, **spec)


def members(kube: AdminKube) -> dict[str, dict[str, Any]]:
    pods = kube.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="sunk.coreweave.com/nodeset=compute"
    )
    return {p["metadata"]["name"]: p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")}


def logged_in(platform: Platform, command: str) -> str:
    result = platform.login(command)
    assert result.returncode == 0, f"{command}: {result.stderr or result.stdout}"
    return result.stdout


def idle_nodes(platform: Platform) -> int:
    return sum(int(n) for n in logged_in(platform, "sinfo -h -t idle -o %D").split())


def submit(platform: Platform, options: str) -> str:
    return logged_in(platform, f"sbatch --parsable {options}").strip().split(";")[0]


def job_state(platform: Platform, job: str) -> str:
    return logged_in(platform, f"squeue -h -j {job} -o '%T %N'").strip()


def scancel(platform: Platform, *jobs: str) -> None:
    platform.login(f"scancel {' '.join(jobs)}")


# -- reading Prometheus ---------------------------------------------------------------------------


def values(prom: str, promql: str) -> list[float]:
    return [float(series["value"][1]) for series in prometheus.query(prom, promql)]


def targets_seen(prom: str) -> str:
    """The scrape targets and their health, for a failure message."""
    return "; ".join(
        f"{t['labels'].get('service')} {t['scrapeUrl']} {t['health']} {t['lastError']}".strip()
        for t in prometheus.targets(prom)
    )


def wait_value(prom: str, promql: str, expected: float, timeout: float) -> None:
    """Wait until `promql` gives exactly one series of value `expected`."""
    seen: list[list[float]] = [[]]

    def reached() -> bool | None:
        seen[0] = values(prom, promql)
        return seen[0] == [expected] or None

    try:
        wait_for(reached, timeout=timeout, what=f"{promql} == {expected}", every=1)
    except AssertionError as err:
        raise AssertionError(f"{err}; last: {seen[0]}; targets: {targets_seen(prom)}") from None


def alert(prom: str, name: str, state: str | None = None, **labels: str) -> dict[str, Any] | None:
    """The alert `name` with `labels`, pending or firing (or only in `state`), if there is one."""
    for found in prometheus.alerts(prom):
        have = found["labels"]
        if have.get("alertname") != name or (state is not None and found["state"] != state):
            continue
        if all(have.get(key) == value for key, value in labels.items()):
            return found
    return None


def substituted(expr: str) -> str:
    return reading.substituted(expr, VARIABLES)


def all_queries() -> list[Query]:
    return [q for path in sorted(DASHBOARDS.glob("*.json")) for q in queries(json.loads(path.read_text()))]


# -- the release and its Prometheus ---------------------------------------------------------------


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[Platform]:
    plat = Platform(dev_cluster, namespace=NAMESPACE, release=RELEASE)
    plat.install(VALUES)
    plat.apply_nodeset(kube, compute(2))
    wait_for(lambda: idle_nodes(plat) == 2 or None, timeout=180, what="the NodeSet's two members idle")
    yield plat
    plat.uninstall()
    delete_namespace(kube, NAMESPACE, timeout=180)


@pytest.fixture(scope="module")
def prom(platform: Platform, dev_cluster: DevCluster) -> Iterator[str]:
    """The dev Prometheus evaluating this release's rules (stopped again if started here)."""
    layout = dev_cluster.layout
    before = procs.load(layout.pids, prometheus.PROCESS)
    rules = prometheus.fetch_rules(layout, NAMESPACE, f"{RELEASE}-prometheus-rules")
    yield prometheus.ensure_running(layout, rules)
    if before is None or not before.alive():
        prometheus.stop(layout)


# -- metrics move ---------------------------------------------------------------------------------


def test_the_operator_is_found_by_its_annotations_and_slurm_nodes_counts_the_members(
    platform: Platform, prom: str, kube: AdminKube
) -> None:
    """Catches an operator Prometheus never finds (annotations missing, a wrong port or
    path, Pod addresses the host cannot reach) and slurm_nodes counting anything but the
    NodeSet's members."""
    wait_value(prom, f'max(up{{{NS}, service="{RELEASE}-operator-metrics"}})', 1, timeout=90)
    assert len(members(kube)) == 2
    wait_value(prom, f"max(slurm_nodes{{{NS}}})", 2, timeout=60)


def test_the_pod_scheduler_is_found_by_its_annotations(platform: Platform, prom: str) -> None:
    wait_value(prom, f'max(up{{{NS}, service="{RELEASE}-sunk-scheduler-metrics"}})', 1, timeout=90)


def test_the_config_sidecar_is_found_and_says_slurm_runs_the_releases_configuration(
    platform: Platform, prom: str
) -> None:
    """Catches the apply-config sidecar's metrics unreachable (its port, the Service, the
    policy) or saying a configuration waits when Slurm runs the release's."""
    wait_value(prom, f'max(up{{{NS}, service="{RELEASE}-config-metrics"}})', 1, timeout=90)
    wait_value(prom, f"max(sunk_slurm_config_unapplied_since_timestamp_seconds{{{NS}}})", 0, timeout=90)
    wait_value(prom, f"count(sunk_slurm_config_last_applied_timestamp_seconds{{{NS}}} > 0)", 1, timeout=90)


def test_replicas_ready_and_slurm_nodes_move_when_the_nodeset_scales_from_2_to_3(
    platform: Platform, prom: str, kube: AdminKube
) -> None:
    """Catches NodeSet gauges computed once and never again, and a scrape that serves a
    stale listing of Slurm's nodes."""
    ready = f'max(sunk_nodeset_replicas_ready{{{NS}, nodeset="compute"}})'
    wait_value(prom, ready, 2, timeout=60)
    platform.apply_nodeset(kube, compute(3))
    wait_value(prom, ready, 3, timeout=240)
    wait_value(prom, f"max(slurm_nodes{{{NS}}})", 3, timeout=120)


def test_jobs_running_and_pending_move_as_jobs_start_wait_and_end(
    platform: Platform, prom: str, kube: AdminKube
) -> None:
    """A job on every member, a second one that cannot fit until it ends. Catches job
    counts that miss a state change, and pending jobs not counted in their partition."""
    running = f"max(slurm_jobs_running{{{NS}}})"
    pending = f'max(slurm_partition_jobs_pending{{{NS}, partition="main"}})'
    wait_value(prom, running, 0, timeout=90)
    whole = submit(platform, f"--exclusive -N{len(members(kube))} -t 10 --wrap 'sleep 600'")
    waiting = ""
    try:
        wait_value(prom, running, 1, timeout=90)
        waiting = submit(platform, "-N1 -c1 --mem=64 -t 10 --wrap 'sleep 600'")
        wait_value(prom, pending, 1, timeout=60)
        assert job_state(platform, waiting).startswith("PENDING")
        scancel(platform, whole)
        wait_value(prom, pending, 0, timeout=90)
        wait_value(prom, running, 1, timeout=30)
        scancel(platform, waiting)
        wait_value(prom, running, 0, timeout=90)
    finally:
        scancel(platform, whole, *([waiting] if waiting else []))


# -- alerts ---------------------------------------------------------------------------------------


def test_a_node_slurm_drained_by_itself_fires_the_alert_and_clears_when_resumed(
    platform: Platform, prom: str, kube: AdminKube
) -> None:
    """'Kill task failed' is a drain Slurm writes itself: no one who would act on it has
    said why (docs/operations.md, SlurmNodeDrainedNoReason). Catches such a drain read as
    an admin's (no page for a node failing quietly), and an alert that outlives the resume."""
    member = sorted(members(kube))[0]
    logged_in(platform, f"scontrol update nodename={member} state=drain reason='Kill task failed'")
    try:
        fired = wait_for(
            lambda: alert(prom, "SlurmNodeDrainedNoReason", "firing", node=member),
            timeout=150,
            what=f"SlurmNodeDrainedNoReason firing for {member}",
            every=2,
        )
        assert (fired["labels"]["reason_owner"], fired["labels"]["nodeset"]) == ("slurm", "compute")
    finally:
        logged_in(platform, f"scontrol update nodename={member} state=resume")
    wait_for(
        lambda: alert(prom, "SlurmNodeDrainedNoReason", node=member) is None or None,
        timeout=90,
        what=f"SlurmNodeDrainedNoReason to resolve once {member} is resumed",
        every=2,
    )


def test_an_administrators_drain_with_a_reason_does_not_page(
    platform: Platform, prom: str, kube: AdminKube
) -> None:
    """Catches the alert firing for every drain: someone has already said why this one."""
    member = sorted(members(kube))[0]
    drained = f'sunk_slurm_node_info{{{NS}, node="{member}", state=~"drained|draining"}}'
    logged_in(platform, f"scontrol update nodename={member} state=drain reason='disk swap, ask alice'")
    try:
        wait_for(lambda: values(prom, drained) or None, timeout=60, what=f"{member} drained in Prometheus")
        # Longer than the alert's 10 s `for` plus an evaluation and a scrape.
        holds_for(
            lambda: alert(prom, "SlurmNodeDrainedNoReason", node=member) is None,
            seconds=30,
            what="no SlurmNodeDrainedNoReason for an admin's drain",
            every=2,
        )
        [series] = prometheus.query(prom, drained)
        assert series["metric"]["reason_owner"] == "admin"
    finally:
        logged_in(platform, f"scontrol update nodename={member} state=resume")


def test_a_roll_out_held_by_a_running_job_fires_the_not_up_to_date_alert_until_the_job_ends(
    platform: Platform, prom: str, kube: AdminKube
) -> None:
    """The operator replaces a member only once Slurm drained it, so a long job holds a
    roll-out by design; the alert is what tells a person it is held. Catches a wedge that
    shows nowhere (not_up_to_date_seconds stuck at 0) and an alert that never clears."""
    wait_for(lambda: idle_nodes(platform) == 3 or None, timeout=120, what="three idle members")
    member = sorted(members(kube))[-1]
    job = submit(platform, f"-w {member} -c1 --mem=64 -t 20 --wrap 'sleep 1200'")
    try:
        wait_for(lambda: job_state(platform, job).startswith("RUNNING") or None, timeout=60, what="the job")
        template = {"metadata": {"annotations": {"sunk.dev/rev": "prometheus-e2e"}}}
        platform.apply_nodeset(kube, compute(3, template=template))
        fired = wait_for(
            lambda: alert(prom, "SunkNodeSetNotUpToDate", "firing", nodeset="compute"),
            timeout=180,
            what="SunkNodeSetNotUpToDate firing for compute",
            every=2,
        )
        assert fired["labels"]["namespace"] == NAMESPACE
        assert job_state(platform, job) == f"RUNNING {member}"  # the job held it, nothing else
    finally:
        scancel(platform, job)
    wait_for(
        lambda: alert(prom, "SunkNodeSetNotUpToDate", nodeset="compute") is None or None,
        timeout=420,
        what="SunkNodeSetNotUpToDate to resolve once the roll-out finishes",
        every=2,
    )


# -- dashboards -----------------------------------------------------------------------------------


def placed_pod(platform: Platform, name: str, node: str) -> dict[str, Any]:
    """A Pod for sunk's scheduler on `node`, running the slurmd image (already on the Nodes)."""
    pod = make_pod(
        name,
        f"{NAMESPACE}-{RELEASE}",
        cpu="100m",
        memory="32Mi",
        nodeSelector={"kubernetes.io/hostname": node},
    )
    pod["spec"]["containers"][0].update(
        image=platform.images["slurmd"].ref, imagePullPolicy="Never", command=["sleep", "infinity"]
    )
    return pod


def seen_as(prom: str, node: str, state: str, keep: Callable[[], object] = lambda: None) -> None:
    """Wait until Prometheus shows `node` in `state`; `keep` runs before each look."""
    series = f'sunk_slurm_node_info{{{NS}, node="{node}", state="{state}"}}'

    def shown() -> list[float] | None:
        keep()
        return values(prom, series) or None

    wait_for(shown, timeout=90, what=f"{node} {state} in Prometheus", every=2)


def out_and_back(platform: Platform, prom: str, node: str, state: str, shown: str) -> None:
    """Take `node` out of use (`scontrol ... state=<state>`) and back, each step seen in
    Prometheus, so the operator observes how long it was out. The state is set again while
    Prometheus has not seen it: with ReturnToService=2 slurmctld returns a DOWN node whose
    slurmd answers at its next registration, which on a busy machine came before the
    operator's next listing."""
    out = f"scontrol update nodename={node} state={state} reason='e2e: dashboards'"
    logged_in(platform, out)
    seen_as(prom, node, shown, keep=lambda: platform.login(out))
    logged_in(platform, f"scontrol update nodename={node} state=resume")
    seen_as(prom, node, "idle")


def test_every_dashboard_query_returns_data(platform: Platform, prom: str, kube: AdminKube) -> None:
    """Every panel's query, its variables replaced by this release's values, against the
    cluster in a state that gives every panel something to show: a node drained and back,
    down and back, then drained again; a running job and a held one; a Pod placed by sunk's
    scheduler and one waiting in Slurm. Catches a panel that reads a metric under a name or
    label nothing serves (empty for ever, silently); the failure lists every empty query."""
    found = all_queries()
    if not found:
        pytest.skip(f"no dashboards are committed under {DASHBOARDS}")
    for marker in EMPTY_HERE:
        assert any(marker in substituted(q.expr) for q in found), f"EMPTY_HERE names no query: {marker}"
    wait_for(lambda: idle_nodes(platform) == 3 or None, timeout=180, what="three idle members")
    out, busy, free = sorted(members(kube))
    nodes = {name: pod["spec"]["nodeName"] for name, pod in members(kube).items()}
    jobs: list[str] = []
    tenants = f"/api/v1/namespaces/{platform.tenants}/pods"
    try:
        # Drained and back, down and back: what the duration histograms observe.
        for state, shown in (("drain", "drained"), ("down", "down")):
            out_and_back(platform, prom, out, state, shown)
        logged_in(platform, f"scontrol update nodename={out} state=drain reason='e2e: dashboards'")
        jobs.append(submit(platform, f"-w {busy} --exclusive -t 10 --wrap 'sleep 600'"))
        jobs.append(submit(platform, "--hold -t 10 --wrap true"))
        kube.create(tenants, placed_pod(platform, "placed", nodes[free]))
        # Its placeholder job waits in Slurm: the job above holds every CPU of that member.
        kube.create(tenants, placed_pod(platform, "waiting", nodes[busy]))
        wait_for(
            lambda: containers_running(kube.get(f"{tenants}/placed")) or None,
            timeout=120,
            what="the Pod placed by sunk to run",
        )
        empty: list[str] = []

        def all_answer() -> bool | None:
            empty[:] = [
                f"{q.dashboard} / {q.panel} / {q.ref}: {substituted(q.expr)}"
                for q in found
                if not any(m in substituted(q.expr) for m in EMPTY_HERE)
                and not prometheus.query(prom, substituted(q.expr))
            ]
            return not empty or None

        try:
            wait_for(all_answer, timeout=180, what="every dashboard query to return data", every=5)
        except AssertionError:
            pytest.fail(
                f"{len(empty)} of {len(found)} dashboard queries return no data:\n" + "\n".join(empty)
            )
    finally:
        for name in ("placed", "waiting"):
            kube.delete(f"{tenants}/{name}")
        if jobs:
            scancel(platform, *jobs)
        logged_in(platform, f"scontrol update nodename={out} state=resume")
