"""How `bench.run` turns a run into its tables: each phase's rate and percentiles, the
floor this machine allows, where each Pod's time went, and the CPU by component."""

from __future__ import annotations

from bench.observe import Result, gap_rows, percentile


def say(r: Result, n: int) -> None:
    print(
        f"  {r.name}: {r.count}/{n} in {r.seconds:.1f} s ({r.rate:.1f}/s), "
        f"p50 {r.pct(50):.2f} s, p99 {r.pct(99):.2f} s",
        flush=True,
    )


def stage_medians(created: dict[str, float], seen: dict[str, dict[str, float]]) -> dict[str, float]:
    """Median seconds from creation to the job ID on the Pod, and from there to bound."""
    to_submitted, to_bound = [], []
    for name, marks in seen.items():
        if name in created and {"submitted", "bound"} <= set(marks):
            to_submitted.append(marks["submitted"] - created[name])
            to_bound.append(marks["bound"] - marks["submitted"])
    return {"to_submitted_s": percentile(to_submitted, 50), "to_bound_s": percentile(to_bound, 50)}


# A Pod's way through sunk, stage by stage: the Pod watch's marks (monotonic, here) and
# the Slurm daemons' log lines (wall clock, moved onto the same clock).
POD_CHAIN = ("created", "submitted", "started", "launched", "marked", "bound", "running")


POD_SIDE = (("created", "job ID on Pod"), ("submitted", "job ID on Pod"), ("job ID on Pod", "bound"))


# A raw job's: sent to slurmrestd, the same Slurm stages, then its own file mark.
RAW_CHAIN = ("sent", "submitted", "started", "launched", "marked", "script mark")


TIMELINE_HEADER = ("| N / path | from → to | seen | p50 s | p99 s | reversed |", "|---|---|---|---|---|---|")


def pod_marks(
    created: dict[str, float],
    seen: dict[str, dict[str, float]],
    job_ids: dict[str, int],
    slurm: dict[int, dict[str, float]],
    wall_minus_monotonic: float,
) -> dict[str, dict[str, float]]:
    """Pod name → stage → monotonic time, for each Pod created: `created` (its creation
    sent), `job ID on Pod` (the scheduler's annotation seen), `bound`, `running` (the
    watch), and the Slurm stages of the job it was given (`slurm`, wall clock)."""
    marks: dict[str, dict[str, float]] = {}
    for name, sent in created.items():
        watched = seen.get(name, {})
        own = {"created": sent}
        if "submitted" in watched:
            own["job ID on Pod"] = watched["submitted"]
        own |= {k: watched[k] for k in ("bound", "running") if k in watched}
        if name in job_ids:
            own |= {k: t - wall_minus_monotonic for k, t in slurm.get(job_ids[name], {}).items()}
        marks[name] = own
    return marks


def floor_rate(raw: Result, kube: Result, cores: int, split: bool) -> float:
    """The fastest sunk could place Pods on this machine in this run: each Pod costs at
    least a raw job's CPU plus the kube path's (create, bind, its Event and status) plus one
    more write, the job ID, priced as an average write of the kube path. CPU seconds are the
    whole machine's busy time per Pod in each phase. Split cores: the Kubernetes half alone
    must carry the Kubernetes side, and Slurm's half gives raw Slurm's rate. Never above
    raw Slurm's own rate: sunk runs every Pod through it."""
    raw_cpu = raw.cpu.get("machine (busy)", 0.0) / max(1, raw.count)
    kube_cpu = kube.cpu.get("machine (busy)", 0.0) / max(1, kube.count)
    writes = sum(kube.writes.values()) or 1.0
    kube_side = kube_cpu * (writes + 1) / writes
    if split:
        cap = (cores / 2) / kube_side if kube_side else float("inf")
    else:
        cap = cores / (raw_cpu + kube_side) if raw_cpu + kube_side else float("inf")
    return min(raw.rate, cap)


def report(
    n: int, nodes: int, arrival: str, results: dict[str, Result], cores: int, split: bool
) -> list[str]:
    ours, raw, kube, end = (
        results["ours"],
        results["raw-slurm"],
        results["kube-scheduler"],
        results["ours-end"],
    )
    floor = floor_rate(raw, kube, cores, split)
    ours.extra["floor_rate"] = floor

    def row(label: str, r: Result, note: str) -> str:
        return (
            f"| {n} {arrival} | {nodes} | {label} | {r.count}/{n} | {r.rate:.1f}/s | "
            f"{r.pct(50):.2f} | {r.pct(95):.2f} | {r.pct(99):.2f} | {note} |"
        )

    usage = (
        f"median created→job ID {ours.extra['to_submitted_s']:.2f} s, job ID→bound "
        f"{ours.extra['to_bound_s']:.2f} s; Slurm calls/Pod {ours.extra['slurm_calls_per_pod']:.1f}; "
        f"scheduler CPU {ours.cpu.get('sunk scheduler', 0):.1f} s, "
        f"peak RSS {ours.extra['peak_rss_mib']:.0f} MiB"
    )
    ended = (
        f"cancelling took {end.extra['scancel_s']:.2f} s; "
        f"→ Pod gone p50 {end.extra['gone_p50']:.2f} s, p99 {end.extra['gone_p99']:.2f} s; machine CPU "
        f"{end.cpu.get('machine (busy)', 0.0):.1f} s (ending as many raw jobs: "
        f"{raw.extra.get('end_machine_cpu_s', 0.0):.1f} s; their scripts got SIGTERM p50 "
        f"{raw.extra.get('end_signal_p50', float('nan')):.2f} s, p99 "
        f"{raw.extra.get('end_signal_p99', float('nan')):.2f} s after it was sent)"
    )
    return [
        row("sunk: create → bound", ours, usage),
        row(
            "raw slurmrestd: submit → started",
            raw,
            f"sunk/raw rate **{ours.rate / raw.rate:.2f}x**; floor {floor:.1f}/s = "
            f"{floor / raw.rate:.2f}x raw, sunk at **{ours.rate / floor:.2f}x** of it",
        ),
        row("kube-scheduler: create → bound", kube, f"sunk/kube rate **{ours.rate / kube.rate:.2f}x**"),
        row("sunk: job cancelled → Pod deleting", end, ended),
    ]


def timeline_rows(at: str, results: dict[str, Result]) -> list[str]:
    """Where each Pod's (or raw job's) time went, stage by stage: medians and p99 of each
    gap; `reversed` counts those that reached the later stage first."""
    rows = []
    for name in ("ours", "raw-slurm"):
        if name in results and results[name].timeline:
            rows += gap_rows(f"{at} {name}", results[name].timeline, results[name].count)
    if "ours" in results:
        waits = {k.removeprefix("ms "): v for k, v in results["ours"].extra.items() if k.startswith("ms ")}
        rows.append(f"| {at} ours | mean ms per slurmrestd call / pass | {waits} | | | |")
    return rows


def cpu_rows(at: str, results: dict[str, Result]) -> list[str]:
    rows = []
    for name, r in results.items():
        writes = ", ".join(f"{k} {v:.2f}" for k, v in r.writes.items())
        calls = ", ".join(f"{k} {v:.2f}" for k, v in r.calls.items())
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in r.cpu.items())
        rows.append(f"| {at} | {name} | {cpu} | {writes} | {calls} |")
    return rows
