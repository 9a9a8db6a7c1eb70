"""Issue #55, a member replaced soon after its job ends: while a member a NodeSet drains still
runs a job, the operator lists Slurm every second, so the member's Pod goes about a second
after its job ends, not up to a whole poll interval (5 s) later; otherwise the poll interval
holds. The new member's readiness is asked every second."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import cast

import pytest

from sunk.operator.app import PolledSlurm, SlurmPoller
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset.removal import drain_reason, waits_on_jobs
from sunk.operator.nodeset.view import SlurmView
from sunk.slurm.models import SlurmJob, SlurmNode
from tests.fakes.operator_world import OperatorWorld

ROLL_OUT = drain_reason("compute", "replaces members with an outdated template")
JOB = SlurmJob(7, "train", "RUNNING", "None", ("compute-001-002",), "", 0, 0, "main", None, None)


def node(state: str, reason: str = "", *, alloc: int = 0, flags: tuple[str, ...] = ()) -> SlurmNode:
    drained = ("DRAIN",) if reason else ()
    return SlurmNode("compute-001-002", state, drained + flags, reason, alloc_cpus=alloc)


@pytest.mark.parametrize(
    ("record", "jobs", "waits"),
    [
        (node("allocated", ROLL_OUT, alloc=2), (JOB,), True),  # a roll-out waits on job 7
        (node("idle", ROLL_OUT, flags=("COMPLETING",)), (), True),  # its epilog still runs
        (node("idle", ROLL_OUT), (), False),  # drained and idle: the member goes next pass
        (node("allocated", alloc=2), (JOB,), False),  # busy, nobody drains it
        (node("allocated", "maintenance by admin", alloc=2), (JOB,), False),  # an admin's drain
        (node("allocated", "sunk: Pod compute-001-002 is being deleted", alloc=2), (JOB,), False),
    ],
    ids=["rollout-busy", "rollout-completing", "rollout-idle", "not-drained", "admin-drain", "prestop-drain"],
)
def test_issue55_a_drain_of_ours_that_waits_on_work_is_told_apart(
    record: SlurmNode, jobs: tuple[SlurmJob, ...], waits: bool
) -> None:
    assert waits_on_jobs({record.name: record}, {record.name: jobs} if jobs else {}) is waits


def poller(view: SlurmView, interval: float = 5.0) -> SlurmPoller:
    p = SlurmPoller(cast(PolledSlurm, object()), interval, lambda: None)
    p.view = view
    return p


def test_issue55_the_operator_lists_slurm_every_second_while_a_drained_member_runs_a_job() -> None:
    busy = node("allocated", ROLL_OUT, alloc=2)
    view = SlurmView({busy.name: busy}, frozenset({"main"}), {busy.name: (JOB,)})
    assert poller(view).pause() == SlurmPoller.DRAINING_S
    assert poller(view, interval=0.5).pause() == 0.5  # never slower than asked


def test_issue55_otherwise_at_the_poll_interval() -> None:
    idle = node("idle", ROLL_OUT)
    assert poller(SlurmView({idle.name: idle}, frozenset({"main"}), {})).pause() == 5.0
    assert poller(SlurmView()).pause() == 5.0  # nothing listed yet


async def test_issue55_a_new_members_start_is_asked_every_second_without_connecting_to_slurmd() -> None:
    """slurmd logs two errors for each connection that sends it nothing: its port is looked
    for in the socket tables, every second until it listens, then every ten."""
    w = OperatorWorld()
    w.add_node("node-1", "10.64.1.11")
    w.add_nodeset("gpu")
    await w.settle("gpu")
    [pod] = w.members("gpu").values()
    [slurmd] = [c for c in pod["spec"]["containers"] if c["name"] == m.CONTAINER]
    startup, readiness = slurmd["startupProbe"], slurmd["readinessProbe"]
    assert (startup["periodSeconds"], readiness["periodSeconds"]) == (1, 10)
    assert startup["periodSeconds"] * startup["failureThreshold"] == 600
    for probe in (startup, readiness):
        assert "tcpSocket" not in probe
        assert probe["exec"] == m.LISTENING_PROBE["exec"]


def test_the_listening_probe_finds_slurmds_port_in_the_socket_tables(tmp_path: Path) -> None:
    """The probe's own command run against socket tables written as the kernel writes them:
    6818 listening (on any address, IPv4 or IPv6) passes; a connection to another node's
    6818, or another port listening, does not."""
    header = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    )
    listening = (
        "   0: 00000000:1AA2 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
    )
    connected = (
        "   1: 0501400A:93A6 0402400A:1AA2 01 00000000:00000000 03:000008CC 00000000     0        0 0 3\n"
    )
    other = "   2: 00000000:1AA1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
    listening6 = (
        "   0: 00000000000000000000000000000000:1AA2 00000000000000000000000000000000:0000 0A"
        " 00000000:00000000 00:00000000 00000000     0        0 3 1\n"
    )
    command = m.LISTENING_PROBE["exec"]["command"]

    def passes(tcp: str, tcp6: str | None) -> bool:
        (tmp_path / "tcp").write_text(header + tcp)
        (tmp_path / "tcp6").unlink(missing_ok=True)
        if tcp6 is not None:
            (tmp_path / "tcp6").write_text(header + tcp6)
        argv = [*command[:-2], str(tmp_path / "tcp"), str(tmp_path / "tcp6")]
        return subprocess.run(argv, check=False).returncode == 0

    assert passes(listening, "")
    assert passes("", listening6)
    assert passes(listening, None)  # a kernel without IPv6 has no tcp6
    assert not passes(connected + other, "")
