"""Where a Pod waited inside the scheduler, from a `bench.run --trace` run.

    python -m bench.trace_report TRACE.100 RUN.json

TRACE.100 is what `bench.trace_scheduler` wrote for N=100, RUN.json what `bench.run --json`
wrote in the same run (each Pod's stage times). The trace's wall clock is moved onto the
run's by the bindings: a Pod is seen bound on the watch no earlier than its binding call
ended. Prints the medians and p99 of the steps between "job marked started in Slurm" and
"bound", of the first pass of each Pod (the submission), and slurmrestd's requests in
flight over time.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

from bench.observe import percentile

POD_PATH = re.compile(r"(\w+):/api/v1/namespaces/[^/]+/pods/([^/]+)(/\w+)?$")
JOB_PATH = re.compile(r"(\w+):/job/(\d+)$")


@dataclass
class PodSteps:
    """One Pod's steps in the trace (wall clock), by kind → times, in order."""

    steps: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    job_id: int | None = None


@dataclass
class Trace:
    pods: dict[str, PodSteps] = field(default_factory=lambda: defaultdict(PodSteps))
    jobs: dict[int, dict[str, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    slurm: list[tuple[float, str, str]] = field(default_factory=list)  # (time, request, start|end)
    first_pod: float | None = None


def read_trace(lines: list[str], namespace_prefix: str = "bench-ours") -> Trace:
    trace = Trace()
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        t, kind, what, step = float(parts[0]), parts[1], parts[2], parts[3]
        if kind == "queue" and what.startswith(namespace_prefix):
            if trace.first_pod is None:
                trace.first_pod = t
            trace.pods[what.split("/", 1)[1]].steps[step].append(t)
        elif kind.startswith("hook_"):
            pod, job = what.split("/", 1)[1].split(":")
            trace.pods[pod].job_id = int(job)
            trace.pods[pod].steps[f"{kind} {step}"].append(t)
        elif kind == "slurm":
            trace.slurm.append((t, what, step))
            if found := JOB_PATH.match(what):
                trace.jobs[int(found.group(2))][f"{found.group(1)} {step}"].append(t)
        elif kind == "kube" and (found := POD_PATH.match(what)):
            trace.pods[found.group(2)].steps[f"{found.group(1)}{found.group(3) or ''} {step}"].append(t)
    return trace


def first(times: list[float], after: float = float("-inf"), before: float = float("inf")) -> float | None:
    return next((t for t in times if after <= t <= before), None)


def pod_rows(trace: Trace, marks: dict[str, dict[str, float]]) -> list[dict[str, float]]:
    """Each Pod's steps on the run's clock (seconds from the phase's start)."""
    offsets = [
        m["bound"] - trace.pods[p].steps["POST/binding end"][0]
        for p, m in marks.items()
        if trace.pods[p].steps["POST/binding end"] and "bound" in m
    ]
    off = min(offsets)
    rows = []
    for name, m in marks.items():
        pod = trace.pods[name]
        s = pod.steps
        if not (s["POST/binding start"] and s["get"] and s["hook_started start"]):
            continue
        binding = s["POST/binding start"][0] + off
        row = dict(m)
        row["queued"] = s["add"][0] + off
        row["pass 1 start"] = s["get"][0] + off
        row["hook arrives"] = s["hook_started start"][0] + off
        row["binding start"] = binding
        row["bind pass start"] = max(t + off for t in s["get"] if t + off <= binding)
        job = trace.jobs.get(pod.job_id or -1, {})
        read_start = first([t + off for t in job.get("GET start", [])], row["hook arrives"], binding)
        read_end = first([t + off for t in job.get("GET end", [])], row["hook arrives"], binding)
        if read_start is not None and read_end is not None:
            row["read start"], row["read end"] = read_start, read_end
        rows.append(row)
    return rows


STEPS = (
    ("created", "queued"),
    ("queued", "pass 1 start"),
    ("pass 1 start", "submitted"),
    ("marked", "hook arrives"),
    ("hook arrives", "read start"),
    ("read start", "read end"),
    ("read end", "bind pass start"),
    ("bind pass start", "binding start"),
    ("binding start", "bound"),
    ("marked", "bound"),
)


def in_flight(trace: Trace, step: float = 0.3, until: float = 5.0) -> list[str]:
    """slurmrestd requests in flight, by kind, every `step` s of the phase."""
    start = trace.first_pod or 0.0
    open_now: Counter[str] = Counter()
    lines, mark = [], 0.0
    for t, what, edge in trace.slurm:
        if t - start > until:
            break
        kind = re.sub(r"\d+", "N", what)
        open_now[kind] += 1 if edge == "start" else -1
        if t - start >= mark:
            lines.append(f"{t - start:5.1f} s: {dict((k, v) for k, v in open_now.items() if v > 0)}")
            mark += step
    return lines


def durations(trace: Trace, until: float = 5.0) -> dict[str, list[float]]:
    start = trace.first_pod or 0.0
    waiting: dict[str, deque[float]] = defaultdict(deque)
    spent: dict[str, list[float]] = defaultdict(list)
    for t, what, edge in trace.slurm:
        if t - start > until:
            break
        if edge == "start":
            waiting[what].append(t)
        elif waiting[what]:
            spent[re.sub(r"\d+", "N", what)].append(t - waiting[what].popleft())
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trace", type=Path)
    parser.add_argument("figures", type=Path)
    parser.add_argument("--n", default="100 at once")
    args = parser.parse_args()
    trace = read_trace(args.trace.read_text().splitlines())
    marks = json.loads(args.figures.read_text())[args.n]["ours"]["marks"]
    rows = pod_rows(trace, marks)
    print("| from → to | Pods | p50 s | p99 s |\n|---|---|---|---|")
    for a, b in STEPS:
        spans = [r[b] - r[a] for r in rows if a in r and b in r]
        print(f"| {a} → {b} | {len(spans)} | {percentile(spans, 50):.2f} | {percentile(spans, 99):.2f} |")
    print("\nslurmrestd requests (first 5 s): duration p50 / p99")
    for kind, spans in durations(trace).items():
        print(f"  {kind}: {len(spans)}, {percentile(spans, 50):.3f} / {percentile(spans, 99):.3f} s")
    print("\nin flight:")
    print("\n".join(in_flight(trace)))


if __name__ == "__main__":
    main()
