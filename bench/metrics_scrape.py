"""What one scrape of the operator's Slurm metrics costs, and whether it stays flat as the
queue grows (issue #50: a scrape under 100 ms; its cost must not follow the jobs).

Measured in process, on the collector the operator registers, fed listings shaped like a
cluster of `--nodes` nodes in four partitions (some drained and down, GPUs on a quarter)
with 1,000 and then 10,000 jobs in mixed states and pending reasons, and slurmctld's
statistics as Slurm 24.11 answered /diag (recorded). The baseline, measured in the same run,
is a scrape of the process's other metrics alone (what Prometheus reads from the operator
with nothing of Slurm served). The cost of listing Slurm itself is the poller's, paid every
poll interval whether anyone scrapes or not; `python -m bench.run` measures Slurm's side.

    python -m bench.metrics_scrape [--nodes 64] [--runs 200]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from sunk.metrics import REGISTRY
from sunk.operator.metrics.census import count_jobs
from sunk.operator.metrics.slurm_metrics import SlurmMetrics
from sunk.operator.nodeset.view import SlurmView
from sunk.slurm.diag import parse_diag
from sunk.slurm.models import SlurmJob, SlurmNode

DIAG = Path(__file__).parents[1] / "tests/unit/samples/slurm-24.11.5-4/v0.0.42/diag.json"
PARTITIONS = ("main", "gpu", "debug", "long")
REASONS = ("Resources", "Priority", "Dependency", "JobHeldUser", "QOSMaxJobsPerUserLimit", "BeginTime")


def nodes(count: int) -> dict[str, SlurmNode]:
    """Nodes of 64 CPUs and 512 GiB, a quarter with 8 GPUs; one in 16 drained, one in 32 down."""
    made = {}
    for i in range(count):
        drained, down = i % 16 == 5, i % 32 == 7
        gpus = (("gpu", 8),) if i % 4 == 0 else ()
        made[f"node-{i:04d}"] = SlurmNode(
            name=f"node-{i:04d}",
            state="down" if down else ("mixed" if i % 3 else "idle"),
            flags=("DRAIN",) if drained else (),
            reason="Kill task failed" if down else ("disk swap" if drained else ""),
            reason_changed_at=1_795_000_000 if drained or down else 0,
            partitions=(PARTITIONS[i % len(PARTITIONS)],),
            cpus=64,
            alloc_cpus=32 if i % 3 else 0,
            memory_mib=524288,
            alloc_memory_mib=65536 if i % 3 else 0,
            gres=gpus,
            gres_used=(("gpu", 4),) if gpus and i % 3 else (),
        )
    return made


def jobs(count: int) -> list[SlurmJob]:
    """Two in five running, the rest pending for one of six reasons."""
    made = []
    for i in range(count):
        running = i % 5 < 2
        made.append(
            SlurmJob(
                job_id=i + 1,
                name=f"job-{i}",
                state="RUNNING" if running else "PENDING",
                reason="None" if running else REASONS[i % len(REASONS)],
                nodes=(f"node-{i % 64:04d}",) if running else (),
                comment="",
                user_id=20001,
                group_id=30000,
                partition=PARTITIONS[i % len(PARTITIONS)],
                time_limit_min=60,
                priority=1,
                submit_time=1_795_000_000 + i,
            )
        )
    return made


def median_ms(scrape: Callable[[], bytes], runs: int) -> tuple[float, int]:
    size = len(scrape())  # warm up, and what Prometheus receives
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        scrape()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), size


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    diag = parse_diag(json.loads(DIAG.read_text())["body"])
    answered = {"nodes": True, "partitions": True, "jobs": True, "diag": True}
    listed = nodes(args.nodes)
    membership = {name: "compute" for name in listed}
    baseline, base_size = median_ms(lambda: generate_latest(REGISTRY), args.runs)
    print(f"{args.nodes} nodes, median of {args.runs} scrapes each")
    print(f"  baseline (the operator's other metrics): {baseline:.2f} ms, {base_size} bytes")
    for count in (1_000, 10_000):
        collector = SlurmMetrics(membership=lambda: membership)
        listing = jobs(count)
        started = time.perf_counter()
        census = count_jobs(listing)  # paid once per listing by the poller, not per scrape
        counting_ms = (time.perf_counter() - started) * 1000
        view = SlurmView(listed, frozenset(PARTITIONS), {}, listed_at=time.monotonic(), census=census)
        collector.listed(view, diag, answered, 0.05)
        registry = CollectorRegistry()
        registry.register(collector)
        alone, size = median_ms(functools.partial(generate_latest, registry), args.runs)
        both = alone + baseline
        print(
            f"  {count:>6} jobs: Slurm's metrics {alone:.2f} ms ({size} bytes); whole scrape "
            f"{both:.2f} ms = {both / baseline:.1f}x the baseline; counting the jobs once per "
            f"listing {counting_ms:.1f} ms"
        )


if __name__ == "__main__":
    main()
