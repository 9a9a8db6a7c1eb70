"""Fault injection for the promise "a Pod and its placeholder job live and die together".

A run starts its own scheduler as a real process, keeps a rolling population of Pods in a
fresh namespace (creating some, deleting some, scancelling some of their jobs; some of
them PodGroups, made, deleted and scancelled whole by tests/faults/gangs.py) and, all the
while, kills or freezes the processes the promise depends on: the scheduler, slurmctld,
slurmrestd and kube-apiserver. Then it stops, lets the system settle and checks ten rules
(six a Pod's, four a PodGroup's); docs/reliability.md describes them. It runs from pytest
(tests/faults/test_chaos.py, a short run) and as a command (the full run):

    .venv/bin/python -m tests.faults.chaos --faults 200 [--seed N] [--nodes 8]

Only processes named in the dev cluster's own PID files (and the scheduler this harness
started) are ever signalled, and every PID is checked against its recorded start time
right before the signal.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import grp
import json
import os
import pwd
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sunk.slurm.models import ACTIVE_STATES
from sunk_dev import ClusterSpec, DevCluster, DevClusterError, Layout, procs, slurmcluster, slurmrun, topology
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.slurmroot import process_root
from sunk_dev.slurmrun import run_cli
from tests.faults.gangs import GANG_VIOLATION_KINDS, GROUP_LABEL, Gangs
from tests.support import SchedulerProcess, SlurmRest, make_pod

Json = dict[str, Any]

ANNOTATION_PREFIX = "sunk.coreweave.com/"
# What the scheduler says when it deletes a Pod because Slurm ended (or lost, or moved) its job.
EXPLAINING_REASONS = frozenset(
    {
        "CancelledInSlurm",
        "Preempted",
        "TimeLimitReached",
        "PlaceholderJobEnded",
        "PlaceholderJobMoved",
        "PlaceholderJobFailed",
    }
)
# Job states only Slurm itself produces (the harness only ever scancels; the scheduler only
# cancels or signals): a Pod whose job reached one of these had a reason to go.
SLURM_MADE_STATES = frozenset(
    {
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "FAILED",
        "OUT_OF_MEMORY",
        "DEADLINE",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "SUSPENDED",
    }
)

FAULT_KINDS = (
    "kill-scheduler",
    "kill-slurmctld",
    "kill-slurmrestd",
    "kill-kube-apiserver",
    "stop-slurmrestd",
    "stop-kube-apiserver",
)
# The daemons faults are aimed at; the others are only watched (and restarted if they die).
TARGETS = ("slurmctld", "slurmrestd", "kube-apiserver")

VIOLATION_KINDS = {
    "two-active-jobs": "1  a Pod UID with two active placeholder jobs",
    "job-without-pod": "2  an active job without a live Pod",
    "deleted-job-alive": "3a a Pod deleted while nothing had ended its job",
    "deleted-no-event": "3b a Pod deleted without an Event saying why",
    "misplaced": "4  a bound Pod off its job's Node, or its job not RUNNING",
    "drained-no-event": "5  a Slurm node drained with no Event explaining it",
    "scheduler-exited": "6  the scheduler exited on its own",
    **GANG_VIOLATION_KINDS,  # rules 7 to 10, a PodGroup's: tests/faults/gangs.py
}
# Two active jobs of one Pod are normal for a moment (a rejected placement submits the new
# job before cancelling the old); seen together for this long, they are a violation.
TWO_JOBS_GRACE_S = 30.0
# Kubernetes timestamps have one-second resolution, Slurm's too.
CLOCK_SLACK_S = 1.0

# Errors of the API server, slurmrestd or Slurm's CLI that a fault may cause at any moment.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.HTTPError,
    KubeError,
    DevClusterError,
    subprocess.TimeoutExpired,
    ValueError,  # a half-written answer that is not JSON
    OSError,
)


class HarnessError(Exception):
    """The harness could not go on (a daemon did not come back): no verdict on the scheduler."""


class DaemonExited(HarnessError):
    """A restarted daemon exited before it answered."""


@dataclass(frozen=True)
class ChaosOptions:
    faults: int = 30
    seed: int = 1
    min_pods: int = 12
    max_pods: int = 20
    fault_gap_s: tuple[float, float] = (1.0, 4.0)
    down_s: tuple[float, float] = (0.0, 2.0)  # how long a killed process stays dead
    freeze_s: tuple[float, float] = (1.0, 5.0)
    settle_s: float = 90.0
    tick_s: float = 0.5
    creates_per_tick: int = 2
    delete_chance: float = 0.12  # per tick
    scancel_chance: float = 0.08  # per tick
    weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # in FAULT_KINDS order
    # PodGroups of 2 or 3 members (tests/faults/gangs.py): the chance that a tick short of
    # the target makes a group (else single Pods), then per tick: one deleted whole, one's
    # running job scancelled.
    group_chance: float = 0.2
    group_delete_chance: float = 0.025
    group_scancel_chance: float = 0.025


@dataclass
class Violation:
    kind: str
    message: str
    at: float  # wall time the problem was seen or happened
    needles: tuple[str, ...] = ()  # what to look for in the scheduler's log
    context: str = ""  # the faults around that time
    log: list[str] = field(default_factory=list)
    pod: str = ""  # the Pod it is about, if one
    events: list[str] = field(default_factory=list)  # the scheduler's Events on that Pod


@dataclass
class FaultRecord:
    index: int
    kind: str
    started: float
    ended: float
    detail: str


@dataclass(frozen=True)
class Seen:
    """One listing's word on the job a Pod named."""

    at: float
    job_id: int
    state: str  # "MISSING" when the listing did not have it
    start: int  # Slurm's start_time (0 when not started)


@dataclass
class PodTrack:
    """What the harness saw of one Pod, by UID."""

    uid: str
    name: str
    first_seen: float
    last_seen: float
    job_id: int | None = None
    node: str | None = None
    deleting_since: float | None = None  # when its deletion was asked for, if seen
    gone_at: float | None = None  # first listing without it
    deleted_by_harness: float | None = None
    bound_at: float | None = None  # first listing that showed it bound
    # The job the Pod named, each time Slurm's word on it changed.
    history: list[Seen] = field(default_factory=list)
    # Slurm's jobs of this UID in the first successful listing after it went (None: not yet).
    jobs_after: list[Json] | None = None
    group: str | None = None  # the PodGroup it is a member of
    job_ids: list[int] = field(default_factory=list)  # every job it named, in order

    @property
    def went(self) -> bool:
        return self.gone_at is not None or self.deleting_since is not None


