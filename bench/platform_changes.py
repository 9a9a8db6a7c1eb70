"""What a platform change costs (issue #55), beside the same steps of a plain Deployment.

Needs a running dev cluster with real Nodes (`sunk dev up --real-nodes 3`) whose real Nodes
no other release's NodeSet holds. Installs the Slurm chart as its own release in its own
namespace (the dev values, as `sunk dev platform` does) and, each run:

1. `helm upgrade --install` → every Deployment and StatefulSet of the release Ready, with
   when the hooks ended (the first workload created) and when each workload became Ready.
   The first run makes the release's Secrets; later runs find them (an uninstall keeps
   them, and the claims: a warm re-install), so the secrets hook Jobs are not rendered;
2. a NodeSet over the real Nodes (partition `main`), until every member is idle;
3. `helm upgrade` adding a partition without options (the pre-upgrade check is not
   rendered) → the partition in Slurm (`scontrol show partition` looped in the login Pod,
   stamped there: the Pods share this machine's clock), with when helm returned, when the
   ConfigMap changed and when the sidecar recorded it applied; then the same for a
   partition with options the chart vouches for (`MaxTime`: the check is not rendered
   either) and for one with an option it leaves to the check (`MinNodes`: the check runs);
4. a roll-out (the NodeSet's features change) while one member runs a job: the job's end
   (looped in the login Pod) → that member's Pod deleting → gone → its new Pod created →
   Ready;
5. `helm uninstall`.

Then a plain Deployment (one replica, no probe, the sunk image) installed by a chart of its
own: `helm install` → Ready, and `helm upgrade` changing its Pod template → the new Pod
Ready. At the end the namespaces go (with the Secrets and claims) unless `--keep`.

    .venv/bin/python -m bench.platform_changes [--runs 3] [--namespace bench-platform] [--keep]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from sunk_dev import DevCluster
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.platform import REAL, Platform, build_chart_dependencies, dev_values, merge_values, nodeset

Json = dict[str, Any]
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodesets.sunk.coreweave.com"
NODESET = "bench"
INSTANCE = "app.kubernetes.io/instance"
POLL_S = 0.2
APPLIED_HASH = "sunk.coreweave.com/applied-config-hash"
NAN = float("nan")


def ready(workload: Json) -> bool:
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    wanted = spec.get("replicas", 1)
    return bool(
        status.get("observedGeneration", 0) >= workload["metadata"].get("generation", 0)
        and status.get("readyReplicas", 0) == wanted
        and status.get("updatedReplicas", 0) == wanted
    )


def pod_ready(pod: Json) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def workloads(kube: AdminKube, namespace: str, release: str) -> list[Json]:
    """The release's Deployments and StatefulSets, each with its `kind` (a list's items have none)."""
    found: list[Json] = []
    for kind, plural in (("Deployment", "deployments"), ("StatefulSet", "statefulsets")):
        items = kube.get(
            f"/apis/apps/v1/namespaces/{namespace}/{plural}", labelSelector=f"{INSTANCE}={release}"
        )
        found += [{**item, "kind": kind} for item in items["items"]]
    return found


def in_background(call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


def stamp_when(plat: Platform, condition: str, timeout: float = 240) -> concurrent.futures.Future[float]:
    """Loop `condition` (a shell test) in the login Pod until it holds; the Pod's clock when
    it did (the real Nodes' Pods share this machine's clock)."""
    script = f"until {condition}; do sleep 0.1; done; date +%s.%N"

    def run() -> float:
        done = plat.login(script, timeout=timeout)
        if done.returncode != 0:
            raise DevClusterError(f"{condition}: {done.stderr or done.stdout}")
        return float(done.stdout.strip().splitlines()[-1])

    return in_background(run)


def crd_held_elsewhere(kube: AdminKube, namespace: str) -> bool:
    crd = kube.find(CRD)
    if crd is None:
        return False
    owner = ((crd.get("metadata") or {}).get("annotations") or {}).get("meta.helm.sh/release-namespace", "")
    return bool(owner != namespace)


class Bench:
    def __init__(self, cluster: DevCluster, kube: AdminKube, namespace: str) -> None:
        self.kube = kube
        self.plat = Platform(cluster, namespace=namespace, release="bench")
        self.namespace = namespace
        images = self.plat.images
        base = dev_values(images, scheduler=True, tenants=self.plat.tenants, strangers="")
        self.values = merge_values(base, {"slurm": {"partitions": [{"name": "main", "default": True}]}})
        self.hash_before = ""
        if crd_held_elsewhere(kube, namespace):
            self.values = merge_values(self.values, {"nodeSetCRD": {"install": False}})

    # -- helm -------------------------------------------------------------------------------
    def helm(self, values: Json, *, wait: bool) -> subprocess.CompletedProcess[str]:
        self.plat.values_file.write_text(yaml.safe_dump(values))
        return self.plat.upgrade(wait=wait)

    def secrets_kept(self) -> bool:
        return self.kube.find(f"/api/v1/namespaces/{self.namespace}/secrets/bench-auth") is not None

    # -- 1. install -------------------------------------------------------------------------
    def install(self) -> Json:
        for tenant in (self.plat.tenants,):
            self.kube.create_namespace(tenant, {"pod-security.kubernetes.io/enforce": "baseline"})
        kept = self.secrets_kept()
        began = time.time()
        helm = in_background(lambda: self.helm(self.values, wait=True))
        first_seen = 0.0
        ready_at: dict[str, float] = {}
        while not helm.done():
            now = time.time()
            found = workloads(self.kube, self.namespace, "bench")
            if found and not first_seen:
                first_seen = now
            for w in found:
                name = f"{w['kind']}/{w['metadata']['name']}"
                if name not in ready_at and ready(w):
                    ready_at[name] = now
            time.sleep(POLL_S)
        helm.result()
        returned = time.time()
        for w in workloads(self.kube, self.namespace, "bench"):  # any the last poll missed
            ready_at.setdefault(f"{w['kind']}/{w['metadata']['name']}", returned)
        slowest = max(ready_at, key=lambda n: ready_at[n])
        return {
            "secrets kept": kept,
            "hooks": first_seen - began,
            "every Pod Ready": max(ready_at.values()) - began,
            "helm returned": returned - began,
            "slowest": slowest,
            "each": {n: round(t - began, 1) for n, t in sorted(ready_at.items(), key=lambda x: x[1])},
        }

    # -- 2. a NodeSet -----------------------------------------------------------------------
    def nodeset(self, features: list[str] | None = None) -> float:
        began = time.time()
        spec = nodeset(NODESET, ["main"], updateStrategy={"rollingUpdate": {"maxUnavailable": "100%"}})
        if features is not None:
            spec["spec"]["features"] = features
        self.plat.apply_nodeset(self.kube, spec)
        count = self.plat.real_nodes
        deadline = time.time() + 240
        while time.time() < deadline:
            status = self.plat.nodeset(self.kube, NODESET).get("status") or {}
            if (status.get("slurm") or {}).get("idle") == count and len(self.members()) == count:
                return time.time() - began
            time.sleep(0.5)
        held = [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in self.kube.get("/api/v1/pods", labelSelector="sunk.coreweave.com/nodeset")["items"]
            if p["metadata"]["namespace"] != self.namespace
        ]
        raise DevClusterError(
            f"NodeSet {NODESET} did not reach {count} idle members in 240 s"
            + (f"; other releases' members hold real Nodes: {', '.join(held)}" if held else "")
        )

    def members(self) -> dict[str, Json]:
        pods = self.kube.get(
            f"/api/v1/namespaces/{self.namespace}/pods", labelSelector=f"sunk.coreweave.com/nodeset={NODESET}"
        )["items"]
        return {p["metadata"]["name"]: p for p in pods if not p["metadata"].get("deletionTimestamp")}

    # -- 3. a partition added by helm upgrade -----------------------------------------------
    def add_partition(self, partition: Json) -> Json:
        name = partition["name"]
        cm_path = f"/api/v1/namespaces/{self.namespace}/configmaps/bench-slurm-config"
        before = self.kube.get(cm_path)["metadata"]["resourceVersion"]
        seen = stamp_when(self.plat, f"scontrol show partition {name} >/dev/null 2>&1")
        time.sleep(1.0)  # the loop is running in the login Pod
        partitions = [*self.values["slurm"]["partitions"], partition]
        self.values = merge_values(self.values, {"slurm": {"partitions": partitions}})
        began = time.time()
        helm = in_background(lambda: self.helm(self.values, wait=False))
        written = applied = returned = 0.0
        while not seen.done():
            now = time.time()
            meta = self.kube.get(cm_path)["metadata"]
            if not written and meta["resourceVersion"] != before:
                written = now
            recorded = (meta.get("annotations") or {}).get(APPLIED_HASH, "")
            if not applied and recorded and recorded != self.hash_before:
                applied = now
            if helm.done() and not returned:
                returned = now
            time.sleep(POLL_S)
        helm.result()
        in_slurm = seen.result()
        self.remember_hash()
        return {
            "helm returned (hooks)": (returned or time.time()) - began,
            "ConfigMap written": written - began if written else NAN,
            "recorded applied": applied - began if applied else NAN,
            "in Slurm": in_slurm - began,
        }

    def remember_hash(self) -> None:
        """The configuration Slurm runs now, as the sidecar recorded it."""
        meta = self.kube.get(f"/api/v1/namespaces/{self.namespace}/configmaps/bench-slurm-config")["metadata"]
        self.hash_before = (meta.get("annotations") or {}).get(APPLIED_HASH, "")

    # -- 4. a roll-out while a member runs a job --------------------------------------------
    def roll_out(self, features: list[str], job_s: int) -> Json:
        busy = sorted(self.members())[0]
        old_uid = self.members()[busy]["metadata"]["uid"]
        job = self.plat.login(
            f"sbatch --parsable -w {busy} -c1 --mem=64 --wrap 'sleep {job_s}'"
        ).stdout.strip()
        deadline = time.time() + 60
        while self.plat.login(f"squeue -h -j {job} -o %T").stdout.strip() != "RUNNING":
            if time.time() > deadline:
                raise DevClusterError(f"job {job} did not start on {busy}")
            time.sleep(0.5)
        ended = stamp_when(self.plat, f"! squeue -h -j {job} -t R -o %i | grep -q .", timeout=job_s + 120)
        spec = self.plat.nodeset(self.kube, NODESET)["spec"]
        self.kube.patch(
            f"/apis/sunk.coreweave.com/v1alpha1/namespaces/{self.namespace}/nodesets/{NODESET}",
            {"spec": {**spec, "features": features}},
        )
        drained_before_end = False
        deleting = gone = created = became_ready = 0.0
        deadline = time.time() + job_s + 240
        path = f"/api/v1/namespaces/{self.namespace}/pods/{busy}"
        while not became_ready and time.time() < deadline:
            now = time.time()
            pod = self.kube.find(path)
            if not ended.done() and not drained_before_end:
                shown = self.plat.login(f"scontrol show node {busy} -o").stdout
                drained_before_end = "DRAIN" in shown
            if pod is not None and pod["metadata"]["uid"] == old_uid:
                if pod["metadata"].get("deletionTimestamp") and not deleting:
                    deleting = now
            else:
                if not gone:
                    gone = now
                    deleting = deleting or now
                if pod is not None and not created:
                    created = now
                if pod is not None and pod_ready(pod):
                    became_ready = now
            time.sleep(POLL_S)
        end = ended.result()
        if not became_ready:
            raise DevClusterError(f"member {busy} was not replaced within {job_s + 240} s")
        return {
            "member drained before its job ended": drained_before_end,
            "job end → Pod deleting": deleting - end,
            "job end → Pod gone": gone - end,
            "job end → new Pod created": created - end,
            "job end → new Pod Ready": became_ready - end,
        }

    def uninstall(self, *, check: bool = True) -> None:
        """The release goes (its pre-delete hook takes the NodeSet's members out job-safely);
        its Secrets and claims stay, as for any uninstall, so the next install is warm."""
        self.plat.helm_run(
            "uninstall", "bench", "--namespace", self.namespace, "--wait", "--timeout", "5m", check=check
        )


# -- the plain Deployment ------------------------------------------------------------------
PLAIN_CHART = {
    "Chart.yaml": "apiVersion: v2\nname: plain\nversion: 0.1.0\n",
    "templates/deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: plain, namespace: {{ .Release.Namespace }}}
spec:
  replicas: 1
  selector: {matchLabels: {app: plain}}
  template:
    metadata: {labels: {app: plain}}
    spec:
      nodeSelector: {{ toJson .Values.nodeSelector }}
      terminationGracePeriodSeconds: 1
      automountServiceAccountToken: false
      containers:
      - name: c
        image: {{ .Values.image }}
        imagePullPolicy: Never
        command: [sleep, infinity]
        env: [{name: STEP, value: {{ .Values.step | quote }}}]
""",
}


