"""R8.1: metrics and probes that mean something."""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from sunk.slurm.client import SUPPORTED_VERSIONS
from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import runtime
from tests.e2e.test_schedule_flow import create, wait_bound
from tests.support import SchedulerProcess, SlurmRest, make_pod, wait_for

pytestmark = pytest.mark.e2e


def rest_versions(cluster: DevCluster) -> tuple[str, ...]:
    return runtime(cluster.layout).rest_versions


def metric(proc: SchedulerProcess, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_r8_1_metrics_count_what_the_scheduler_did(
    kube: AdminKube, namespace: str, own_scheduler: Any
) -> None:
    proc = own_scheduler()
    create(kube, namespace, make_pod("counted", proc.name))
    wait_bound(kube, namespace, "counted")
    assert metric(proc, 'sunk_schedule_attempts_total{result="submitted"}') == 1
    wait_for(
        lambda: metric(proc, 'sunk_schedule_attempts_total{result="bound"}') == 1, timeout=5, what="bound"
    )
    assert metric(proc, "sunk_pod_create_to_bound_seconds_count") == 1
    assert metric(proc, 'sunk_slurm_api_request_seconds_count{endpoint="POST /job/submit"}') == 1
    assert metric(proc, "sunk_leader") == 1


def test_r8_1_probes_report_health_and_readiness(own_scheduler: Any) -> None:
    proc = own_scheduler()
    base = f"http://127.0.0.1:{proc.probes_port}"
    assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200


def test_r8_1_not_ready_until_slurmrestd_has_answered_once(dev_cluster: Any, namespace: str) -> None:
    """Start-up needs slurmrestd (which REST version to speak); until then the probes answer,
    not ready, and say why."""
    proc = SchedulerProcess(dev_cluster, f"noslurm-{namespace}", "--slurm-api-base=http://127.0.0.1:9").start(
        wait=False
    )
    try:
        base = f"http://127.0.0.1:{proc.probes_port}"

        def readyz() -> httpx.Response | None:
            try:
                return httpx.get(f"{base}/readyz", timeout=2)
            except httpx.HTTPError:
                return None

        answer = wait_for(readyz, timeout=20, what="the probes to answer")
        assert answer.status_code == 503
        assert "slurmrestd" in answer.text
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        assert proc.alive(), "the scheduler must wait for slurmrestd, not exit"
    finally:
        proc.stop()


def test_r11_1_a_slurmrestd_serving_no_version_sunk_speaks_stops_the_scheduler_with_a_sentence(
    dev_cluster: Any, namespace: str, slurm: SlurmRest
) -> None:
    spoken = [v for v in SUPPORTED_VERSIONS if v != slurm.version]
    forced = next(v for v in spoken if v not in rest_versions(dev_cluster))
    proc = SchedulerProcess(dev_cluster, f"oldslurm-{namespace}", f"--slurm-api-version={forced}").start(
        wait=False
    )
    assert proc.proc is not None
    assert proc.proc.wait(timeout=30) == 2
    assert f"--slurm-api-version {forced} is not served by this slurmrestd" in proc.output()


def test_r8_2_the_scheduler_survives_clients_that_hang_up(own_scheduler: Any) -> None:
    """Under load, placeholder scripts give up on slow answers; the write that follows must
    not kill the scheduler (SIGPIPE left at its default once did, silently)."""
    proc = own_scheduler()
    assert proc.proc is not None
    status = Path(f"/proc/{proc.proc.pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    assert ignored & (1 << (signal.SIGPIPE - 1)), "SIGPIPE must be ignored by the scheduler"
    request = b"POST /v1/pods/u/jobs/1/terminating HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" * 50
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", proc.hooks_port), timeout=5) as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.sendall(request)  # then close at once, with a reset, before any answer
    base = f"http://127.0.0.1:{proc.probes_port}"
    assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    assert proc.proc.poll() is None