@dataclass
class Report:
    seed: int
    faults_requested: int
    scheduler: str
    namespace: str
    nodes: int
    slurm: str
    started: float
    source: str = ""  # the commit the scheduler ran from, "+dirty" with local changes in src/
    duration_s: float = 0.0
    faults: list[FaultRecord] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    settled_after_s: float | None = None
    notes: list[str] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    harness_error: str | None = None
    # Every Pod the scheduler deleted: its name, job, the harness's cause and its Events,
    # so that a count in the tally can be explained after the namespace is gone.
    deletions: list[Json] = field(default_factory=list)

    def fault_counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.faults)

    def violation_counts(self) -> Counter[str]:
        return Counter(v.kind for v in self.violations)

    def table(self) -> str:
        when = dt.datetime.fromtimestamp(self.started, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines = [
            f"chaos run {when}: seed {self.seed}, {len(self.faults)}/{self.faults_requested} faults, "
            f"{self.nodes} nodes, Slurm {self.slurm}, scheduler {self.scheduler}, {self.duration_s:.0f} s"
            + (f", source {self.source}" if self.source else ""),
            "",
            f"  {'fault':<24}{'count':>6}",
        ]
        faults = self.fault_counts()
        lines += [f"  {kind:<24}{faults.get(kind, 0):>6}" for kind in FAULT_KINDS]
        lines += ["", f"  {'violation':<60}{'count':>6}"]
        found = self.violation_counts()
        lines += [f"  {text:<60}{found.get(kind, 0):>6}" for kind, text in VIOLATION_KINDS.items()]
        lines += ["", "  activity:"]
        lines += [f"    {key:<46}{value:>6}" for key, value in sorted(self.counters.items())]
        settled = (
            f"settled after {self.settled_after_s:.1f} s"
            if self.settled_after_s is not None
            else f"did NOT settle: {len(self.unsettled)} open item(s)"
        )
        lines.append(f"  {settled}")
        if self.harness_error:
            lines.append(f"  HARNESS ERROR: {self.harness_error}")
        return "\n".join(lines)

    def details(self, per_kind: int = 5, log_lines: int = 4) -> str:
        out: list[str] = []
        for kind, text in VIOLATION_KINDS.items():
            mine = [v for v in self.violations if v.kind == kind]
            if not mine:
                continue
            out.append(f"{text} ({len(mine)}):")
            for v in mine[:per_kind]:
                out.append(f"  - [{self.rel(v.at)}] {v.message}")
                if v.context:
                    out.append(f"      faults: {v.context}")
                out += [f"      event: {line}" for line in v.events[:6]]
                out += [f"      log: {line}" for line in v.log[:log_lines]]
            if len(mine) > per_kind:
                out.append(f"  … and {len(mine) - per_kind} more (see the JSON report)")
        for title, items in (("not settled", self.unsettled), ("notes", self.notes)):
            if items:
                out.append(f"{title}:")
                out += [f"  - {item}" for item in items[:20]]
        return "\n".join(out)

    def rel(self, at: float) -> str:
        return f"+{at - self.started:.1f}s"

    def to_json(self) -> Json:
        return {
            "seed": self.seed,
            "faults_requested": self.faults_requested,
            "scheduler": self.scheduler,
            "namespace": self.namespace,
            "nodes": self.nodes,
            "slurm": self.slurm,
            "source": self.source,
            "started": dt.datetime.fromtimestamp(self.started, dt.UTC).isoformat(),
            "duration_s": round(self.duration_s, 1),
            "fault_counts": dict(self.fault_counts()),
            "violation_counts": dict(self.violation_counts()),
            "counters": dict(self.counters),
            "settled_after_s": self.settled_after_s,
            "unsettled": self.unsettled,
            "deletions": self.deletions,
            "notes": self.notes,
            "harness_error": self.harness_error,
            "faults": [
                {
                    "index": f.index,
                    "kind": f.kind,
                    "at": self.rel(f.started),
                    "took_s": round(f.ended - f.started, 2),
                    "detail": f.detail,
                }
                for f in self.faults
            ],
            "violations": [
                {
                    "kind": v.kind,
                    "at": self.rel(v.at),
                    "message": v.message,
                    "pod": v.pod,
                    "faults": v.context,
                    "events": v.events,
                    "log": v.log,
                }
                for v in self.violations
            ],
        }


# -- the dev cluster's daemons ----------------------------------------------------------
@dataclass(frozen=True)
class Launch:
    """How to start one of the dev cluster's daemons again, read from /proc while it ran."""

    argv: tuple[str, ...]
    env: dict[str, str]


def _proc_strings(path: Path) -> list[str]:
    raw = path.read_bytes()
    return [part.decode(errors="surrogateescape") for part in raw.split(b"\0")[:-1]] if raw else []


def read_launch(layout: Layout, proc: procs.Tracked) -> Launch:
    """The argv and environment of a running daemon. A daemon chrooted into a Debian root
    (Slurm 24.11 and 26.05) shows the argv it was exec'd with inside the root, so it is
    wrapped again the way `sunk dev up` wrapped it, as the same user."""
    base = Path(f"/proc/{proc.pid}")
    argv = _proc_strings(base / "cmdline")
    env = dict(item.split("=", 1) for item in _proc_strings(base / "environ") if "=" in item)
    root = process_root(proc.pid)
    status = (base / "status").read_text()
    if not proc.alive() or not argv:
        raise HarnessError(f"{proc.name} (PID {proc.pid}) went away while its command line was read")
    if root not in (None, "/"):
        ids = {
            line.split(":")[0]: int(line.split()[1])
            for line in status.splitlines()
            if line[:4] in ("Uid:", "Gid:")
        }
        uid, gid = ids["Uid"], ids["Gid"]
        user = None if uid == 0 else f"{pwd.getpwuid(uid).pw_name}:{grp.getgrgid(gid).gr_name}"
        argv = slurmrun.runtime(layout).argv(argv, user=user)
    return Launch(tuple(argv), env)


class Daemons:
    """Kills, freezes and restarts the dev cluster's daemons, found only by their PID files."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.admin = AdminKube(layout)
        self.frozen: set[str] = set()
        self.killed: set[str] = set()  # killed by us and not yet running again
        self.retries = 0  # restarts that had to be tried again
        # Every daemon's launch, read at the start and again before each kill, so that one
        # that dies without our help can be brought back too.
        # A scheduler `sunk demo` left running is not part of the cluster.
        self.launches = {
            p.name: read_launch(layout, p)
            for p in procs.tracked(layout.pids)
            if p.alive() and not p.name.startswith("sunk-")
        }

    def close(self) -> None:
        self.admin.close()

    def tracked(self, name: str) -> procs.Tracked:
        proc = procs.load(self.layout.pids, name)
        if proc is None or not proc.alive():
            raise HarnessError(f"{name} is not running (no live PID under {self.layout.pids})")
        return proc

    def answers(self, name: str) -> bool:
        try:
            if name == "kube-apiserver":
                return self.admin.ready()
            if name == "slurmrestd":
                return slurmcluster.rest_ping(self.layout)
            if name == "slurmctld":
                return "UP" in run_cli(self.layout, "scontrol", "ping", timeout=5)
        except TRANSIENT_ERRORS:
            return False
        return True

    def wait_answering(self, proc: procs.Tracked, timeout: float = 120.0) -> float:
        started = time.monotonic()
        deadline = started + timeout
        while not self.answers(proc.name):
            if not proc.alive():
                raise DaemonExited(
                    f"{proc.name} exited after its restart; see {self.layout.logs / proc.name}.log"
                )
            if time.monotonic() > deadline:
                raise HarnessError(f"{proc.name} did not answer within {timeout:.0f} s of its restart")
            time.sleep(0.2)
        return time.monotonic() - started

    def kill_and_restart(self, name: str, down_s: float, while_down: Callable[[], None] | None = None) -> str:
        """SIGKILL daemon `name`, keep it down `down_s`, start it again as it was started.
        `while_down` runs once it is gone (e.g. to change its state files)."""
        proc = self.tracked(name)
        self.launches[name] = launch = read_launch(self.layout, proc)
        self._signal(proc, signal.SIGKILL)
        self.killed.add(name)
        try:
            # Gone means its port is free too: the last thread of a killed process may close
            # the listening socket a moment after the process shows as dead.
            port = self.port(name)
            deadline = time.monotonic() + 15
            while (proc.alive() or _listening(port)) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(down_s)
            if while_down is not None:
                while_down()
        finally:
            new, back, tries = self.start_again(name, launch)
        again = f" (started {tries} times: the earlier ones exited at once)" if tries > 1 else ""
        return (
            f"PID {proc.pid} killed, down {down_s:.1f} s, PID {new.pid} answering {back:.1f} s "
            f"after start{again}"
        )

    def port(self, name: str) -> int:
        ports = self.layout.ports
        return {"slurmctld": ports.slurmctld, "slurmrestd": ports.slurmrestd}.get(name, ports.apiserver)

    def start_again(self, name: str, launch: Launch, attempts: int = 5) -> tuple[procs.Tracked, float, int]:
        """Start a daemon and wait for it to answer. One that exits at once (its port still
        held by a connection the old one left, say) is started again, up to `attempts` times."""
        for attempt in range(1, attempts + 1):
            new = self.spawn(name, launch)
            if name not in TARGETS:
                return new, 0.0, attempt
            try:
                return new, self.wait_answering(new), attempt
            except DaemonExited:
                self.retries += 1
                if attempt == attempts:
                    raise
                time.sleep(1)
        raise AssertionError("unreachable")

    def spawn(self, name: str, launch: Launch) -> procs.Tracked:
        new = procs.spawn(
            name, launch.argv, self.layout.pids, self.layout.logs, env=launch.env, cwd=self.layout.root
        )
        self.killed.discard(name)
        return new

    def freeze(self, name: str, seconds: float) -> str:
        proc = self.tracked(name)
        self.frozen.add(name)
        try:
            self._signal(proc, signal.SIGSTOP)
            time.sleep(seconds)
        finally:
            if proc.alive():
                self._signal(proc, signal.SIGCONT)
            self.frozen.discard(name)
        return f"PID {proc.pid} stopped for {seconds:.1f} s"

    def _signal(self, proc: procs.Tracked, sig: signal.Signals) -> None:
        # The PID file's start time must still match: a PID reused by an unrelated program
        # is never signalled.
        if not proc.alive():
            raise HarnessError(f"{proc.name} (PID {proc.pid}) is no longer the process its PID file names")
        os.kill(proc.pid, sig)

    def dead(self) -> list[str]:
        """Daemons of the cluster that are not running (and that we did not just kill)."""
        return [
            name
            for name in self.launches
            if name not in self.killed and not ((p := procs.load(self.layout.pids, name)) and p.alive())
        ]

    def restore(self) -> list[str]:
        """Everything running and answering again: resumes what is frozen, restarts what
        is dead. Returns what it had to do."""
        done = []
        for name in TARGETS:
            proc = procs.load(self.layout.pids, name)
            if proc is not None and proc.alive() and _stopped(proc.pid):
                os.kill(proc.pid, signal.SIGCONT)
                done.append(f"resumed {name}")
        self.frozen.clear()
        for name in sorted(set(self.dead()) | self.killed):
            self.start_again(name, self.launches[name])
            done.append(f"restarted {name}")
        for name in TARGETS:
            proc = self.tracked(name)
            if not self.answers(name):
                self.wait_answering(proc)
        return done


def _listening(port: int) -> bool:
    """Something listens on this TCP port (any address), per /proc/net/tcp and tcp6."""
    wanted = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[1].endswith(wanted) and fields[3] == "0A":
                return True
    return False


def _stopped(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] in ("T", "t")


# -- the scheduler under test -----------------------------------------------------------
class SchedulerUnderTest:
    """The scheduler as a real process; knows when it is down on purpose."""

    def __init__(self, cluster: DevCluster, name: str) -> None:
        self.proc = SchedulerProcess(cluster, name)
        self.lock = threading.Lock()
        self.down_on_purpose = False

    def start(self) -> None:
        self.proc.start()

    def kill_and_restart(self, down_s: float) -> str:
        with self.lock:
            pid = self.proc.proc.pid if self.proc.proc else 0
            self.down_on_purpose = True
            self.proc.kill()
        try:
            time.sleep(down_s)
        finally:
            with self.lock:
                self.proc.start(wait=False)
                self.down_on_purpose = False
        return f"PID {pid} killed, down {down_s:.1f} s"

    def exited_on_its_own(self) -> str | None:
        """If the scheduler died without our help: how, after starting it again."""
        with self.lock:
            if self.down_on_purpose or self.proc.alive():
                return None
            assert self.proc.proc is not None
            code = self.proc.proc.returncode
            tail = [line for line in self.proc.output().splitlines() if line.strip()][-3:]
            self.proc.start(wait=False)
        return f"exit code {code}; last lines: {' | '.join(tail) or '(none)'}"

    def stop(self) -> None:
        with self.lock:
            self.down_on_purpose = True
            self.proc.stop()


# -- one run ----------------------------------------------------------------------------
def _uid_of(job: Json) -> str:
    return str(job.get("name", "")).rsplit(":", 1)[-1]


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _not_readopted_because(event: Json) -> str:
    """Why the scheduler deleted a Pod whose job Slurm no longer had instead of re-adopting
    it, from its PlaceholderJobEnded note, in a few words fit for a tally (no node names or
    job IDs, so that like reasons count together)."""
    note = str(event.get("note") or "")
    found = re.search(r"cannot be re-adopted(?: on \S+)?: (.*); deleting the Pod", note)
    if found:
        return re.sub(r"\bsn-\S+|\d+", "N", found[1])
    return "no evidence it was lost, not ended (not seen running by this scheduler process lately)"


def _job_word(job: Json) -> str:
    states = "+".join(job.get("states") or [job.get("job_state", "?")])
    where = f" on {job['nodes']}" if job.get("nodes") else ""
    times = ""
    if job.get("job_state") not in ("RUNNING", "PENDING"):
        times = f", start_time {job.get('start_time') or 0}, end_time {job.get('end_time') or 0}"
    return f"job {job['job_id']} {states}{where}{times}"


def list_jobs(slurm: SlurmRest) -> list[Json] | None:
    """Every job Slurm knows, or None when the answer cannot be trusted (slurmrestd or
    slurmctld down: an empty list with errors must not read as "no jobs")."""
    resp = slurm.http.get("/jobs")
    if resp.status_code != 200:
        return None
    data = resp.json()
    if data.get("errors"):
        return None
    jobs = []
    for raw in data.get("jobs", []):
        job = SlurmRest._normalize(raw)
        state = raw.get("job_state")
        job["states"] = list(state) if isinstance(state, list) else [str(state)]
        jobs.append(job)
    return jobs


class ChaosRun:
    def __init__(
        self,
        cluster: DevCluster,
        kube: AdminKube,
        slurm: SlurmRest,
        options: ChaosOptions,
        log: Callable[[str], None] = print,
    ) -> None:
        self.cluster = cluster
        self.layout = cluster.layout
        self.kube = kube
        self.slurm = slurm
        self.options = options
        self.say = log
        tag = uuid.uuid4().hex[:6]
        self.name = f"chaos-{tag}"
        self.namespace = f"chaos-{tag}"
        self.prefix = f"sunk:{self.name}:"
        self.fault_rng = random.Random(f"{options.seed}:faults")
        self.pop_rng = random.Random(f"{options.seed}:pods")
        spec = cluster.spec() or ClusterSpec()
        self.report = Report(
            seed=options.seed,
            faults_requested=options.faults,
            scheduler=self.name,
            namespace=self.namespace,
            nodes=spec.nodes,
            slurm=spec.slurm,
            started=time.time(),
            source=_source(),
        )
        self.tracks: dict[str, PodTrack] = {}
        self.pods_now: dict[str, Json] | None = None  # uid → Pod, latest listing
        self.jobs_now: dict[int, Json] | None = None  # job ID → our jobs, latest listing
        self.scancels: dict[int, tuple[str, float]] = {}  # job ID → (Pod UID, when)
        self.actions: list[str] = []  # what the harness did to Pods and jobs, for the report
        self.two_jobs_since: dict[tuple[str, frozenset[int]], float] = {}
        self.reported_pairs: set[tuple[str, frozenset[int]]] = set()
        self.hosts: dict[str, str] = {}
        self.target = options.min_pods
        self.next_target_at = 0.0
        self.seq = 0
        self.stop_population = threading.Event()
        self.population_error: str | None = None
        self.lock = threading.Lock()  # guards the report and the tracks across the two threads
        self.initially_drained: set[str] = set()
        self.fresh = False  # the last observe() saw both sides
        self._events: list[Json] | None = None
        self._node_events: list[Json] | None = None
        self.daemons = Daemons(self.layout)
        self.sched = SchedulerUnderTest(cluster, self.name)
        self.gangs = Gangs(self, options.seed, TRANSIENT_ERRORS)

    # -- small helpers --------------------------------------------------------------------
    def violation(
        self, kind: str, message: str, at: float | None = None, needles: tuple[str, ...] = (), pod: str = ""
    ) -> None:
        with self.lock:
            self.report.violations.append(Violation(kind, message, at or time.time(), needles, pod=pod))
        self.say(f"  ! {kind}: {message}")

    def note(self, text: str) -> None:
        with self.lock:
            self.report.notes.append(text)
        self.say(f"  note: {text}")

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.report.counters[what] += n

    def stamp(self) -> str:
        return f"[{time.time() - self.report.started:7.1f}s]"

    def pod_path(self, name: str = "") -> str:
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        return f"{base}/{name}" if name else base

    def load_hosts(self) -> None:
        pods = self.kube.get(f"/api/v1/namespaces/{topology.SLURMD_NAMESPACE}/pods")["items"]
        self.hosts = {
            p["metadata"]["labels"][topology.SLURM_NODE_LABEL]: p["spec"]["nodeName"]
            for p in pods
            if topology.SLURM_NODE_LABEL in (p["metadata"].get("labels") or {}) and p["spec"].get("nodeName")
        }

    def drained(self) -> dict[str, str]:
        out = run_cli(self.layout, "sinfo", "-h", "-N", "-t", "drain,draining,drained", "-o", "%N|%E")
        return dict(line.split("|", 1) for line in set(out.splitlines()) if "|" in line)

    # -- watching both sides ---------------------------------------------------------------
    def observe(self) -> bool:
        """One listing of the namespace's Pods, then one of Slurm's jobs. True if both
        answered. The job listing comes second, so it is the first one *after* any
        disappearance the Pod listing revealed."""
        ok = True
        try:
            self._observe_pods(self.kube.get(self.pod_path())["items"])
        except TRANSIENT_ERRORS:
            self.count("pod listings failed")
            ok = False
        try:
            jobs = list_jobs(self.slurm)
        except TRANSIENT_ERRORS:
            jobs = None
        if jobs is None:
            self.count("job listings failed")
            self.fresh = False
            return False
        self._observe_jobs(jobs)
        self.fresh = ok
        return ok

    def _observe_pods(self, items: list[Json]) -> None:
        now = time.time()
        seen: dict[str, Json] = {}
        with self.lock:
            for pod in items:
                meta = pod["metadata"]
                uid = meta["uid"]
                seen[uid] = pod
                track = self.tracks.get(uid)
                if track is None:
                    track = self.tracks[uid] = PodTrack(uid, meta["name"], now, now)
                    track.deleted_by_harness = self.gangs.deleted_at.get(meta["name"])
                track.last_seen = now
                raw = (meta.get("annotations") or {}).get(ANNOTATION_PREFIX + "job-id")
                if raw and str(raw).isdigit():
                    track.job_id = int(raw)
                    if track.job_ids[-1:] != [track.job_id]:
                        track.job_ids.append(track.job_id)
                track.group = track.group or (meta.get("labels") or {}).get(GROUP_LABEL)
                track.node = (pod.get("spec") or {}).get("nodeName") or None
                if track.node and track.bound_at is None:
                    track.bound_at = now
                if meta.get("deletionTimestamp") and track.deleting_since is None:
                    # The timestamp is when the grace period ends, not when deletion began.
                    end = _ts(meta["deletionTimestamp"]) or now
                    track.deleting_since = end - float(meta.get("deletionGracePeriodSeconds") or 0)
            for uid, track in self.tracks.items():
                if track.gone_at is None and uid not in seen:
                    track.gone_at = now
            self.pods_now = seen

    def _observe_jobs(self, jobs: list[Json]) -> None:
        now = time.time()
        ours = {int(j["job_id"]): j for j in jobs if str(j.get("name", "")).startswith(self.prefix)}
        with self.lock:
            self.jobs_now = ours
            self.gangs.observe_jobs(ours.values())
            for track in self.tracks.values():
                if not track.went and track.job_id is not None:
                    job = ours.get(track.job_id)
                    if job is None or _uid_of(job) != track.uid:
                        job = None
                    state = job["job_state"] if job is not None else "MISSING"
                    start = int(job.get("start_time") or 0) if job is not None else 0
                    last = track.history[-1] if track.history else None
                    if last is None or (last.job_id, last.state, last.start) != (track.job_id, state, start):
                        track.history.append(Seen(now, track.job_id, state, start))
                if track.went and track.jobs_after is None and track.deleted_by_harness is None:
                    track.jobs_after = [j for j in ours.values() if _uid_of(j) == track.uid]
            active: dict[str, set[int]] = {}
            for job in ours.values():
                if job["job_state"] in ACTIVE_STATES:
                    active.setdefault(_uid_of(job), set()).add(int(job["job_id"]))
            pairs = {(uid, frozenset(ids)) for uid, ids in active.items() if len(ids) > 1}
            for pair in list(self.two_jobs_since):
                if pair not in pairs:
                    del self.two_jobs_since[pair]
            late = []
            for pair in pairs:
                since = self.two_jobs_since.setdefault(pair, now)
                if now - since >= TWO_JOBS_GRACE_S and pair not in self.reported_pairs:
                    self.reported_pairs.add(pair)
                    late.append((pair, since))
        for (uid, ids), since in late:
            name = self.tracks[uid].name if uid in self.tracks else "?"
            self.violation(
                "two-active-jobs",
                f"Pod {name} ({uid}) had jobs {sorted(ids)} active together for {now - since:.0f} s "
                "during the run",
                at=since,
                needles=(name, *(f"job {i}" for i in ids)),
                pod=name,
            )

    # -- the population -------------------------------------------------------------------
    def live_tracks(self) -> list[PodTrack]:
        with self.lock:
            return [t for t in self.tracks.values() if not t.went and t.deleted_by_harness is None]

    def population_loop(self) -> None:
        try:
            while not self.stop_population.is_set():
                started = time.monotonic()
                self.observe()
                self.check_scheduler()
                self.act()
                self.stop_population.wait(max(0.0, self.options.tick_s - (time.monotonic() - started)))
        except Exception as err:  # a harness bug: stop the run rather than report nonsense
            self.population_error = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
            self.stop_population.set()

    def act(self) -> None:
        rng, opts = self.pop_rng, self.options
        now = time.monotonic()
        if now >= self.next_target_at:
            self.target = rng.randint(opts.min_pods, opts.max_pods)
            self.next_target_at = now + 15
        live = self.live_tracks()
        made = self.gangs.act(
            self.target - len(live), opts.group_chance, opts.group_delete_chance, opts.group_scancel_chance
        )
        for _ in range(min(self.target - len(live) - made, opts.creates_per_tick)):
            self.create_pod()
        # A group's members are deleted and scancelled as a group (self.gangs), never alone.
        live = [t for t in live if not t.group and t.name not in self.gangs.members_of()]
        if live and rng.random() < opts.delete_chance:
            self.delete_pod(rng.choice(live))
        if rng.random() < opts.scancel_chance:
            by_uid = {t.uid: t for t in live}
            with self.lock:
                running = [
                    j
                    for j in (self.jobs_now or {}).values()
                    if j["job_state"] == "RUNNING"
                    and _uid_of(j) in by_uid
                    and by_uid[_uid_of(j)].job_id == j["job_id"]
                    and j["job_id"] not in self.scancels
                ]
            if running:
                self.scancel(rng.choice(running))

    def create_pod(self) -> None:
        rng = self.pop_rng
        self.seq += 1
        name = f"p{self.seq:05d}"
        cpu = rng.choice(["250m", "500m", "500m", "1", "1", "2"])
        memory = rng.choice(["128Mi", "256Mi", "512Mi"])
        gpus = 1 if rng.random() < 0.2 else 0
        try:
            pod = self.kube.create(
                self.pod_path(), make_pod(name, self.name, cpu=cpu, memory=memory, gpus=gpus)
            )
        except TRANSIENT_ERRORS:
            self.count("pod creations failed")  # it may exist anyway: the next listing tells
            return
        now = time.time()
        uid = pod["metadata"]["uid"]
        with self.lock:
            self.tracks.setdefault(uid, PodTrack(uid, name, now, now))
        self.count("pods created")

    def track_created(self, uid: str, name: str, group: str) -> None:
        """A group member the API server just made (tests/faults/gangs.py)."""
        now = time.time()
        with self.lock:
            self.tracks.setdefault(uid, PodTrack(uid, name, now, now)).group = group

    def delete_pod(self, track: PodTrack) -> None:
        # Recorded before the request: a DELETE cut short by a fault may still have happened.
        with self.lock:
            track.deleted_by_harness = time.time()
            self.actions.append(f"{self.report.rel(track.deleted_by_harness)} delete Pod {track.name}")
        try:
            self.kube.delete(self.pod_path(track.name))
        except TRANSIENT_ERRORS:
            self.count("pod deletions failed")
            return
        self.count("pods deleted")

    def scancel(self, job: Json) -> None:
        job_id = int(job["job_id"])
        with self.lock:
            self.scancels[job_id] = (_uid_of(job), time.time())
            self.actions.append(f"{self.report.rel(time.time())} scancel job {job_id} of {_pod_key_of(job)}")
        try:
            run_cli(self.layout, "scancel", str(job_id), timeout=5)
        except TRANSIENT_ERRORS:
            self.count("scancels failed")
            return
        self.count("jobs scancelled")

    def check_scheduler(self) -> None:
        how = self.sched.exited_on_its_own()
        if how is not None:
            self.violation("scheduler-exited", f"the scheduler exited on its own ({how}); started it again")

    # -- faults ---------------------------------------------------------------------------
    def inject(self, index: int, kind: str) -> FaultRecord:
        rng, opts = self.fault_rng, self.options
        started = time.time()
        if kind == "kill-scheduler":
            detail = self.sched.kill_and_restart(rng.uniform(*opts.down_s))
        elif kind.startswith("kill-"):
            detail = self.daemons.kill_and_restart(kind.removeprefix("kill-"), rng.uniform(*opts.down_s))
        else:
            detail = self.daemons.freeze(kind.removeprefix("stop-"), rng.uniform(*opts.freeze_s))
        record = FaultRecord(index, kind, started, time.time(), detail)
        with self.lock:
            self.report.faults.append(record)
        self.say(f"{self.stamp()} fault {index}/{opts.faults} {kind}: {detail}")
        return record

    def fault_loop(self) -> None:
        opts = self.options
        for index in range(1, opts.faults + 1):
            if self.stop_population.wait(self.fault_rng.uniform(*opts.fault_gap_s)):
                raise HarnessError(f"the population thread stopped: {self.population_error}")
            kind = self.fault_rng.choices(FAULT_KINDS, weights=opts.weights)[0]
            self.check_scheduler()
            self.inject(index, kind)
            dead = self.daemons.dead()
            if dead:
                self.note(
                    f"after fault {index}, daemons died on their own: {', '.join(dead)}; restarting them"
                )
                self.daemons.restore()

    # -- settling and checking ------------------------------------------------------------
    def settle(self) -> None:
        opts = self.options
        started = time.monotonic()
        deadline = started + opts.settle_s
        while True:
            self.gangs.finish()  # a group's creation or deletion a fault cut short
            fresh = self.observe()
            self.check_scheduler()
            open_items = self.open_items() if fresh else ["no fresh listing of Pods and jobs"]
            if not open_items:
                self.report.settled_after_s = time.monotonic() - started
                self.report.unsettled = []
                return
            if time.monotonic() > deadline and (fresh or time.monotonic() > deadline + 30):
                if not fresh:
                    raise HarnessError("no listing of both Pods and jobs succeeded after the faults")
                self.report.unsettled = open_items
                return
            time.sleep(1)

    def open_items(self) -> list[str]:
        """What keeps the system from a resting state: a Pod terminating, a Pod without
        exactly one active job, an active job without its Pod, a binding still to come."""
        pods, jobs = self.pods_now or {}, self.jobs_now or {}
        items = []
        active: dict[str, list[Json]] = {}
        for job in jobs.values():
            if job["job_state"] in ACTIVE_STATES:
                active.setdefault(_uid_of(job), []).append(job)
        for uid, pod in pods.items():
            meta, mine = pod["metadata"], active.get(uid, [])
            where = (pod.get("spec") or {}).get("nodeName")
            if meta.get("deletionTimestamp"):
                items.append(f"Pod {meta['name']} is still terminating")
            elif len(mine) != 1:
                items.append(f"Pod {meta['name']} has {len(mine)} active jobs")
            elif where and mine[0]["job_state"] != "RUNNING":
                items.append(f"Pod {meta['name']} is bound but {_job_word(mine[0])}")
            elif not where and mine[0]["job_state"] != "PENDING":
                items.append(f"Pod {meta['name']} is unbound with {_job_word(mine[0])}")
        for uid, mine in active.items():
            if uid not in pods:
                items += [f"{_job_word(j)} has no Pod" for j in mine]
        return items

    def context(self, at: float) -> str:
        """The faults shortly before (or during) a moment, to read a violation against."""
        near = [f for f in self.report.faults if f.started - 2 <= at and at <= f.ended + 15]
        if not near:
            earlier = [f for f in self.report.faults if f.ended < at]
            near = earlier[-1:]
        return "; ".join(f"#{f.index} {f.kind} at {self.report.rel(f.started)}" for f in near)

    def check(self) -> None:
        """Rules 1 to 6 on the settled state (rule 3 over the whole run)."""
        now = time.time()
        pods, jobs = self.pods_now or {}, self.jobs_now or {}
        try:
            self.load_hosts()
        except TRANSIENT_ERRORS as err:
            self.note(f"could not re-read the slurmd Pods ({err}); using the map from the start")
        active: dict[str, list[Json]] = {}
        for job in jobs.values():
            if job["job_state"] in ACTIVE_STATES:
                active.setdefault(_uid_of(job), []).append(job)
        live = {uid: p for uid, p in pods.items() if not p["metadata"].get("deletionTimestamp")}
        name_of = {uid: t.name for uid, t in self.tracks.items()}

        # 1. One active job per Pod UID.
        for uid, mine in active.items():
            if len(mine) > 1:
                name = name_of.get(uid, "?")
                words = ", ".join(_job_word(j) for j in mine)
                self.violation(
                    "two-active-jobs",
                    f"Pod {name} ({uid}) has {len(mine)} active jobs after settling: {words}",
                    at=now,
                    needles=(name, *(f"job {j['job_id']}" for j in mine)),
                    pod=name,
                )
        # 2. Every active job has a live Pod.
        for uid, mine in active.items():
            if uid in live:
                continue
            name = name_of.get(uid, _pod_key_of(mine[0]))
            track = self.tracks.get(uid)
            fate = "never seen by the harness"
            if track is not None:
                fate = "terminating" if uid in pods else f"gone since {self.report.rel(track.gone_at or now)}"
                if track.deleted_by_harness:
                    fate += f" (deleted by the harness at {self.report.rel(track.deleted_by_harness)})"
            for job in mine:
                self.violation(
                    "job-without-pod",
                    f"{_job_word(job)} is active but its Pod {name} ({uid}) is {fate}",
                    at=track.gone_at if track and track.gone_at else now,
                    needles=(name, f"job {job['job_id']}"),
                    pod=name,
                )
        # 3. A Pod the harness did not delete went only with its job ended, and an Event.
        self.check_disappearances()
        readopted = [e for e in self.events() if e.get("reason") == "PlaceholderReadopted"]
        self.count("Slurm lost the job, Pod re-adopted", len(readopted))
        # 4. Bound Pods sit on the Node hosting their job's Slurm node, and the job runs.
        for uid, pod in live.items():
            node = (pod.get("spec") or {}).get("nodeName")
            if not node:
                continue
            name = pod["metadata"]["name"]
            raw = ((pod["metadata"].get("annotations") or {}).get(ANNOTATION_PREFIX + "job-id")) or ""
            found = jobs.get(int(raw)) if raw.isdigit() else None
            placeholder = found if found is not None and _uid_of(found) == uid else None
            problem = None
            if placeholder is None:
                problem = f"names job {raw or '(none)'}, which Slurm does not have for this Pod"
            elif placeholder["job_state"] != "RUNNING":
                problem = f"its {_job_word(placeholder)} is not RUNNING"
            else:
                slurm_nodes = [n for n in str(placeholder.get("nodes") or "").split(",") if n]
                host = self.hosts.get(slurm_nodes[0]) if len(slurm_nodes) == 1 else None
                if host != node:
                    problem = (
                        f"its {_job_word(placeholder)} is on {slurm_nodes}, hosted by {host}, not {node}"
                    )
            if problem:
                self.violation(
                    "misplaced",
                    f"Pod {name} ({uid}) bound to {node}: {problem}",
                    at=now,
                    needles=(name, f"job {raw}"),
                    pod=name,
                )
        # 5. A drained Slurm node has a NodeDrained Event naming it.
        try:
            drained = self.drained()
        except TRANSIENT_ERRORS as err:
            self.note(f"could not list drained nodes: {err}")
            drained = {}
        # Drains that name a Pod are told on it; others (an administrator's, Slurm's own
        # "Duplicate jobid") on the Node hosting the Slurm node, whose Events live in `default`.
        drain_events = [e for e in [*self.events(), *self.node_events()] if e.get("reason") == "NodeDrained"]
        for node, reason in sorted(drained.items()):
            if node in self.initially_drained:
                continue
            explained = [e for e in drain_events if _mentions(e.get("note") or "", node)]
            if explained:
                self.count("drained nodes with a NodeDrained Event")
                continue
            # sunk's drains (the scheduler's or the placeholder script's) name the Pod:
            # "sunk: Pod <namespace>/<name> still running at KillWait (job <id>)".
            parts = reason.split()
            ours = reason.startswith("sunk:") and len(parts) > 2
            key = parts[2] if ours else ""
            by = "by sunk (scheduler or placeholder script)" if ours else "by Slurm itself, not by sunk"
            self.violation(
                "drained-no-event",
                f"Slurm node {node} is drained {by} ({reason!r}) and no NodeDrained Event names it",
                at=now,
                needles=(node, *((key,) if key else ())),
                pod=key.split("/", 1)[-1],
            )
        # 6. The scheduler is still running.
        self.check_scheduler()
        # 7 to 10. PodGroups bound whole, on one job, gone together, re-adopted whole.
        self.gangs.check(self.events(), now)

    def events(self) -> list[Json]:
        """The scheduler's Events in the namespace, read once, after settling."""
        if self._events is None:
            items = self.kube.get(f"/apis/events.k8s.io/v1/namespaces/{self.namespace}/events")["items"]
            self._events = [e for e in items if e.get("reportingController") == self.name]
        return self._events

    def node_events(self) -> list[Json]:
        """The scheduler's Events on Nodes (drains Slurm made), read once, after settling."""
        if self._node_events is None:
            items = self.kube.get("/apis/events.k8s.io/v1/namespaces/default/events")["items"]
            self._node_events = [e for e in items if e.get("reportingController") == self.name]
        return self._node_events

    def check_disappearances(self) -> None:
        by_uid: dict[str, list[Json]] = {}
        for event in self.events():
            by_uid.setdefault((event.get("regarding") or {}).get("uid") or "", []).append(event)
        for track in self.tracks.values():
            if not track.went or track.deleted_by_harness is not None:
                continue
            events = sorted(by_uid.get(track.uid, []), key=lambda e: e.get("eventTime") or "")
            why = [e for e in events if e.get("reason") in EXPLAINING_REASONS]
            event_at = _ts(why[0].get("eventTime")) if why else None
            went_at = track.deleting_since or event_at or track.gone_at or time.time()
            needles = (track.name, *((f"job {track.job_id}",) if track.job_id else ()))
            # A binding the harness's polling missed (the Pod went a moment after) still
            # shows in the scheduler's Scheduled Event.
            scheduled = any(e.get("reason") == "Scheduled" for e in events)
            cause = self.cause(track, went_at, why[0] if why else None, scheduled=scheduled)
            self.count(f"scheduler deletions: {cause[0] if cause else 'no cause found'}")
            if track.group:
                self.count(
                    f"group members deleted by the scheduler: {cause[0] if cause else 'no cause found'}"
                )
            if why and "no longer exists in Slurm" in str(why[0].get("note")):
                self.count(f"Slurm lost the job, Pod deleted: {_not_readopted_because(why[0])}")
            self.report.deletions.append(
                {
                    "pod": track.name,
                    "uid": track.uid,
                    "group": track.group,
                    "jobs": track.job_ids,
                    "node": track.node,
                    "went": self.report.rel(went_at),
                    "cause": cause[0] if cause else None,
                    "events": [f"{e.get('eventTime')} {e.get('reason')}: {e.get('note')}" for e in events],
                }
            )
            if not why:
                seen = ", ".join(sorted({str(e.get("reason")) for e in events})) or "none"
                self.violation(
                    "deleted-no-event",
                    f"Pod {track.name} ({track.uid}) was deleted by someone other than the harness at "
                    f"{self.report.rel(went_at)} with no Event saying why (its Events: {seen}; job "
                    f"{track.job_id}; what the harness saw: {cause[1] if cause else 'no cause'})",
                    at=went_at,
                    needles=needles,
                    pod=track.name,
                )
            if cause is None:
                after = track.jobs_after
                right_after = (
                    "none came"
                    if after is None
                    else "; ".join(_job_word(j) for j in after if track.job_id in (None, j["job_id"]))
                    or "no job of it"
                )
                last = [h for h in track.history if h.at <= went_at][-1:]
                before = (
                    f"job {last[0].job_id} {last[0].state} (start_time {last[0].start}) "
                    f"at {self.report.rel(last[0].at)}"
                    if last
                    else "nothing"
                )
                said = f"Event {why[0]['reason']}: {why[0].get('note')}" if why else "no Event"
                self.violation(
                    "deleted-job-alive",
                    f"Pod {track.name} ({track.uid}) on {track.node or 'no Node'} was deleted at "
                    f"{self.report.rel(went_at)}, yet neither Slurm nor the harness had ended job "
                    f"{track.job_id} (Slurm's last listing before: {before}; first listing after: "
                    f"{right_after}; {said})",
                    at=went_at,
                    needles=needles,
                    pod=track.name,
                )

    def cause(
        self, track: PodTrack, went_at: float, event: Json | None, *, scheduled: bool = False
    ) -> tuple[str, str] | None:
        """Why the Pod could go, as Slurm and the harness's own actions show it; None if
        nothing shows its job had ended. The first item is a category for the tally."""
        scancelled = [
            job_id
            for job_id, (uid, at) in self.scancels.items()
            if uid == track.uid and at <= went_at + CLOCK_SLACK_S
        ]
        if scancelled:
            return "harness scancel", f"the harness scancelled job {scancelled[0]}"
        before = [h for h in track.history if h.at <= went_at]
        if before:
            last = before[-1]
            when = self.report.rel(last.at)
            if last.state == "MISSING":
                return "job lost by Slurm", f"Slurm no longer listed job {last.job_id} at {when}"
            if last.state not in ("RUNNING", "PENDING", "CONFIGURING"):
                return "job ended in Slurm", f"Slurm showed job {last.job_id} {last.state} at {when}"
            if last.state == "PENDING" and track.bound_at is not None and last.at > track.bound_at:
                return "job reverted by Slurm", f"Slurm put job {last.job_id} back to PENDING at {when}"
        if track.jobs_after is None:
            return None
        mine = [j for j in track.jobs_after if track.job_id is None or j["job_id"] == track.job_id]
        if not mine:
            return "job lost by Slurm", "Slurm no longer had its job (lost in a slurmctld restart)"
        for job in mine:
            if SLURM_MADE_STATES & set(job.get("states") or []) or int(job.get("restart_cnt") or 0):
                return "job ended in Slurm", f"Slurm ended it: {_job_word(job)}"
        # A slurmctld restarted from older state may bring a running job back as PENDING
        # (and the scheduler then rightly lets the Pod go) between two of our listings: the
        # job's start time then differs from the one it had while we saw it run.
        ran = [h for h in before if h.state == "RUNNING" and h.start]
        for job in mine:
            start = int(job.get("start_time") or 0)
            if ran and start != ran[-1].start:
                return "job reverted by Slurm", (
                    f"Slurm's record of job {job['job_id']} changed: it started at {ran[-1].start} while "
                    f"seen running, Slurm now says {start or 'never'}"
                )
        # The same, when no listing saw it run: the Pod was bound (its job had started),
        # slurmctld was killed just before, and Slurm's record now says the job was
        # cancelled without ever running (start = end): restarted from state saved before
        # the start, it had the job PENDING again.
        restarted = [
            f
            for f in self.report.faults
            # went_at may come from a timestamp of one-second resolution, cut down
            if f.kind == "kill-slurmctld" and went_at - 15 <= f.started <= went_at + CLOCK_SLACK_S
        ]
        if (track.bound_at is not None or scheduled) and restarted:
            for job in mine:
                start, end = int(job.get("start_time") or 0), int(job.get("end_time") or 0)
                if job["job_state"] == "CANCELLED" and start and start == end:
                    return "job reverted by Slurm", (
                        f"the Pod was bound to job {job['job_id']} once it ran, yet after slurmctld's "
                        f"restart (fault #{restarted[-1].index}) Slurm records it cancelled before it ran"
                    )
        # Slurm itself killed the job as it started: slurmctld, restarted from older state,
        # handed the job's ID out again while a job that had that ID before still ran on the
        # node; it found the duplicate, drained the node ("Duplicate jobid") and killed the
        # job within a moment of its start (the two times may straddle a second). Slurm said
        # so in the drain the scheduler explained on the Node.
        if restarted:
            for job in mine:
                start, end = int(job.get("start_time") or 0), int(job.get("end_time") or 0)
                node = str(job.get("nodes") or "")
                if job["job_state"] != "CANCELLED" or not start or not 0 <= end - start <= 2 or not node:
                    continue
                for drain in self.node_events():
                    note = str(drain.get("note") or "")
                    at = _ts(drain.get("eventTime"))
                    if "Duplicate jobid" in note and _mentions(note, node) and at and abs(at - went_at) < 30:
                        return "job killed by Slurm (a job ID handed out twice)", (
                            f"after slurmctld's restart (fault #{restarted[-1].index}) Slurm killed job "
                            f"{job['job_id']} as it started on {node} and drained it: Duplicate jobid"
                        )
        # Slurm ran the job on a Slurm node another Node hosts: restarted from older state,
        # slurmctld started it again elsewhere. The scheduler re-adopts such a Pod on its own
        # node, or deletes it saying so ("was started again on", or PlaceholderJobMoved for
        # a job Slurm requeued); the job may be cancelled by then, but its record keeps
        # where it ran.
        note = str((event or {}).get("note") or "")
        if event is not None and (
            event.get("reason") == "PlaceholderJobMoved" or "was started again on" in note
        ):
            for job in mine:
                nodes = [n for n in str(job.get("nodes") or "").split(",") if n]
                if nodes and self.hosts.get(nodes[0]) != track.node:
                    return "job moved by Slurm", f"Slurm ran its job elsewhere: {_job_word(job)}"
        return None

    # -- log excerpts ---------------------------------------------------------------------
    def attach_logs(self) -> None:
        try:
            lines = self.sched.proc.output(0).splitlines()
        except OSError:
            return
        for v in self.report.violations:
            v.context = self.context(v.at)
            needles = [n for n in v.needles if n and n != "job None"]
            # Retries repeat one line many times: keep the first of each, with a count.
            picked: dict[str, list[Any]] = {}
            for line in lines:
                if any(_mentions(line, n) for n in needles):
                    shape = re.sub(r"retrying in [0-9.]+s", "retrying", line[24:])
                    picked.setdefault(shape, [line.strip()[:300], 0])[1] += 1
            v.log = [text if n == 1 else f"{text} (x{n})" for text, n in list(picked.values())[:12]]

    def attach_events(self) -> None:
        """The scheduler's Events on each Pod a violation is about, kept before the namespace
        (and with it the Events) is deleted."""
        try:
            events = self.events()
        except TRANSIENT_ERRORS as err:
            self.note(f"could not read the Events: {err}")
            return
        for v in self.report.violations:
            mine = [e for e in events if v.pod and (e.get("regarding") or {}).get("name") == v.pod]
            v.events = [
                f"{e.get('eventTime')} {e.get('reason')}: {e.get('note')}"
                for e in sorted(mine, key=lambda e: e.get("eventTime") or "")
            ]

    # -- the whole run --------------------------------------------------------------------
    def run(self) -> Report:
        opts = self.options
        self.say(
            f"chaos: seed {opts.seed}, {opts.faults} faults, scheduler {self.name}, "
            f"namespace {self.namespace}, dev cluster {self.layout.root}"
        )
        self.kube.create_namespace(self.namespace)
        population = threading.Thread(target=self.population_loop, name="chaos-population", daemon=True)
        try:
            self.load_hosts()
            self.initially_drained = set(self.drained())
            if self.initially_drained:
                self.note(f"nodes drained before the run (not judged): {sorted(self.initially_drained)}")
            self.sched.start()
            population.start()
            try:
                self.fault_loop()
            finally:
                self.stop_population.set()
                population.join(timeout=120)
                done = self.daemons.restore()
                if done:
                    self.note("restored after the faults: " + ", ".join(done))
            if self.population_error:
                raise HarnessError(f"the population thread failed: {self.population_error}")
            self.say(f"{self.stamp()} faults done; settling (up to {opts.settle_s:.0f} s)")
            self.settle()
            self.check()
            self.attach_events()
        except HarnessError as err:
            self.report.harness_error = str(err)
            self.say(f"HARNESS ERROR: {err}")
        finally:
            try:
                self.cleanup()
            finally:
                self.daemons.close()
                if self.daemons.retries:
                    self.report.counters["daemon restarts tried again"] = self.daemons.retries
                self.report.duration_s = time.time() - self.report.started
                self.attach_logs()
                self.write_report()
        return self.report

    def cleanup(self) -> None:
        """Leave the cluster as it was: our Pods and jobs gone, the scheduler stopped, no node
        drained, the namespace deleted. Runs whatever happened before."""
        try:
            self.daemons.restore()
        except HarnessError as err:
            self.note(f"cleanup could not restore the cluster: {err}")
        try:
            # kube-controller-manager's watches back off while the API server is killed
            # again and again; the suites after this one need its serviceaccount controller
            # (a new namespace's default ServiceAccount), so the run ends once it works.
            probe = self.kube.create_namespace(f"{self.namespace}-after", within=180)
            self.kube.request("DELETE", f"/api/v1/namespaces/{probe}")
        except (TimeoutError, *TRANSIENT_ERRORS) as err:
            self.note(f"cleanup: the controllers did not come back: {err}")
        with self.lock:
            for track in self.tracks.values():
                if track.deleted_by_harness is None and not track.went:
                    track.deleted_by_harness = time.time()
        try:
            self.kube.request("DELETE", self.pod_path())
            deadline = time.monotonic() + 60
            left: list[int] = []
            while time.monotonic() < deadline:
                jobs = list_jobs(self.slurm)
                if jobs is not None:
                    left = [
                        j["job_id"]
                        for j in jobs
                        if j["name"].startswith(self.prefix) and j["job_state"] in ACTIVE_STATES
                    ]
                    if not left:
                        break
                time.sleep(1)
            if left:
                self.note(
                    f"cleanup: {len(left)} job(s) outlived their deleted Pods by 60 s; cancelled: {left}"
                )
                run_cli(self.layout, "scancel", *map(str, left))
        except TRANSIENT_ERRORS as err:
            self.note(f"cleanup: {type(err).__name__}: {err}")
        self.sched.stop()
        try:
            for node in self.drained():
                run_cli(self.layout, "scontrol", "update", f"nodename={node}", "state=resume")
                self.note(f"cleanup: resumed drained node {node}")
        except TRANSIENT_ERRORS as err:
            self.note(f"cleanup could not resume drained nodes: {err}")
        with contextlib.suppress(*TRANSIENT_ERRORS):
            self.kube.delete(f"/api/v1/namespaces/{self.namespace}")

    def write_report(self) -> None:
        path = self.layout.logs / f"chaos-{self.name}.json"
        data = self.report.to_json() | {"harness_actions": self.actions}
        with contextlib.suppress(OSError):
            path.write_text(json.dumps(data, indent=2) + "\n")
            self.report.notes.append(f"JSON report: {path}; scheduler log: {self.sched.proc.log}")


def _source() -> str:
    """The checkout's commit, marked dirty when src/ has changes not committed yet."""
    repo = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return f"{head}+dirty" if head and dirty else head


def _pod_key_of(job: Json) -> str:
    # sunk:<scheduler>:<namespace>/<pod>:<uid>
    parts = str(job.get("name", "")).split(":")
    return parts[2].split("/", 1)[-1] if len(parts) >= 4 else "?"


def _mentions(line: str, needle: str) -> bool:
    """A log line names this Pod or job (a job ID as a whole word, not a prefix of another)."""
    at = line.find(needle)
    while at >= 0:
        end = at + len(needle)
        if end == len(line) or not line[end].isalnum():
            return True
        at = line.find(needle, end)
    return False


def run_chaos(
    cluster: DevCluster,
    kube: AdminKube,
    slurm: SlurmRest,
    options: ChaosOptions,
    log: Callable[[str], None] = print,
) -> Report:
    return ChaosRun(cluster, kube, slurm, options, log).run()


# -- the command ------------------------------------------------------------------------
@contextlib.contextmanager
def dev_cluster(nodes: int, slurm: str) -> Iterator[DevCluster]:
    """The running dev cluster if there is one (it must be healthy), else a new one that
    is stopped at the end unless SUNK_KEEP_CLUSTER is set, as in tests/conftest.py."""
    cluster = DevCluster()
    if cluster.is_running():
        status = cluster.status()
        spec = status.spec
        if spec is None or status.ready_nodes != spec.nodes or not status.rest_ok:
            raise SystemExit(
                f"a dev cluster is running under {cluster.layout.root} but is not healthy "
                "(see `sunk dev status`)"
            )
        print(f"reusing the dev cluster under {cluster.layout.root} ({spec.nodes} nodes, Slurm {spec.slurm})")
        yield cluster
        return
    print(f"starting a dev cluster under {cluster.layout.root}: {nodes} nodes, Slurm {slurm}")
    cluster.up(ClusterSpec(nodes=nodes, slurm=slurm))
    try:
        yield cluster
    finally:
        if not os.environ.get("SUNK_KEEP_CLUSTER"):
            print("stopping the dev cluster")
            cluster.down()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults.chaos",
        description="Fault injection for the promise that a Pod and its placeholder job live and die "
        "together.",
    )
    parser.add_argument("--faults", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    parser.add_argument("--nodes", type=int, default=8, help="for a new dev cluster (default 8)")
    parser.add_argument(
        "--slurm", default=os.environ.get("SUNK_TEST_SLURM", "24.11"), help="for a new dev cluster"
    )
    parser.add_argument("--min-pods", type=int, default=12)
    parser.add_argument("--max-pods", type=int, default=20)
    parser.add_argument("--settle", type=float, default=90.0, help="seconds to wait for convergence")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    options = ChaosOptions(
        faults=args.faults, seed=seed, min_pods=args.min_pods, max_pods=args.max_pods, settle_s=args.settle
    )
    with dev_cluster(args.nodes, args.slurm) as cluster:
        kube, slurm = AdminKube(cluster.layout), SlurmRest(cluster.layout)
        try:
            report = run_chaos(cluster, kube, slurm, options)
        finally:
            kube.close()
            slurm.close()
    print()
    print(report.table())
    details = report.details()
    if details:
        print()
        print(details)
    if report.harness_error:
        return 2
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
