"""What scraping the operator's metrics costs a running cluster (issue #50's performance
point): with 64 Slurm nodes and 1,000 jobs, each scrape's time and slurmctld's,
slurmrestd's and the operator's CPU per minute, against the same with nothing scraped, in
one run.

    python -m bench.metrics_overhead [--nodes 64] [--jobs 1000] [--window 60] [--rounds 2] [--json F]
    python -m bench.metrics_overhead --report F    # the tables again, from a run's --json

On the dev cluster under SUNK_DEV_DIR (brought up with `--nodes` nodes and taken down
again, or used as it is when one is running there, its jobs cancelled after), it submits
`--jobs` jobs that stay: a tenth running (`sleep infinity`), the rest pending, held,
waiting for a begin time a day away, for a held job, or for every CPU of every node. It
starts `sunk operator` as a local process (the flags the chart passes, as
tests/support.py's OperatorProcess) with its metrics port, waits for its first Slurm
listing, then measures windows of `--window` seconds, `--rounds` times over, interleaved
(the scraped kinds rotate from round to round):

  paused          the operator stopped (SIGSTOP): Slurm with nobody polling it
  /diag every 1s  the operator stopped, slurmrestd's /diag read each second: what the
                  one call the poller makes for the metrics alone costs Slurm
  unscraped       the operator polling Slurm every --poll-interval, nobody scraping it
  every 15s       scraped as Prometheus scrapes by default
  every 1s        scraped each second, for a signal well above the noise

Each window reads the CPU seconds (utime + stime, all threads, from /proc/<pid>/stat) of
the operator, slurmctld and slurmrestd, found by PID (the dev cluster's PID files), so
other work on the machine changes them little, and how many cores the whole machine kept
busy. A scrape's time is the wall time of the GET as Prometheus would send it, and the
operator's CPU while it was answered tells a scrape that waited for a CPU from one that
waited for the operator's own work. Overheads are taken against the unscraped (or paused)
window of the same round. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.baselines import rest_client
from bench.observe import percentile
from sunk.flags import parse_duration
from sunk_dev import ClusterSpec, DevCluster, procs
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmcluster import rest_version
from sunk_dev.slurmrun import run_cli

NODESET_CRD = Path(__file__).resolve().parents[1] / "charts" / "slurm" / "files" / "nodeset-crd.yaml"
NAMESPACE, RELEASE = "default", "bench"
# What Prometheus (2.x and 3.x) asks for; sunk's server answers the text format anyway.
ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
TICKS = os.sysconf("SC_CLK_TCK")
KINDS = ("paused", "/diag every 1s", "unscraped", "every 15s", "every 1s")
INTERVALS: dict[str, float | None] = {
    "paused": None,
    "/diag every 1s": 1.0,
    "unscraped": None,
    "every 15s": 15.0,
    "every 1s": 1.0,
}
PAUSED = {"paused", "/diag every 1s"}  # the operator stopped (SIGSTOP) for the window
COMPONENTS = ("slurmctld", "slurmrestd", "operator")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process, all its threads."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_busy() -> tuple[float, float]:
    """CPU seconds the whole machine has been busy (not idle nor waiting for I/O), and in all."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks[:7]) - ticks[3] - ticks[4]) / TICKS, sum(ticks[:7]) / TICKS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(what: str, check: Callable[[], bool], within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"gave up waiting for {what} after {within:.0f} s")


# -- the jobs ------------------------------------------------------------------------------------
RUNNING_SCRIPT = "#!/bin/bash\nexec sleep infinity\n"


