"""How the benchmark watches without loading what it measures.

A Pod watch stream (not a list every few milliseconds: listing 1000 Pods costs the API
server more than the scheduler does), start marks the raw jobs write to a directory, and
CPU time per component read from /proc before and after each phase.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sunk_dev.kubeapi import AdminKube

JOB_ID_ANNOTATION = "sunk.coreweave.com/job-id"


@dataclass
class Result:
    name: str
    count: int
    seconds: float  # first request → last one done
    latencies: list[float] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per component
    writes: dict[str, float] = field(default_factory=dict)  # API server writes per Pod
    calls: dict[str, float] = field(default_factory=dict)  # slurmrestd requests per Pod, by endpoint

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")

    def pct(self, p: float) -> float:
        return percentile(self.latencies, p)

    def figures(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "seconds": self.seconds,
            "rate": self.rate,
            "p50": self.pct(50),
            "p95": self.pct(95),
            "p99": self.pct(99),
            **self.extra,
            "cpu_s": self.cpu,
            "api_writes_per_pod": self.writes,
            "slurm_calls_by_endpoint": self.calls,
        }


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


class PodWatch:
    """Records, per Pod name, when each milestone was first seen on a watch stream:
    submitted (job ID annotation), bound (nodeName), deleting (deletionTimestamp), gone."""

    def __init__(self, kube: AdminKube, namespace: str) -> None:
        self.seen: dict[str, dict[str, float]] = defaultdict(dict)
        self._kube = kube
        self._namespace = namespace
        self._changed = threading.Condition()
        self._stop = threading.Event()
        listing = kube.get(f"/api/v1/namespaces/{namespace}/pods")
        self._version = listing["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self._namespace}/pods"
        while not self._stop.is_set():
            params = {"watch": "1", "resourceVersion": self._version, "allowWatchBookmarks": "true"}
            try:
                with self._kube.http.stream("GET", path, params=params, timeout=None) as resp:
                    for line in resp.iter_lines():
                        if self._stop.is_set():
                            return
                        if line:
                            self._record(json.loads(line))
            except Exception:  # a dropped stream resumes from the last version seen
                time.sleep(0.1)

    def _record(self, event: dict[str, Any]) -> None:
        now = time.monotonic()
        pod = event["object"]
        meta = pod["metadata"]
        self._version = meta.get("resourceVersion", self._version)
        if event["type"] == "BOOKMARK":
            return
        marks = self.seen[meta["name"]]
        if (meta.get("annotations") or {}).get(JOB_ID_ANNOTATION):
            marks.setdefault("submitted", now)
        if pod["spec"].get("nodeName"):
            marks.setdefault("bound", now)
        if meta.get("deletionTimestamp"):
            marks.setdefault("deleting", now)
        if event["type"] == "DELETED":
            marks.setdefault("deleting", now)
            marks.setdefault("gone", now)
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, mark: str, names: set[str], within: float) -> dict[str, float]:
        """The time each name reached `mark`, once all have or the deadline passed."""
        deadline = time.monotonic() + within
        with self._changed:
            while True:
                done = {n: self.seen[n][mark] for n in names if mark in self.seen.get(n, {})}
                left = deadline - time.monotonic()
                if len(done) == len(names) or left <= 0:
                    return done
                self._changed.wait(min(left, 1.0))

    def close(self) -> None:
        self._stop.set()


def read_marks(directory: Path, expected: int, within: float) -> dict[int, float]:
    """Job ID → the wall-clock time a raw job wrote into its file in `directory` (when its
    script started, or when it got SIGTERM), waiting up to `within` s for `expected` files."""
    deadline = time.monotonic() + within
    while len(os.listdir(directory)) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    marks: dict[int, float] = {}
    for entry in os.scandir(directory):
        text = Path(entry.path).read_text().strip()
        if text:
            marks[int(entry.name)] = float(text)
    return marks


# -- CPU time per component ------------------------------------------------------------------
JOB_PROCESSES = {"slurmstepd", "slurm_script", "bash", "sleep", "scontrol", "sha256sum", "openssl", "curl"}
TICKS = os.sysconf("SC_CLK_TCK")


def _component(pid: int, comm: str, named: dict[int, str]) -> str:
    if pid in named:
        return named[pid]
    if comm in JOB_PROCESSES:
        return "job processes"
    if comm.startswith("kworker/"):  # a kernel worker renames itself after the work it does
        return "kernel workers"
    return comm


def cpu_by_component(named: dict[int, str]) -> dict[str, float]:
    """CPU seconds used so far by each component, counting children they have reaped (the
    scripts' forks are reaped by the script). slurmstepd detaches from slurmd, so a job
    that ended was reaped by PID 1: what PID 1 reaped counts as job processes, or a job's
    CPU would vanish from one component and appear in another when it ends."""
    totals: dict[str, float] = defaultdict(float)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        pid = int(entry.name)
        fields = stat[stat.rindex(")") + 2 :].split()
        own, reaped = sum(int(f) for f in fields[11:13]) / TICKS, sum(int(f) for f in fields[13:15]) / TICKS
        totals[_component(pid, comm, named)] += own + (0 if pid == 1 else reaped)
        if pid == 1:
            totals["job processes"] += reaped
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    totals["machine (busy)"] = (sum(cpu[:7]) - cpu[3] - cpu[4]) / TICKS  # minus idle and iowait
    return dict(totals)


class CpuMeter:
    """CPU seconds per component over one phase."""

    def __init__(self, named: dict[int, str] | None = None) -> None:
        self.named = named or {}
        self._start = cpu_by_component(self.named)

    def used(self) -> dict[str, float]:
        end = cpu_by_component(self.named)
        spent = {k: v - self._start.get(k, 0.0) for k, v in end.items()}
        return {k: round(v, 1) for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v >= 0.05}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class ApiRequests:
    """API server requests over one phase, by verb, resource and subresource (from its
    own metrics), to count what each path costs the control plane per Pod."""

    def __init__(self, kube: AdminKube) -> None:
        self._kube = kube
        self._start = self._read()

    def _read(self) -> dict[str, float]:
        counts: dict[str, float] = defaultdict(float)
        for line in self._kube.http.get("/metrics").text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(
                part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(",")
            )
            verb = labels.get("verb", "").strip('"')
            if verb in ("WATCH", "GET", "LIST"):
                continue
            resource = labels.get("resource", "").strip('"')
            sub = labels.get("subresource", "").strip('"')
            counts[f"{verb} {resource}{'/' + sub if sub else ''}"] += float(line.split()[-1])
        return counts

    def writes(self) -> dict[str, float]:
        end = self._read()
        spent = {k: v - self._start.get(k, 0.0) for k, v in end.items()}
        return {k: v for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v > 0}