def plain_deployment(plat: Platform, kube: AdminKube, namespace: str, runs: int) -> list[Json]:
    image = plat.images["sunk"].ref
    results: list[Json] = []
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "plain"
        for name, text in PLAIN_CHART.items():
            (chart / name).parent.mkdir(parents=True, exist_ok=True)
            (chart / name).write_text(text)
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/plain"

        def helm(step: int) -> float:
            began = time.time()
            plat.helm_run(
                "upgrade", "--install", "plain", str(chart), "--namespace", namespace, "--create-namespace",
                "--set", f"image={image}", "--set-json", f"nodeSelector={_json(REAL)}",
                "--set", f"step={step}",
            )  # fmt: skip
            while not ((d := kube.find(path)) is not None and ready(d) and _only_new(kube, namespace, d)):
                time.sleep(POLL_S)
            return time.time() - began

        for run in range(runs):
            installed = helm(2 * run)
            upgraded = helm(2 * run + 1)
            results.append({"install → Ready": installed, "upgrade → new Pod Ready": upgraded})
            plat.helm_run("uninstall", "plain", "--namespace", namespace, "--wait")
    return results


def _json(value: Any) -> str:
    return json.dumps(value)


def _only_new(kube: AdminKube, namespace: str, deployment: Json) -> bool:
    """Every Pod of the Deployment is of its newest template and Ready (the old one gone)."""
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="app=plain")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return len(live) == deployment["spec"]["replicas"] and all(pod_ready(p) for p in live)


