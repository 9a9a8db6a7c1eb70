"""What `bench.run` reads from the scheduler's own Prometheus metrics: its slurmrestd
requests and hook calls by kind, and the mean time of its calls and passes."""

from __future__ import annotations

import httpx


def counted(metrics_port: int, series: str, label: str) -> dict[str, float] | None:
    """One counter of the scheduler's own metrics so far, by the value of one label. On a
    machine a thousand ending jobs keep busy the answer can take a while: wait for it, and
    when it does not come, say so and count nothing rather than lose the run's figures."""
    try:
        text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=120).text
    except httpx.HTTPError as err:
        print(f"  (the scheduler's metrics did not answer: {err!r}; {series} not counted)", flush=True)
        return None
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(series + "{"):
            value = line[line.index(f'{label}="') + len(label) + 2 :].split('"', 1)[0]
            counts[value] = float(line.split()[-1])
    return counts


def slurm_calls(metrics_port: int) -> dict[str, float] | None:
    """The scheduler's slurmrestd requests so far, by endpoint."""
    return counted(metrics_port, "sunk_slurm_api_request_seconds_count", "endpoint")


def hook_calls(metrics_port: int) -> dict[str, float] | None:
    """The placeholders' hook calls so far, by outcome (a `terminating_wait` is a long poll
    that ended before the Pod was gone: the placeholder signs and calls again)."""
    return counted(metrics_port, "sunk_hook_calls_total", "outcome")


def mean_ms(
    metrics_port: int, histogram: str, label: str, before: dict[str, dict[str, float]] | None
) -> dict[str, float]:
    """Mean milliseconds per observation of one of the scheduler's histograms since
    `before` (a `histogram_totals` reading), by the value of one label; none when either
    reading could not be taken."""
    now = histogram_totals(metrics_port, histogram, label)
    if before is None or now is None:
        return {}
    means = {}
    for key, count in now["count"].items():
        spent = count - before["count"].get(key, 0.0)
        if spent > 0:
            means[key] = round(1000 * (now["sum"].get(key, 0.0) - before["sum"].get(key, 0.0)) / spent, 1)
    return means


def histogram_totals(metrics_port: int, histogram: str, label: str) -> dict[str, dict[str, float]] | None:
    """A histogram's sums and counts so far, or None when the metrics did not answer."""
    sums = counted(metrics_port, f"{histogram}_sum", label)
    counts = counted(metrics_port, f"{histogram}_count", label)
    return None if sums is None or counts is None else {"sum": sums, "count": counts}


def calls_per_pod(
    before: dict[str, float] | None, after: dict[str, float] | None, pods: int
) -> dict[str, float]:
    """Calls per Pod between two counts; none when either count could not be read."""
    if before is None or after is None:
        return {}
    spent = {k: (v - before.get(k, 0.0)) / max(1, pods) for k, v in after.items()}
    return {k: round(v, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v > 0}


SLURM_SECONDS = "sunk_slurm_api_request_seconds"


PASS_SECONDS = "sunk_reconcile_duration_seconds"
