"""Helpers the integration and end-to-end tests share: polling with deadlines and a small
slurmrestd client that checks Slurm's side independently of the scheduler's own code."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx

from sunk_dev import DevCluster, Layout, directory, prereqs, procs
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import Ports
from sunk_dev.slurmcluster import rest_version
from sunk_dev.trust import permissive_policy

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    every: float = 0.1,
    explain: Callable[[], str] | None = None,
) -> T:
    """Return the first truthy value of `probe`, or fail the test after `timeout` seconds.
    `explain`: what the failure message adds, read once the time is up (the state of the
    things the test waited on, so that a failure in CI says why without a rerun)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    told = ""
    if explain is not None:
        try:
            told = f"; {explain()}"
        except Exception as err:  # the timeout is the failure; this only adds to it
            told = f"; (could not explain: {err!r})"
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r}){told}")


def holds_for(probe: Callable[[], bool], *, seconds: float, what: str, every: float = 0.1) -> None:
    """Assert that `probe` stays true for a whole window (for "nothing happens" checks)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert probe(), f"{what} stopped holding"
        time.sleep(every)


def _plain(value: Any) -> Any:
    """Unwrap newer slurmrestd's {set, infinite, number} numbers."""
    if isinstance(value, dict) and "number" in value:
        return value["number"] if value.get("set", True) and not value.get("infinite") else None
    return value