# -- report -------------------------------------------------------------------------------
def median(rows: list[Json], key: str) -> str:
    values = [r[key] for r in rows if isinstance(r.get(key), float) and r[key] == r[key]]
    if not values:
        return "-"
    return f"{statistics.median(values):5.1f} s ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="rounds of every step (3)")
    parser.add_argument("--namespace", default="bench-platform", help="the release's namespace")
    parser.add_argument("--job-seconds", type=int, default=45, help="the roll-out's job length (45)")
    parser.add_argument("--keep", action="store_true", help="keep the namespaces, Secrets and claims")
    args = parser.parse_args()
    cluster = DevCluster()
    spec = cluster.require_running()
    if not spec.real_nodes:
        raise SystemExit("the running dev cluster has no real Nodes: `sunk dev up --real-nodes 3`")
    kube = AdminKube(cluster.layout)
    bench = Bench(cluster, kube, args.namespace)
    build_chart_dependencies(bench.plat.helm)
    installs: list[Json] = []
    plain_adds: list[Json] = []
    vouched_adds: list[Json] = []
    checked_adds: list[Json] = []
    rollouts: list[Json] = []
    plain: list[Json] = []
    try:
        for run in range(args.runs):
            said = f"run {run + 1}:"
            installs.append(bench.install())
            print(f"{said} install {installs[-1]}", flush=True)
            idle = bench.nodeset(features=[])
            print(f"{said} NodeSet -> {spec.real_nodes} idle members in {idle:.1f} s", flush=True)
            bench.remember_hash()
            plain_adds.append(bench.add_partition({"name": f"extra{run}"}))
            print(f"{said} partition without options {plain_adds[-1]}", flush=True)
            timed = {"name": f"timed{run}", "options": {"MaxTime": "1:00:00"}}
            vouched_adds.append(bench.add_partition(timed))
            print(f"{said} partition with vouched options {vouched_adds[-1]}", flush=True)
            sized = {"name": f"sized{run}", "options": {"MinNodes": 1}}
            checked_adds.append(bench.add_partition(sized))
            print(f"{said} partition with an option left to the check {checked_adds[-1]}", flush=True)
            rollouts.append(bench.roll_out([f"bench{run}"], args.job_seconds))
            print(f"{said} roll-out {rollouts[-1]}", flush=True)
            bench.uninstall()
            bench.values["slurm"]["partitions"] = [{"name": "main", "default": True}]
        plain = plain_deployment(bench.plat, kube, f"{args.namespace}-plain", args.runs)
    finally:
        if not args.keep:
            bench.uninstall(check=False)  # a run that stopped half-way left it installed
            for namespace in (args.namespace, f"{args.namespace}-plain", bench.plat.tenants):
                kube.delete(f"/api/v1/namespaces/{namespace}")
        kube.close()
    adds = {"plain": plain_adds, "vouched": vouched_adds, "checked": checked_adds}
    report(spec.real_nodes, spec.slurm, args.runs, installs, adds, rollouts, plain)


