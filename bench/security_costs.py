"""What NetworkPolicy enforcement and slurmd's seccomp profile cost (issue #52), side by side.

    python -m bench.security_costs [--runs 3] [--jobs 100] [--steps 20] [--connects 200]

Needs the dev cluster with real Nodes, enforcing NetworkPolicies (`sunk dev up
--real-nodes 3`; `sunk dev status` says `enforced`), its registry and its directory. It
installs the Slurm chart once in namespace `bench-sec` (the directory's people, container
steps from the dev registry, `operator.allowHostAccess: true` so that a NodeSet may turn
slurmd's seccomp off) with one NodeSet over every real Node, and puts two plain Pods on
two different real Nodes in `bench-sec-conn`, with a NetworkPolicy that admits the client
to the server. Each run measures three settings, in an order that reverses every run:

  today           enforcement on (`sunk-netpol`), slurmd under RuntimeDefault seccomp
  no enforcement  the enforcer's host rules taken out (netpol.remove_rules), RuntimeDefault
  unconfined      enforcement on, the slurmd container `seccompProfile: Unconfined`

For each: the time to open a TCP connection from the client Pod to the server Pod
(`--connects` samples; not for `unconfined`, whose change touches slurmd alone), and, as
alice over SSH on the login Pod: `--jobs` `sbatch --wrap true` submitted and all ended
(jobs/s), `--steps` sequential `srun -N1 true` and as many `srun -N3 true` (steps/s), one
`srun -N3 --container=IMAGE true` with the image caches emptied first (cold) and `--steps`
`srun -N1 --container=IMAGE true` after it (warm). A job step first reports the seccomp mode
it runs under, so a setting that did not take stops the run. Changing the profile changes
the NodeSet's template: the operator replaces every member (all at once), and the run waits
until the members are the new template's, Ready and idle before it measures.

The host rules go out only inside a try/finally that puts them back and checks that they
are what they were; the bench ends with the cluster enforcing and says so (`sunk dev
status` also does). While they are out, nothing on the dev cluster is enforced: run it
alone. It prints medians and the ratio of each figure with the security measure to it
without ("none"), from this run. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.slurm_in_pods import containers_running, delete_namespace

from bench.observe import percentile
from sunk.operator.nodeset.spec import ROLLING
from sunk_dev import DevCluster, hostnet, netpol, registry
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import cache_dir
from sunk_dev.people import as_user, directory_values, prepare_namespace, ssh, wait_associated
from sunk_dev.platform import Platform, nodeset

NAMESPACE = "bench-sec"
CONN_NAMESPACE = f"{NAMESPACE}-conn"
NODESET = "compute"
PERSON = "alice"
PORT = 8080
JOB_IMAGE_CONTEXT = Path(__file__).resolve().parents[1] / "tests" / "e2e" / "job-image"
Json = dict[str, Any]
Figures = dict[str, list[float]]  # one setting's samples from one run, by label

# -- the settings and what is measured (pure) -------------------------------------------------
TODAY = "today"
NO_ENFORCEMENT = "no enforcement"
UNCONFINED = "unconfined"
SETTINGS = (TODAY, NO_ENFORCEMENT, UNCONFINED)
# The seccomp mode /proc/self/status shows a step under each profile: 2 is a filter, 0 none.
SECCOMP_MODE = {"RuntimeDefault": "2", "Unconfined": "0"}


@dataclass(frozen=True)
class Setting:
    name: str
    enforced: bool
    seccomp: str  # the slurmd container's seccompProfile type


SETTING = {
    TODAY: Setting(TODAY, True, "RuntimeDefault"),
    NO_ENFORCEMENT: Setting(NO_ENFORCEMENT, False, "RuntimeDefault"),
    UNCONFINED: Setting(UNCONFINED, True, "Unconfined"),
}


def schedule(runs: int) -> list[list[Setting]]:
    """The settings of each run, in the order measured: run 0 as SETTINGS, the next reversed,
    and so on. A drift over the bench then falls on every setting alike, and consecutive runs
    meet on the same profile, so the members are replaced once per run."""
    order = [SETTING[name] for name in SETTINGS]
    return [order if run % 2 == 0 else order[::-1] for run in range(runs)]


def rollouts(plan: list[list[Setting]], first: str) -> int:
    """How many times the NodeSet's profile changes over `plan`, starting from `first`."""
    changes, current = 0, first
    for run in plan:
        for setting in run:
            if setting.seccomp != current:
                changes, current = changes + 1, setting.seccomp
    return changes