def submit_jobs(cluster: DevCluster, count: int, ids: dict[str, list[int]]) -> None:
    """`count` jobs that stay as they are: a tenth running, then held, waiting for a begin
    time a day away, for a held job (afterok), and for every node at once (Resources)."""
    if rest_version(cluster.layout) == "v0.0.38":
        raise SystemExit(
            "this benchmark submits jobs in the REST shapes of Slurm 23.02+ (use 24.11 or 26.05)"
        )
    base: dict[str, Any] = {
        "tasks": 1,
        "cpus_per_task": 1,
        "nodes": "1",
        "memory_per_node": {"set": True, "number": 64},
        "current_working_directory": "/tmp",
        "standard_output": "/dev/null",
        "standard_error": "/dev/null",
        "environment": ["PATH=/usr/bin:/bin"],
        "script": RUNNING_SCRIPT,
    }
    running = count // 10
    resources = count // 10
    held = (count - running - resources) * 3 // 8
    begin = (count - running - resources) * 3 // 8
    dependent = count - running - resources - held - begin
    with rest_client(cluster) as http:

        def submit(job: dict[str, Any]) -> int:
            for attempt in range(20):
                answer = http.post("/job/submit", json={"job": job}).json()
                if answer.get("job_id"):
                    return int(answer["job_id"])
                time.sleep(0.1 * (attempt + 1))
            raise RuntimeError(f"slurmrestd refused a job 20 times: {answer.get('errors')}")

        def many(kind: str, n: int, job: dict[str, Any]) -> None:
            with ThreadPoolExecutor(max_workers=8) as pool:
                ids[kind] = list(pool.map(lambda i: submit({**job, "name": f"{kind}-{i}"}), range(n)))

        many("running", running, base)
        many("held", held, {**base, "hold": True})
        day = int(time.time()) + 86400
        many("begin", begin, {**base, "begin_time": {"set": True, "number": day}})
        many("dependent", dependent, {**base, "dependency": f"afterok:{ids['held'][0]}"})
        nodes = node_count(cluster)  # every CPU of every node: one running job is in the way
        whole = {**base, "nodes": str(nodes), "tasks": nodes, "cpus_per_task": cpus_per_node(cluster)}
        many("resources", resources, whole)


def node_count(cluster: DevCluster) -> int:
    return len(set(run_cli(cluster.layout, "sinfo", "-h", "-N", "-o", "%N").split()))  # once per partition


def cpus_per_node(cluster: DevCluster) -> int:
    return max(int(c) for c in run_cli(cluster.layout, "sinfo", "-h", "-N", "-o", "%c").split())


def states(cluster: DevCluster) -> dict[str, int]:
    """Jobs by state and reason, as squeue counts them."""
    counted: dict[str, int] = {}
    for line in run_cli(cluster.layout, "squeue", "-h", "-o", "%T %r").splitlines():
        counted[line.strip()] = counted.get(line.strip(), 0) + 1
    return dict(sorted(counted.items(), key=lambda kv: -kv[1]))


# -- the operator ---------------------------------------------------------------------------------
def serve_nodesets(kube: AdminKube) -> None:
    """The chart's NodeSet CRD, which the operator watches before it does anything."""
    kube.serve_crd(yaml.safe_load(NODESET_CRD.read_text()))


def start_operator(
    cluster: DevCluster, metrics_port: int, probes_port: int, poll: str
) -> subprocess.Popen[bytes]:
    layout = cluster.layout
    argv = [
        sys.executable,
        "-m",
        "sunk.cli",
        "operator",
        f"--namespace={NAMESPACE}",
        f"--release={RELEASE}",
        f"--kubeconfig={layout.kubeconfig}",
        f"--slurm-api-base={layout.rest_url}",
        f"--slurm-jwt-key-file={layout.slurm_conf.parent / 'jwt.key'}",
        "--slurm-user=root",
        "--conf-server=127.0.0.1:6817",  # only slurmd Pods use it, and none are made here
        f"--auth-secret={RELEASE}-auth",
        f"--metrics-port={metrics_port}",
        f"--probes-port={probes_port}",
        f"--poll-interval={poll}",
        "--log-format=text",
    ]
    with open(layout.logs / "bench-operator.log", "wb") as out:
        proc = subprocess.Popen(
            argv, env={**os.environ, **cluster.env()}, stdout=out, stderr=subprocess.STDOUT
        )
    return proc


def slurm_listed(metrics_port: int) -> bool:
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10, trust_env=False).text
    return 'sunk_slurm_collector_up{collector="jobs"} 1.0' in text and "sunk_slurm_jobs_pending{" in text


# -- the windows ----------------------------------------------------------------------------------
def stop_between_listings(operator: int, slurmrestd: int) -> None:
    """SIGSTOP the operator while it is not reading a listing: slurmrestd 24.11, its answer
    half sent to a client that stopped reading, spins on the connection (28 CPU-seconds a
    minute, seen in a first run) until the client reads again."""
    for _ in range(20):
        os.kill(operator, signal.SIGSTOP)
        before = cpu_seconds(slurmrestd)
        time.sleep(1.0)
        if cpu_seconds(slurmrestd) - before < 0.05:
            return
        os.kill(operator, signal.SIGCONT)
        time.sleep(1.0)
    raise RuntimeError("slurmrestd stayed busy whenever the operator was stopped")


