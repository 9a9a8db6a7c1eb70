"""How the benchmark watches without loading what it measures.

A Pod watch stream (not a list every few milliseconds: listing 1000 Pods costs the API
server more than the scheduler does), start marks the raw jobs write to a directory, and
CPU time per component read from /proc before and after each phase.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
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
    timeline: list[Gap] = field(default_factory=list)  # where each Pod's (job's) time went
    marks: dict[str, dict[str, float]] = field(default_factory=dict)  # per Pod: stage → s from the start

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
            "timeline": [vars(g) for g in self.timeline],
            "marks": self.marks,
        }


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


class PodWatch:
    """Records, per Pod name, when each milestone was first seen on a watch stream:
    submitted (job ID annotation), bound (nodeName), running (the kubelet's status phase),
    deleting (deletionTimestamp), gone; and the job ID each Pod was given."""

    def __init__(self, kube: AdminKube, namespace: str) -> None:
        self.seen: dict[str, dict[str, float]] = defaultdict(dict)
        self.job_ids: dict[str, int] = {}
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
        if job_id := (meta.get("annotations") or {}).get(JOB_ID_ANNOTATION):
            marks.setdefault("submitted", now)
            if job_id.isdigit():
                self.job_ids.setdefault(meta["name"], int(job_id))
        if pod["spec"].get("nodeName"):
            marks.setdefault("bound", now)
        if (pod.get("status") or {}).get("phase") == "Running":
            marks.setdefault("running", now)
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


# -- Where each Pod's time goes (issue #55) --------------------------------------------------
# What Slurm's daemons already log at `info`, each line stamped to the millisecond
# (LogTimeFormat's default, iso8601_ms): read once after a phase, so nothing is asked of
# them while it runs. Stage names are the timeline's.
SLURM_LOG_STAGES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # slurmctld accepted the submission (before it answers with the job ID)
    ("submitted", re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+) ")),
    # slurmctld allocated it nodes: its main scheduler, or backfill
    ("started", re.compile(r"sched: Allocate JobId=(\d+) ")),
    ("started", re.compile(r"sched/backfill: _start_job: Started JobId=(\d+) ")),
    # slurmd was asked to launch the batch script (slurmd-<node>.log)
    ("launched", re.compile(r"Launching batch job (\d+) ")),
    # the script's durable started mark, set with `scontrol update` (R4.2)
    ("marked", re.compile(r"setting (?:extra|comment) to .*: started for JobId=(\d+)\b")),
)
_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] ")


def slurm_log_marks(lines: Iterable[str], jobs: Collection[int] | None = None) -> dict[int, dict[str, float]]:
    """Job ID → stage → wall-clock time (epoch seconds) of the first line of each stage in
    Slurm's logs; only `jobs` when given. Slurm writes local time without a zone: read as
    this process's local time (the dev cluster's root and the host both keep UTC)."""
    marks: dict[int, dict[str, float]] = defaultdict(dict)
    for line in lines:
        stamp = _LOG_TIME.match(line)
        if not stamp:
            continue
        for stage, pattern in SLURM_LOG_STAGES:
            found = pattern.search(line, stamp.end())
            if not found:
                continue
            job = int(found.group(1))
            if jobs is None or job in jobs:
                marks[job].setdefault(stage, datetime.fromisoformat(stamp.group(1)).timestamp())
            break
    return dict(marks)


def read_slurm_logs(logs: Path, jobs: Collection[int]) -> dict[int, dict[str, float]]:
    """`slurm_log_marks` over slurmctld's log and every slurmd's in `logs`."""
    merged: dict[int, dict[str, float]] = defaultdict(dict)
    for path in sorted(logs.glob("slurm*.log")):
        if not (path.name == "slurmctld.log" or path.name.startswith("slurmd-")):
            continue
        with open(path, errors="replace") as f:
            for job, stages in slurm_log_marks(f, jobs).items():
                for stage, t in stages.items():
                    merged[job][stage] = min(t, merged[job].get(stage, t))
    return dict(merged)


@dataclass(frozen=True)
class Gap:
    """The time between two stages over the Pods (or jobs) that reached both."""

    start: str
    end: str
    count: int
    p50: float
    p99: float
    negative: int  # how many reached `end` before `start` (clock skew, or a broken promise)


def timeline_gaps(
    marks: dict[str, dict[str, float]], chain: Sequence[str], extra: Sequence[tuple[str, str]] = ()
) -> list[Gap]:
    """Median and p99 of each consecutive gap of `chain`, then of each (start, end) pair
    of `extra`, over the items whose marks hold both stages (times in one clock)."""
    gaps = []
    for start, end in [*itertools.pairwise(chain), *extra]:
        spans = [m[end] - m[start] for m in marks.values() if start in m and end in m]
        p50, p99 = percentile(spans, 50), percentile(spans, 99)
        gaps.append(Gap(start, end, len(spans), p50, p99, sum(s < 0 for s in spans)))
    return gaps


def gap_rows(label: str, gaps: Sequence[Gap], total: int) -> list[str]:
    """One table row per gap: | N / path | from → to | seen | p50 s | p99 s | before |."""
    return [
        f"| {label} | {g.start} → {g.end} | {g.count}/{total} | {g.p50:.2f} | {g.p99:.2f} | {g.negative} |"
        for g in gaps
    ]