def slurmd_nodeset(seccomp: str, members: int) -> Json:
    """The NodeSet over every real Node, its slurmd container under `seccomp` (the only field
    the settings change), replaced all at once when that changes."""
    obj = nodeset(
        NODESET,
        ["main"],
        replicas=members,
        updateStrategy={"type": ROLLING, "rollingUpdate": {"maxUnavailable": "100%"}},
        template={
            "spec": {
                "containers": [{"name": "slurmd", "securityContext": {"seccompProfile": {"type": seccomp}}}]
            }
        },
    )
    return obj


def refused(obj: Json) -> str | None:
    """The NodeSet's Valid condition's message when the operator refuses its spec."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Valid" and condition.get("status") == "False":
            return str(condition.get("message", "invalid"))
    return None


def rolled_out(obj: Json, members: int) -> str | None:
    """Why the NodeSet `obj` is not yet `members` members of its current template, all Ready
    and idle in Slurm (None once it is)."""
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if status.get("observedGeneration") != generation:
        return f"the operator has not seen generation {generation} yet"
    for key in ("replicas", "updated", "ready"):
        if status.get(key) != members:
            return f"{key} {status.get(key)} of {members}"
    idle = (status.get("slurm") or {}).get("idle")
    if idle != members:
        return f"idle {idle} of {members}"
    for kind in ("Ready", "UpToDate"):
        if (conditions.get(kind) or {}).get("status") != "True":
            return f"{kind}: {(conditions.get(kind) or {}).get('message', 'not reported')}"
    return None


def slurm_script(jobs: int, steps: int, members: int, image: str) -> str:
    """What alice runs on the login Pod for one setting. Each output line is `<label> <value>`:
    `seccomp <mode>` per node, `sbatch <seconds for all jobs>`, and `<label> <seconds>` per
    step; `failed <label>` for anything that did not succeed."""
    image = shlex.quote(image)
    return f"""cd /tmp
t() {{
  label=$1; shift; s=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || echo "failed $label"
  echo "$label $(awk "BEGIN {{ print $(date +%s.%N) - $s }}")"
}}
srun -N{members} awk '/^Seccomp:/ {{ print "seccomp", $2 }}' /proc/self/status || echo "failed seccomp"
s=$(date +%s.%N)
for i in $(seq {jobs}); do
  sbatch --parsable -c1 --mem=32 -o /dev/null --wrap true >/dev/null || {{ echo "failed sbatch"; break; }}