def window(
    kind: str, seconds: float, pids: dict[str, int], operator: int, call: Callable[[], tuple[float, int]]
) -> dict[str, Any]:
    """One window: CPU seconds per component, and each call's wall time (ms) and size (a
    scrape of the operator, or slurmrestd's /diag as the poller reads it)."""
    interval = INTERVALS[kind]
    if kind in PAUSED:
        stop_between_listings(operator, pids["slurmrestd"])
    own = os.times()
    busy = machine_busy()
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    start = time.monotonic()
    times: list[float] = []
    busy_ms: list[float] = []  # the operator's CPU while each call was answered
    size = 0
    try:
        if interval is not None:
            due = start
            while due < start + seconds:
                time.sleep(max(0.0, due - time.monotonic()))
                cpu = cpu_seconds(operator)
                ms, size = call()
                busy_ms.append((cpu_seconds(operator) - cpu) * 1000)
                times.append(ms)
                due += interval
        time.sleep(max(0.0, start + seconds - time.monotonic()))
        after = {name: cpu_seconds(pid) for name, pid in pids.items()}
        elapsed = time.monotonic() - start
        busy_after = machine_busy()
    finally:
        if kind in PAUSED:
            os.kill(operator, signal.SIGCONT)
    spent = os.times()
    return {
        "kind": kind,
        "seconds": elapsed,
        "cpu_s": {name: after[name] - before[name] for name in pids},
        "scraper_cpu_s": (spent.user - own.user) + (spent.system - own.system),
        # How many of the machine's cores were busy on average (others' work included).
        "machine_busy_cores": (busy_after[0] - busy[0]) / elapsed,
        "scrapes_ms": times,
        "operator_cpu_ms": busy_ms,
        "bytes": size,
    }


def per_minute(w: dict[str, Any], name: str) -> float:
    return float(w["cpu_s"][name]) * 60 / float(w["seconds"])


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(med(values))} ({fmt.format(min(values))} to {fmt.format(max(values))})"


def added(rounds: list[dict[str, dict[str, Any]]], kind: str, than: str, component: str) -> list[float]:
    """Per round, the CPU seconds per minute `component` used in the `kind` window above
    what it used in the `than` window of the same round."""
    return [
        per_minute(r[kind], component) - per_minute(r[than], component)
        for r in rounds
        if kind in r and than in r
    ]


def scrape_cpu(r: dict[str, dict[str, Any]], kind: str, than: str) -> float:
    """The operator's CPU seconds per scrape in round `r`: what it used in the `kind` window
    above the `than` window, over the scrapes."""
    extra = per_minute(r[kind], "operator") - per_minute(r[than], "operator")
    return extra / 60 * float(r[kind]["seconds"]) / max(1, len(r[kind]["scrapes_ms"]))