# A flag in this list is the state `squeue` shows, ahead of the job's base state.
_SHOWN_FIRST = ("COMPLETING", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_HOLD", "SIGNALING", "STAGE_OUT")


def _state(value: Any) -> str:
    if isinstance(value, list):
        return next((f for f in _SHOWN_FIRST if f in value), value[0] if value else "UNKNOWN")
    return str(value)


class SlurmRest:
    """A plain slurmrestd client for the tests, independent of the scheduler's own code.
    It speaks the newest REST version the dev cluster serves and hands jobs back in one
    shape on every version: numbers unwrapped, `job_state` one word as `squeue` shows it."""

    def __init__(self, layout: Layout) -> None:
        token = layout.slurm_token.read_text().strip()
        self.version = rest_version(layout)
        self.modern = self.version != "v0.0.38"
        self.http = httpx.Client(
            base_url=f"{layout.rest_url}/slurm/{self.version}",
            headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token},
            timeout=30,
        )

    @property
    def mark_field(self) -> str:
        """Where the placeholder script writes its started mark on this version."""
        return "extra" if self.modern else "comment"

    def close(self) -> None:
        self.http.close()

    def job_body(
        self,
        script: str,
        *,
        nodelist: str | None = None,
        exclusive: bool = False,
        environment: dict[str, str] | None = None,
        **job: Any,
    ) -> dict[str, Any]:
        """A submit body for this version: `nodelist` and `exclusive` are spelled as the
        version wants; other fields are passed as they are."""
        env = {"PATH": "/usr/bin:/bin", **(environment or {})}
        spec: dict[str, Any] = {
            "current_working_directory": "/tmp",
            "standard_output": "/dev/null",  # never a slurm-N.out in the checkout
            "standard_error": "/dev/null",
        }
        if self.modern:
            spec["environment"] = [f"{k}={v}" for k, v in env.items()]
            if nodelist:
                spec["required_nodes"] = nodelist.split(",")
            if exclusive:
                spec["shared"] = ["none"]
            if isinstance(job.get("memory_per_node"), int):
                job["memory_per_node"] = {"set": True, "number": job["memory_per_node"]}
            return {"job": {**spec, **job, "script": script}}
        spec["environment"] = env
        if nodelist:
            spec["nodelist"] = nodelist
        if exclusive:
            spec["exclusive"] = "exclusive"
        return {"script": script, "job": {**spec, **job}}

    def post_job(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a submit body; Slurm's whole answer (job_id and errors)."""
        result: dict[str, Any] = self.http.post("/job/submit", json=body).json()
        return result

    def submit(self, script: str, **job: Any) -> int:
        data = self.post_job(self.job_body(script, **job))
        assert data.get("job_id") and not data.get("errors"), data
        return int(data["job_id"])

    @staticmethod
    def _normalize(raw: dict[str, Any]) -> dict[str, Any]:
        job = {key: _plain(value) for key, value in raw.items()}
        job["job_state"] = _state(raw.get("job_state"))
        return job

    def job(self, job_id: int) -> dict[str, Any]:
        data = self.http.get(f"/job/{job_id}").json()
        jobs: list[dict[str, Any]] = data.get("jobs", [])
        assert jobs, data
        return self._normalize(jobs[0])

    def jobs(self) -> list[dict[str, Any]]:
        """Every job slurmrestd lists. An answer with errors (slurmctld too busy to answer
        in time) is asked again, never read as "no jobs": an absence check would pass on it
        and a test would stop the scheduler that was about to cancel its jobs."""
        deadline = time.monotonic() + 20
        while True:
            resp = self.http.get("/jobs")
            data = resp.json() if resp.content else {}
            if resp.status_code == 200 and "jobs" in data and not data.get("errors"):
                return [self._normalize(j) for j in data["jobs"]]
            if time.monotonic() > deadline:
                answer = f"HTTP {resp.status_code} {resp.text[:300]}"
                raise AssertionError(f"slurmrestd could not list jobs: {answer}")
            time.sleep(0.2)

    def jobs_of_pod(self, uid: str) -> list[dict[str, Any]]:
        """Every job Slurm knows for a Pod UID, finished ones included."""
        return [j for j in self.jobs() if j.get("name", "").endswith(":" + uid)]

    def cancel(self, job_id: int) -> None:
        resp = self.http.delete(f"/job/{job_id}")
        assert resp.status_code == 200, resp.text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_slapd(root: Path) -> Iterator[Layout]:
    """The dev package's seeded slapd under `root`, on a free loopback port (never the one of
    a dev cluster running beside the tests), stopped by its PID afterwards."""
    layout = Layout(root, Ports().shifted(free_port() - Ports().ldap))
    for sub in (layout.pids, layout.logs):
        sub.mkdir(parents=True, exist_ok=True)
    prereqs.ensure_directory_packages(layout.logs / "setup.log")
    directory.start(layout)
    try:
        yield layout
    finally:
        procs.stop_many(procs.tracked(layout.pids), layout.pids, timeout=10)


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, and SIGKILL after 10 s: a process one of our tests started."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class SchedulerProcess:
    """`sunk scheduler` as a real process, so tests can kill and restart it."""

    def __init__(
        self,
        cluster: DevCluster,
        name: str,
        *args: str,
        instance: str = "",
        env: dict[str, str] | None = None,
        hooks_port: int | None = None,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.args = args
        self.extra_env = env or {}
        self.log = cluster.layout.logs / f"scheduler-{name}{'-' + instance if instance else ''}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # Jobs keep the hooks URL they were submitted with, so a restart keeps the port.
        self.hooks_port = hooks_port or free_port()
        self._hooks_port_chosen = hooks_port is None  # ours to choose again until it served
        self.metrics_port = free_port()
        self.probes_port = free_port()
        # Tests place Pods as any Slurm user unless they give a --policy of their own.
        self.policy = permissive_policy(cluster.layout)

    def start(self, *, wait: bool = True) -> SchedulerProcess:
        """Start it (and wait for its caches). A port `free_port` chose may be taken by
        someone else before the process binds it (another suite's connection, on a shared
        machine): then it is started again on other ports, twice at most."""
        for attempt in range(3):
            self._launch()
            if not wait:
                return self
            wait_for(
                lambda: self._synced(self.offset) or self._died(),
                timeout=30,
                what=f"scheduler {self.name} to sync its caches",
            )
            if attempt < 2 and self._died() and "address already in use" in self.output():
                self.metrics_port, self.probes_port = free_port(), free_port()
                if self._hooks_port_chosen:
                    self.hooks_port = free_port()
                continue
            break
        assert self.proc is not None and self.proc.poll() is None, f"scheduler exited; see {self.log}"
        self._hooks_port_chosen = False
        return self

    def _launch(self) -> None:
        env = {**os.environ, **self.cluster.env(), **self.extra_env}
        argv = [
            sys.executable,
            "-m",
            "sunk.cli",
            "scheduler",
            f"--scheduler-name={self.name}",
            f"--hooks-api-bind-address=127.0.0.1:{self.hooks_port}",
            *(
                ()
                if any(a.startswith("--hooks-tls-") for a in self.args)
                else ("--hooks-insecure-http=true",)
            ),
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probes_port}",
            *(() if any(a.startswith("--policy") for a in self.args) else (f"--policy={self.policy}",)),
            *self.args,
        ]
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def _synced(self, offset: int) -> bool:
        return "caches synced" in self.output(offset)

    def output(self, offset: int | None = None) -> str:
        """What this run (or, with offset 0, every run) logged."""
        with open(self.log, "rb") as f:
            f.seek(self.offset if offset is None else offset)
            return f.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def kill(self) -> None:
        """SIGKILL: no chance to clean up, like a crashed or evicted process."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.proc)


class OperatorProcess:
    """`sunk operator` as a real process on the dev cluster: app.py's wiring and the flags as
    the chart passes them. It signs its own tokens with the dev cluster's JWT key, as the
    chart's operator does, and names root, the dev cluster's SlurmUser."""

    def __init__(self, cluster: DevCluster, namespace: str, release: str, *args: str) -> None:
        layout = cluster.layout
        self.cluster = cluster
        self.log = layout.logs / f"operator-{release}.log"
        self.argv = [
            sys.executable,
            "-m",
            "sunk.cli",
            "operator",
            f"--namespace={namespace}",
            f"--release={release}",
            f"--kubeconfig={layout.kubeconfig}",
            f"--slurm-api-base={layout.rest_url}",
            f"--slurm-jwt-key-file={layout.slurm_conf.parent / 'jwt.key'}",
            "--slurm-user=root",
            "--conf-server=127.0.0.1:6817",  # only slurmd Pods use it, and none are made here
            f"--auth-secret={release}-auth",
            f"--metrics-port={free_port()}",
            f"--probes-port={free_port()}",
            "--log-format=text",
            *args,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        with open(self.log, "wb") as out:
            env = {**os.environ, **self.cluster.env()}
            proc = subprocess.Popen(self.argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.proc = proc
        wait_for(
            lambda: "caches synced" in self.output() or proc.poll() is not None,
            timeout=30,
            what="the operator to sync its caches",
        )
        assert proc.poll() is None, f"the operator exited:\n{self.output()[-2000:]}"
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.proc)


def make_pod(
    name: str,
    scheduler: str,
    *,
    cpu: str = "1",
    memory: str = "256Mi",
    gpus: int = 0,
    annotations: dict[str, str] | None = None,
    grace: int = 5,
    **spec: Any,
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    limits = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": limits}}
            ],
            **spec,
        },
    }


def condition(pod: dict[str, Any], kind: str = "PodScheduled") -> dict[str, Any]:
    for item in (pod.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return {}


def events_for(kube: AdminKube, namespace: str, pod: str) -> list[dict[str, Any]]:
    items = kube.get(
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        fieldSelector=f"regarding.name={pod}",
    )["items"]
    return sorted(items, key=lambda e: e.get("eventTime") or "")


def pod_story(kube: AdminKube, namespace: str, name: str) -> str:
    """A Pod's phase, conditions, containers' states and latest Events, for a failure message
    (what `kubectl describe` would show first), and the machine's busiest processes: on the
    2-core CI machine a Pod that never gets ready is most often one starved of CPU."""
    pod = kube.find(f"/api/v1/namespaces/{namespace}/pods/{name}")
    if pod is None:
        told = f"Pod {namespace}/{name} does not exist"
    else:
        status = pod.get("status") or {}
        conditions = ", ".join(f"{c['type']}={c['status']}" for c in status.get("conditions") or [])
        containers = "; ".join(
            f"{c['name']}: {next(iter(c.get('state') or {'?': 0}))}, {c.get('restartCount', 0)} restarts"
            for c in status.get("containerStatuses") or []
        )
        where = f"{status.get('phase')} on {pod['spec'].get('nodeName')}"
        told = f"Pod {namespace}/{name}: {where}, {conditions}; {containers}"
    events = kube.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.name={name}")
    latest = sorted(events["items"], key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")[-5:]
    notes = " | ".join(f"{e.get('reason')}: {e.get('message', '')[:200]}" for e in latest)
    return f"{told}; Events: {notes or 'none'}; busiest processes: {busiest_processes()}"


def busiest_processes(count: int = 5) -> str:
    """The machine's `count` processes with the highest share of a CPU over their lifetime
    (`ps`'s %CPU): a process spinning since it started leads."""
    shown = subprocess.run(
        ["ps", "-eo", "pcpu,etime,comm", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True
    )
    return ", ".join(" ".join(line.split()) for line in shown.stdout.splitlines()[:count])