done
deadline=$(( $(date +%s) + 900 ))
while [ -n "$(squeue -h -u "$USER" -o %i)" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || {{ echo "failed sbatch (queue not empty after 900 s)"; break; }}
  sleep 0.2
done
echo "sbatch $(awk "BEGIN {{ print $(date +%s.%N) - $s }}")"
for i in $(seq {steps}); do t srun1 srun -N1 true; done
for i in $(seq {steps}); do t srun3 srun -N{members} true; done
srun -N{members} rm -rf "/var/cache/sunk/containers/$(id -u)" || echo "failed emptying the caches"
t container_cold srun -N{members} --container={image} true
for i in $(seq {steps}); do t container srun -N1 --container={image} true; done
"""


# The server Pod: accepts each connection and closes it, with a backlog no sequence of
# connections fills (a full one would drop SYNs and show as 1 s retransmissions).
SERVER = f"""import socket
server = socket.create_server(("", {PORT}), backlog=1024)
while True:
    server.accept()[0].close()
"""


def connect_script(address: str, port: int, count: int) -> str:
    """Python for the client Pod: `count` TCP connections opened and closed one after the other,
    each one's seconds on a line (`failed` and the error for one that did not open)."""
    return (
        "import socket, time\n"
        f"for _ in range({count}):\n"
        "    s = time.perf_counter()\n"
        "    try:\n"
        f"        socket.create_connection(({address!r}, {port}), timeout=3).close()\n"
        "    except OSError as e:\n"
        "        print('failed', type(e).__name__, e)\n"
        "        continue\n"
        "    print(time.perf_counter() - s)\n"
    )


@dataclass
class Samples:
    """What one setting measured, over every run."""

    connect_s: list[float] = field(default_factory=list)  # every connection, every run
    sbatch_rate: list[float] = field(default_factory=list)  # jobs/s, one per run
    srun1_rate: list[float] = field(default_factory=list)  # steps/s, one per run
    srun3_rate: list[float] = field(default_factory=list)
    container_cold_s: list[float] = field(default_factory=list)  # one per run
    container_s: list[float] = field(default_factory=list)  # every warm step, every run


def parse_slurm_output(said: str, expected_mode: str) -> Figures:
    """The figures of one `slurm_script` run, by label; raises on a failure or a step that ran
    under another seccomp mode than the setting's."""
    failed = [line for line in said.splitlines() if line.startswith("failed")]
    if failed:
        raise DevClusterError(f"the Slurm figures failed: {'; '.join(failed[:5])}")
    figures: Figures = {}
    modes = []
    for line in said.splitlines():
        label, _, value = line.strip().partition(" ")
        if label == "seccomp":
            modes.append(value.strip())
        elif label in ("sbatch", "srun1", "srun3", "container_cold", "container"):
            figures.setdefault(label, []).append(float(value))
    if not modes or any(mode != expected_mode for mode in modes):
        raise DevClusterError(
            f"job steps ran under seccomp mode(s) {modes}, the setting wants {expected_mode}"
        )
    for label in ("sbatch", "srun1", "srun3", "container_cold", "container"):
        if label not in figures:
            raise DevClusterError(f"no {label} figure in the output: {said[-500:]}")
    return figures


def add_slurm(samples: Samples, figures: Figures, jobs: int) -> None:
    """One run's Slurm figures into `samples`: rates for sbatch and sequential steps (count
    over their total time), seconds for container steps."""
    samples.sbatch_rate.append(jobs / figures["sbatch"][0])
    samples.srun1_rate.append(len(figures["srun1"]) / sum(figures["srun1"]))
    samples.srun3_rate.append(len(figures["srun3"]) / sum(figures["srun3"]))
    samples.container_cold_s += figures["container_cold"]
    samples.container_s += figures["container"]


def parse_connects(said: str) -> tuple[list[float], int]:
    """Seconds of each connection that opened, and how many did not."""
    times, failed = [], 0
    for line in said.splitlines():
        if line.startswith("failed"):
            failed += 1
        elif line.strip():
            times.append(float(line))
    return times, failed


# Rows of the table: label, the Samples field, how a value is shown, and whether the figure is
# a rate (higher is better) or a time; the ratio is always the figure with the measure to it
# without, so >1 for a time and <1 for a rate means the measure costs.
ROWS = (
    ("TCP connect, median (ms)", "connect_s", "median_ms"),
    ("TCP connect, p95 (ms)", "connect_s", "p95_ms"),
    ("sbatch, all ended (jobs/s)", "sbatch_rate", "median"),
    ("srun -N1 true, sequential (steps/s)", "srun1_rate", "median"),
    ("srun -N3 true, sequential (steps/s)", "srun3_rate", "median"),
    ("srun -N3 --container, cold caches (s)", "container_cold_s", "median"),
    ("srun -N1 --container, warm (s)", "container_s", "median"),
)


def figure(values: list[float], how: str) -> float | None:
    if not values:
        return None
    if how == "median_ms":
        return statistics.median(values) * 1000
    if how == "p95_ms":
        return percentile(values, 95) * 1000
    return statistics.median(values)


def ratio(with_measure: float | None, without: float | None) -> str:
    if with_measure is None or without is None or without == 0:
        return "—"
    return f"{with_measure / without:.2f}x"


def table(samples: dict[str, Samples], members: int) -> list[str]:
    """The Markdown table of medians, with the ratios of today's figures to those without each
    measure."""

    def shown(value: float | None) -> str:
        return "—" if value is None else f"{value:.3g}" if value < 100 else f"{value:.0f}"

    lines = [
        f"| figure | today (enforced, RuntimeDefault) | {NO_ENFORCEMENT} | seccomp {UNCONFINED} "
        "| enforcement: on / none | seccomp: RuntimeDefault / none |",
        "|---|---|---|---|---|---|",
    ]
    for label, name, how in ROWS:
        values = {key: figure(getattr(samples[key], name), how) for key in SETTINGS}
        label = label.replace("-N3", f"-N{members}")
        lines.append(
            f"| {label} | {shown(values[TODAY])} | {shown(values[NO_ENFORCEMENT])} | "
            f"{shown(values[UNCONFINED])} | {ratio(values[TODAY], values[NO_ENFORCEMENT])} | "
            f"{ratio(values[TODAY], values[UNCONFINED])} |"
        )
    return lines


# -- on the cluster ----------------------------------------------------------------------------
@contextmanager
def enforcement_off(bridge: str) -> Iterator[None]:
    """The enforcer's host rules out for the block (the enforcer keeps running), then back in
    and checked to be what they were."""
    before = netpol.rules_in_place(bridge)
    if not any(f"-i {bridge} -j {netpol.CHAIN}" in line for line in before):
        raise DevClusterError(f"the FORWARD rule for {bridge} is not in place: enforcement is not on")
    netpol.remove_rules(bridge)
    try:
        left = netpol.rules_in_place(bridge, shared=False)
        if left:
            raise DevClusterError(f"rules left after taking them out: {left}")
        yield
    finally:
        netpol.install_rules(bridge)
        after = netpol.rules_in_place(bridge)
        if sorted(after) != sorted(before):
            raise DevClusterError(f"the rules put back differ: before {before}, after {after}")


def enforcement(bridge: str, on: bool) -> AbstractContextManager[None]:
    """As the cluster is (on), or with the host rules out for the block."""
    return nullcontext() if on else enforcement_off(bridge)


def kubectl_exec(cluster: DevCluster, namespace: str, pod: str, *argv: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [
            str(cache_dir() / "bin" / "kubectl"),
            f"--kubeconfig={cluster.layout.kubeconfig}",
            "-n",
            namespace,
            "exec",
            pod,
            "--",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode:
        raise DevClusterError(f"exec in {pod} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


class Connections:
    """A server Pod on one real Node and a client Pod on another, in a namespace of their own
    with a NetworkPolicy admitting the client to the server's port (so the enforcer judges
    each connection against a policy that selects the server, as it would in the release)."""

    def __init__(self, cluster: DevCluster, kube: AdminKube, image: str, nodes: list[str]) -> None:
        self.cluster, self.kube = cluster, kube
        if kube.find(f"/api/v1/namespaces/{CONN_NAMESPACE}") is not None:  # a run that was cut short
            delete_namespace(kube, CONN_NAMESPACE, timeout=180)
        kube.create_namespace(CONN_NAMESPACE)
        pods = f"/api/v1/namespaces/{CONN_NAMESPACE}/pods"
        commands = {"server": ["python3", "-c", SERVER], "client": ["sleep", "infinity"]}
        for (name, command), node in zip(commands.items(), nodes, strict=False):
            kube.create(
                pods,
                {
                    "metadata": {"name": name, "labels": {"bench": name}},
                    "spec": {
                        "nodeName": node,
                        "terminationGracePeriodSeconds": 1,
                        "automountServiceAccountToken": False,
                        "containers": [
                            {
                                "name": "main",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "command": command,
                                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                            }
                        ],
                    },
                },
            )
        kube.create(
            f"/apis/networking.k8s.io/v1/namespaces/{CONN_NAMESPACE}/networkpolicies",
            {
                "metadata": {"name": "client-to-server"},
                "spec": {
                    "podSelector": {"matchLabels": {"bench": "server"}},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [{"podSelector": {"matchLabels": {"bench": "client"}}}],
                            "ports": [{"protocol": "TCP", "port": PORT}],
                        }
                    ],
                },
            },
        )
        deadline = time.monotonic() + 120
        while not all(containers_running(kube.get(f"{pods}/{name}")) for name in commands):
            if time.monotonic() > deadline:
                raise DevClusterError("the connection Pods did not run within 120 s")
            time.sleep(0.5)
        self.address = kube.get(f"{pods}/server")["status"]["podIP"]
        # The enforcer may judge a Pod's first packets before its informer knows the Pod.
        deadline = time.monotonic() + 60
        while self.measure(3)[1]:
            if time.monotonic() > deadline:
                raise DevClusterError("the client Pod cannot connect to the server Pod")
            time.sleep(1)

    def measure(self, count: int) -> tuple[list[float], int]:
        said = kubectl_exec(
            self.cluster, CONN_NAMESPACE, "client", "python3", "-c", connect_script(self.address, PORT, count)
        )
        return parse_connects(said)


def wait_rolled_out(platform: Platform, kube: AdminKube, members: int, timeout: float = 600) -> float:
    """Seconds until the NodeSet's members are its current template's, Ready and idle (and
    Slurm's sinfo agrees)."""
    started = time.monotonic()
    why: str | None = "not asked yet"
    while time.monotonic() - started < timeout:
        obj = platform.nodeset(kube, NODESET)
        if problem := refused(obj):
            raise DevClusterError(f"the operator refuses NodeSet {NODESET}: {problem}")
        why = rolled_out(obj, members)
        if why is None and platform.login("sinfo -h -t idle -o %D").stdout.strip() == str(members):
            return time.monotonic() - started
        time.sleep(1)
    raise DevClusterError(f"the NodeSet did not finish rolling out within {timeout:.0f} s: {why}")


def measure_slurm(cluster: DevCluster, kube: AdminKube, script: str, setting: Setting) -> Figures:
    said = ssh(cluster, kube, NAMESPACE, PERSON, script, timeout=3600)
    if said.returncode:
        raise DevClusterError(
            f"alice's script failed ({said.returncode}): {(said.stderr or said.stdout)[-500:]}"
        )
    return parse_slurm_output(said.stdout, SECCOMP_MODE[setting.seccomp])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="runs, each measuring every setting (3)")
    parser.add_argument("--jobs", type=int, default=100, help="sbatch jobs per measurement (100)")
    parser.add_argument(
        "--steps", type=int, default=20, help="sequential steps of each kind per measurement (20)"
    )
    parser.add_argument("--connects", type=int, default=200, help="TCP connections per measurement (200)")
    args = parser.parse_args()
    cluster = DevCluster()
    spec = cluster.require_running()
    if spec.real_nodes < 2:
        raise SystemExit("needs the dev cluster with real Nodes: `sunk dev up --real-nodes 3`")
    state = netpol.state(cluster.layout)
    if not state.startswith("enforced"):
        raise SystemExit(f"NetworkPolicies must be enforced to measure on against off; now: {state}")
    bridge = hostnet.network_of(cluster.layout).bridge
    plan = schedule(args.runs)
    members = spec.real_nodes
    print(
        f"{members} real Nodes, Slurm {spec.slurm}, bridge {bridge}, {args.runs} runs "
        f"(the NodeSet applied, then {rollouts(plan, plan[0][0].seccomp)} roll-outs); {args.jobs} jobs, "
        f"{args.steps} steps of each kind, {args.connects} connections per measurement",
        flush=True,
    )
    kube = AdminKube(cluster.layout)
    image = registry.build_from_slurmd(cluster.layout, JOB_IMAGE_CONTEXT, "job")
    platform = Platform(cluster, namespace=NAMESPACE, release="slurm")
    samples = {name: Samples() for name in SETTINGS}
    rollout_s: list[float] = []
    try:
        prepare_namespace(cluster, kube, NAMESPACE)
        values = directory_values(cluster)
        values["slurm"]["containers"] = {"insecureRegistries": [registry.running_address(cluster.layout)]}
        values["operator"] = {"allowHostAccess": True}
        seconds = platform.install(values, scheduler=False)
        print(f"installed in {seconds:.0f} s", flush=True)
        connections = Connections(cluster, kube, platform.images["slurmd"].tag, ["real-1", "real-2"])
        current = plan[0][0].seccomp
        platform.apply_nodeset(kube, slurmd_nodeset(current, members))
        wait_rolled_out(platform, kube, members)
        wait_associated(platform, PERSON)
        as_user(cluster, kube, NAMESPACE, PERSON, "true")  # she has reached the login Pod
        script = slurm_script(args.jobs, args.steps, members, image)
        for run, settings in enumerate(plan, start=1):
            for setting in settings:
                if setting.seccomp != current:
                    platform.apply_nodeset(kube, slurmd_nodeset(setting.seccomp, members))
                    current = setting.seccomp
                    rollout_s.append(wait_rolled_out(platform, kube, members))
                    print(f"  roll-out to {current}: {rollout_s[-1]:.0f} s", flush=True)
                into = samples[setting.name]
                started = time.monotonic()
                with enforcement(bridge, setting.enforced):
                    add_slurm(into, measure_slurm(cluster, kube, script, setting), args.jobs)
                    if setting.name != UNCONFINED:  # the profile is slurmd's: these Pods keep theirs
                        times, failed = connections.measure(args.connects)
                        if failed:
                            raise DevClusterError(
                                f"{failed} of {args.connects} connections failed ({setting.name})"
                            )
                        into.connect_s += times
                print(
                    f"run {run}, {setting.name}: {time.monotonic() - started:.0f} s, "
                    f"sbatch {into.sbatch_rate[-1]:.2f} jobs/s, srun -N1 {into.srun1_rate[-1]:.2f} steps/s",
                    flush=True,
                )
    finally:
        # Whatever happened, the cluster is left enforcing.
        if not any(f"-i {bridge} -j {netpol.CHAIN}" in line for line in netpol.rules_in_place(bridge)):
            netpol.install_rules(bridge)
        platform.uninstall()
        for namespace in (CONN_NAMESPACE, NAMESPACE):
            try:
                delete_namespace(kube, namespace, timeout=180)
            except AssertionError as err:
                print(f"WARNING: {err}", file=sys.stderr)
        kube.close()
        state = netpol.state(cluster.layout)
        print(f"NetworkPolicies at the end: {state}", flush=True)
        if not state.startswith("enforced"):
            print(
                "WARNING: the dev cluster is NOT enforcing NetworkPolicies; see `sunk dev status`",
                file=sys.stderr,
            )
    print()
    print("\n".join(table(samples, members)))
    if rollout_s:
        print(
            "\nroll-outs (profile changed -> every member of the new template idle): "
            f"median {statistics.median(rollout_s):.0f} s"
        )


if __name__ == "__main__":
    main()