def report(windows: list[dict[str, Any]], rounds: int) -> list[str]:
    by_round: list[dict[str, dict[str, Any]]] = [{} for _ in range(rounds)]
    for w in windows:
        by_round[w["round"]][w["kind"]] = w
    lines = ["", "CPU seconds per minute, median of the rounds (min to max):", ""]
    lines.append(
        "| window | "
        + " | ".join(COMPONENTS)
        + " | calls | one call, ms: p50 / p95 / max | machine busy, cores |"
    )
    lines.append("|---|" + "---|" * len(COMPONENTS) + "---|---|---|")
    for kind in KINDS:
        ws = [r[kind] for r in by_round if kind in r]
        cells = [spread([per_minute(w, c) for w in ws]) for c in COMPONENTS]
        times = [t for w in ws for t in w["scrapes_ms"]]
        timing = "-"
        if times:
            timing = f"{percentile(times, 50):.1f} / {percentile(times, 95):.1f} / {max(times):.1f}"
        count = sum(len(w["scrapes_ms"]) for w in ws)
        busy = spread([w["machine_busy_cores"] for w in ws if "machine_busy_cores" in w])
        lines.append(f"| {kind} | " + " | ".join(cells) + f" | {count} | {timing} | {busy} |")
    scrapes = [
        (t, c)
        for r in by_round
        for kind in ("every 15s", "every 1s")
        if kind in r
        for t, c in zip(r[kind]["scrapes_ms"], r[kind].get("operator_cpu_ms", []), strict=False)
    ]
    if scrapes:
        slow = [c for t, c in scrapes if t > 100]
        fast = [c for t, c in scrapes if t <= 100]
        lines += [
            "",
            f"The operator's CPU while a scrape was answered (10 ms ticks): {spread(fast, '{:.0f}')} ms "
            f"for the {len(fast)} scrapes of 100 ms or less, {spread(slow, '{:.0f}')} ms for the "
            f"{len(slow)} slower (more than a scrape's own: it was also decoding a listing; about "
            "the same: the scrape waited for a CPU).",
        ]
    lines += [
        "",
        "Added CPU as % of one core, against the window named, in the same round "
        "(median of the rounds, min to max), and the ratio of the medians:",
        "",
        "| window | against | " + " | ".join(COMPONENTS) + " | all three | operator CPU per scrape, ms |",
        "|---|---|" + "---|" * len(COMPONENTS) + "---|---|",
    ]
    for kind, than in (
        ("every 15s", "unscraped"),
        ("every 1s", "unscraped"),
        ("unscraped", "paused"),
        ("/diag every 1s", "paused"),
    ):
        cells = []
        for component in COMPONENTS:
            extra = [x / 60 * 100 for x in added(by_round, kind, than, component)]
            base = med([per_minute(r[than], component) for r in by_round if than in r])
            this = med([per_minute(r[kind], component) for r in by_round if kind in r])
            ratio = f"{this / base:.2f}x" if base and this == this else "-"  # nan: no window
            cells.append(f"{spread(extra, '{:+.2f}%')}; {ratio}")
        total = [
            sum(parts) / 60 * 100
            for parts in zip(*(added(by_round, kind, than, c) for c in COMPONENTS), strict=True)
        ]
        per_scrape = [
            scrape_cpu(r, kind, than) * 1000
            for r in by_round
            if kind in r and than in r and r[kind]["scrapes_ms"]
        ]
        lines.append(
            f"| {kind} | {than} | "
            + " | ".join(cells)
            + f" | {spread(total, '{:+.2f}%')} | {spread(per_scrape, '{:.1f}')} |"
        )
    fast = [scrape_cpu(r, "every 1s", "unscraped") for r in by_round if "every 1s" in r and "unscraped" in r]
    if fast:
        cost = med(fast)
        lines += [
            "",
            f"The operator's CPU per scrape, from the 1 s windows: {cost * 1000:.1f} ms (median of the "
            f"rounds); scraped every 15 s that is {cost / 15 * 100:.3f}% of one core, every 30 s "
            f"{cost / 30 * 100:.3f}%.",
        ]
    diag = [
        x / 60 * r["/diag every 1s"]["seconds"] / max(1, len(r["/diag every 1s"]["scrapes_ms"]))
        for x, r in zip(
            added(by_round, "/diag every 1s", "paused", "slurmrestd"),
            [r for r in by_round if "/diag every 1s" in r and "paused" in r],
            strict=True,
        )
    ]
    if diag:
        cost = med(diag)
        lines += [
            f"slurmrestd's CPU per /diag (which the poller reads once per listing, scraped or not): "
            f"{cost * 1000:.1f} ms; at one per 5 s listing, {cost / 5 * 100:.3f}% of one core "
            "(slurmctld's share is within its noise: see the table).",
        ]
    return lines


