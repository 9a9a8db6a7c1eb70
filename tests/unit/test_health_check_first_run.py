"""Issue #51 point 1, "once before the node first takes jobs": with the health checks on, a
new member registers drained under the checks' hand-over reason (`slurmd -Z --conf "...
State=DRAIN Reason=..."`; slurmctld creates a dynamic node in the State its registration
names, Slurm 23.11 on), and the runner's first clean run resumes it. Until then it is no
one's fault: not unhealthy, not the operator's to resume, and a Node fault takes it over."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from sunk.operator.nodeset import health_checks as hc
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset import node_faults as nf
from tests.fakes.operator_world import CONFIG, OperatorWorld
from tests.unit import test_health_check_runner as runner

MEMBER = "a-001-011"  # NodeSet a's member on node-1 (10.64.1.11)
# Slurm's key=value pattern for configuration lines (src/common/parse_config.c,
# keyvalue_pattern): a value in double quotes is taken whole, spaces and all.
SLURM_KEY_VALUE = re.compile(r'\s*([\w.]+)\s*([-*+/]?)=\s*(("([^"]*)")|(\S+))(\s|$)')


def slurm_parse(line: str) -> dict[str, str]:
    found = {}
    while line.strip():
        match = SLURM_KEY_VALUE.match(line)
        assert match, f"Slurm would not parse {line!r}"
        found[match.group(1)] = match.group(5) if match.group(4) else match.group(6)
        line = line[match.end() :]
    return found


def world(checks: bool = True, conditions: tuple[str, ...] = ()) -> OperatorWorld:
    config = replace(
        CONFIG, health_checks_configmap="r1-health-checks" if checks else "", node_conditions=conditions
    )
    w = OperatorWorld(config=config)
    w.add_node("node-1", "10.64.1.11")
    w.add_nodeset("a", replicas=1)
    return w


def registered_with(w: OperatorWorld) -> str:
    [pod] = w.members().values()
    args: list[str] = pod["spec"]["containers"][0]["args"]
    return args[args.index("--conf") + 1]


async def started(w: OperatorWorld) -> None:
    """The member is made, runs and registers; its runner has not run yet."""
    await w.reconcile("a")
    w.kubelet()
    w.slurmd()
    await w.reconcile("a")


async def test_with_checks_on_a_member_registers_drained_for_its_first_run() -> None:
    """Catches: a new member taking jobs before any check has run (slurmd's run before it
    registers checks nothing), or Slurm reading the reason cut at its first space."""
    w = world()
    await w.reconcile("a")
    conf = registered_with(w)
    [pod] = w.members().values()
    hardware = pod["metadata"]["annotations"][m.SLURMD_CONF]
    assert conf == f'{hardware} State=DRAIN Reason="{m.FIRST_CHECK_REASON}"'
    parsed = slurm_parse(conf)
    assert (parsed["State"], parsed["Reason"]) == ("DRAIN", m.FIRST_CHECK_REASON)
    assert parsed["CPUs"] == slurm_parse(hardware)["CPUs"]


async def test_without_checks_a_member_registers_as_before() -> None:
    """Catches: members drained with no runner to return them (checks off)."""
    w = world(checks=False)
    await w.reconcile("a")
    assert "State=" not in registered_with(w)


async def test_the_registered_drain_leaves_the_hardware_annotation_alone() -> None:
    """Catches: the roll-out comparing the drain words with the Node's shape and replacing
    every member on every pass (rollout.why_outdated reads the annotation)."""
    w = world()
    await w.settle("a")
    [pod] = w.members().values()
    assert "State=" not in pod["metadata"]["annotations"][m.SLURMD_CONF]
    await w.settle("a")
    assert [p["metadata"]["uid"] for p in w.members().values()] == [pod["metadata"]["uid"]]


def test_the_first_run_reason_is_the_runners_own_hand_over() -> None:
    """Catches: a reason the runner would not lift (a new member drained for ever), one with
    a double quote (it would end Slurm's quoted value), or one the operator or the metrics
    would count as a failed check."""
    assert m.FIRST_CHECK_REASON.startswith(f"{hc.OWN_PREFIX}{hc.VERIFY}: ")
    assert '"' not in m.FIRST_CHECK_REASON


def test_the_runners_first_clean_run_returns_the_new_member(tmp_path: Path) -> None:
    """Catches: the new member kept drained after its checks passed."""
    member = runner.Node(tmp_path)
    member.record(runner.node_line("IDLE+DRAIN", m.FIRST_CHECK_REASON))
    member.script("10-ok", "exit 0")
    assert member.run().calls == [runner.RESUME]


def test_a_new_member_failing_its_first_run_gets_the_checks_reason(tmp_path: Path) -> None:
    """Catches: a new member that fails a check kept under the waiting reason, which says
    nothing of the fault (and is not counted unhealthy)."""
    member = runner.Node(tmp_path)
    member.record(runner.node_line("IDLE+DRAIN", m.FIRST_CHECK_REASON))
    member.script("10-gpu", "echo GPU 3 fell off the bus; exit 1")
    assert member.run().calls == [runner.drain("sunk-hc: 10-gpu: GPU 3 fell off the bus")]


async def test_the_operator_neither_resumes_nor_counts_a_member_waiting_for_its_first_run() -> None:
    """Catches: the operator lifting the drain itself (no check would have run), or the
    wait shown as a failed check (the unhealthy count, a HealthCheckFailed Event)."""
    w = world()
    await started(w)
    record = w.slurm.record(MEMBER)
    assert record.drained and record.reason == m.FIRST_CHECK_REASON
    assert [c for c in w.slurm.calls if c[0] in ("resume", "drain")] == []
    assert w.status("a")["unhealthy"] == 0
    assert "HealthCheckFailed" not in w.kube.reasons()
    w.first_checks()  # the runner's first clean run
    await w.reconcile("a")
    assert not w.slurm.record(MEMBER).drained


async def test_a_node_fault_takes_over_a_member_waiting_for_its_first_run() -> None:
    """Catches: a member whose Node reports a fault returned to jobs by its checks' clean
    run (the wait is nobody's decision to keep, the fault is)."""
    w = world(conditions=nf.DEFAULT_CONDITIONS)
    await w.reconcile("a")
    w.kubelet()
    w.slurmd()
    node = w.nodes.get("node-1")
    assert node is not None
    node["status"]["conditions"].append(
        {
            "type": "KernelDeadlock",
            "status": "True",
            "reason": "DockerHung",
            "message": "task docker:7 blocked",
        }
    )
    await w.reconcile("a")
    assert w.slurm.record(MEMBER).reason == "sunk-node: KernelDeadlock: task docker:7 blocked"