def report(
    nodes: int,
    slurm: str,
    runs: int,
    installs: list[Json],
    adds: dict[str, list[Json]],
    rollouts: list[Json],
    plain: list[Json],
) -> None:
    plain_adds, vouched_adds, checked_adds = adds["plain"], adds["vouched"], adds["checked"]
    rows = [
        (
            "helm install → every Pod Ready",
            median(installs, "every Pod Ready"),
            median(plain, "install → Ready"),
        ),
        ("... hooks (helm start → first workload created)", median(installs, "hooks"), ""),
        (
            "helm upgrade adding a partition → in Slurm",
            median(plain_adds, "in Slurm"),
            median(plain, "upgrade → new Pod Ready") + " (upgrade → new Pod Ready)",
        ),
        ("... helm returned (its hooks)", median(plain_adds, "helm returned (hooks)"), ""),
        ("... ConfigMap written", median(plain_adds, "ConfigMap written"), ""),
        ("... the sidecar recorded it applied", median(plain_adds, "recorded applied"), ""),
        (
            "the same, a partition with `MaxTime` (vouched for: no check)",
            median(vouched_adds, "in Slurm"),
            "",
        ),
        ("the same, a partition with `MinNodes` (the check runs)", median(checked_adds, "in Slurm"), ""),
        ("... helm returned (its hooks)", median(checked_adds, "helm returned (hooks)"), ""),
    ]
    for key in ("Pod deleting", "Pod gone", "new Pod created", "new Pod Ready"):
        rows.append((f"roll-out: the member's job end → {key}", median(rollouts, f"job end → {key}"), ""))
    print(f"\n{nodes} real Nodes, Slurm {slurm}, {runs} runs: median (min-max)")
    print("| step | sunk's Slurm chart | plain Deployment |")
    print("|---|---|---|")
    for label, ours, theirs in rows:
        print(f"| {label} | {ours} | {theirs} |")
    print(
        f"\ninstalls that found the Secrets (secrets hooks skipped): {[i['secrets kept'] for i in installs]}"
    )
    for i in installs:
        print(f"  Ready at (s after helm started): {i['each']}")
    if not all(r["member drained before its job ended"] for r in rollouts):
        print("warning: in some run the member was not drained before its job ended (raise --job-seconds)")


if __name__ == "__main__":
    main()