def main() -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--cpus-per-node", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds per window (60)")
    parser.add_argument("--rounds", type=int, default=2, help="times each kind of window is measured (2)")
    parser.add_argument("--poll-interval", default="5s", help="the operator's --poll-interval (5s)")
    parser.add_argument("--slurm", default="24.11", help="Slurm of a dev cluster brought up here")
    parser.add_argument("--json", type=Path, help="also write every window's figures here")
    parser.add_argument("--report", type=Path, help="print the tables of a run's --json file, and stop")
    args = parser.parse_args()
    if args.report:
        saved = json.loads(args.report.read_text())
        print("\n".join(report(saved, 1 + max(w["round"] for w in saved))))
        return 0
    cluster = DevCluster()
    brought_up = not cluster.is_running()
    if brought_up:
        print(f"bringing up {args.nodes} nodes x {args.cpus_per_node} CPUs, Slurm {args.slurm} …", flush=True)
        cluster.up(ClusterSpec(nodes=args.nodes, cpus_per_node=args.cpus_per_node, slurm=args.slurm))
    else:
        print(f"using the dev cluster running under {cluster.layout.root}", flush=True)
    kube = AdminKube(cluster.layout)
    operator: subprocess.Popen[bytes] | None = None
    ids: dict[str, list[int]] = {}
    windows: list[dict[str, Any]] = []
    try:
        pids: dict[str, int] = {}
        for name in ("slurmctld", "slurmrestd"):
            tracked = procs.load(cluster.layout.pids, name)
            if tracked is None or not tracked.alive():
                raise RuntimeError(f"no {name} under {cluster.layout.root}")
            pids[name] = tracked.pid
        nodes = node_count(cluster)
        print(f"submitting {args.jobs} jobs to {nodes} Slurm nodes …", flush=True)
        started = time.monotonic()
        submit_jobs(cluster, args.jobs, ids)
        print(f"  submitted in {time.monotonic() - started:.0f} s", flush=True)
        time.sleep(10)  # let slurmctld start the running tenth
        print("  " + ", ".join(f"{n} {state}" for state, n in states(cluster).items()), flush=True)
        serve_nodesets(kube)
        metrics_port, probes_port = free_port(), free_port()
        operator = start_operator(cluster, metrics_port, probes_port, args.poll_interval)
        proc = operator
        wait_until(
            "the operator's first Slurm listing",
            lambda: proc.poll() is None and slurm_listed(metrics_port),
            120,
        )
        if operator.poll() is not None:
            raise RuntimeError(f"the operator exited; see {cluster.layout.logs / 'bench-operator.log'}")
        pids["operator"] = operator.pid
        http = httpx.Client(base_url=f"http://127.0.0.1:{metrics_port}", trust_env=False, timeout=30)

        def scrape() -> tuple[float, int]:
            sent = time.perf_counter()
            body = http.get("/metrics", headers={"Accept": ACCEPT}).content
            return (time.perf_counter() - sent) * 1000, len(body)

        rest = rest_client(cluster)

        def diag() -> tuple[float, int]:
            sent = time.perf_counter()
            body = rest.get("/diag").content
            return (time.perf_counter() - sent) * 1000, len(body)

        scrape()  # the connection, as Prometheus keeps it
        diag()
        time.sleep(args.window / 4)  # the operator settles after its start
        order = ["unscraped", "every 15s", "every 1s"]
        total = args.rounds * len(KINDS) * args.window
        each = f"{len(KINDS)} windows of {args.window:.0f} s"
        print(f"measuring {args.rounds} rounds of {each} (~{total / 60:.0f} min)", flush=True)
        for r in range(args.rounds):
            rotated = order[r % len(order) :] + order[: r % len(order)]
            for kind in ["paused", "/diag every 1s", *rotated]:
                w = window(
                    kind, args.window, pids, operator.pid, diag if kind.startswith("/diag") else scrape
                )
                w["round"] = r
                windows.append(w)
                cpu = ", ".join(f"{c} {per_minute(w, c):.2f}" for c in COMPONENTS)
                extra = ""
                if w["scrapes_ms"]:
                    times = w["scrapes_ms"]
                    extra = f"; {len(times)} calls, median {med(times):.1f} ms, {w['bytes']} bytes"
                load = f"; machine busy {w['machine_busy_cores']:.2f} cores"
                print(f"  round {r + 1} {kind:>14}: CPU s/min {cpu}{extra}{load}", flush=True)
                if kind == "/diag every 1s":  # the operator lists Slurm again before the next window
                    time.sleep(parse_duration(args.poll_interval) + 1)
        http.close()
        rest.close()
        print(f"\n{nodes} Slurm nodes; jobs: " + ", ".join(f"{n} {s}" for s, n in states(cluster).items()))
        print("\n".join(report(windows, args.rounds)))
        if args.json:
            args.json.write_text(json.dumps(windows, indent=2))
    finally:
        if operator is not None and operator.poll() is None:
            operator.send_signal(signal.SIGCONT)
            operator.terminate()
            try:
                operator.wait(30)
            except subprocess.TimeoutExpired:
                operator.kill()
        kube.close()
        if brought_up:
            cluster.down()
        elif ids:
            every = [str(i) for kind in ids.values() for i in kind]
            for start in range(0, len(every), 200):
                run_cli(cluster.layout, "scancel", *every[start : start + 200], timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
