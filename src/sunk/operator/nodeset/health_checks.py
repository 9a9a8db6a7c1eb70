"""How the operator's drains and the node health checks' drains meet (issue #51).

The checks (charts/slurm/files/health-check.sh, run by slurmd) own every drain whose reason
starts with `sunk-hc: `, and lift only those, only after a run in which every check passed.
The operator owns its `sunk: NodeSet <name> ...` drains (sunk.operator.nodeset.removal). Neither
ever lifts the other's, which keeps a node that failed a check out of service.

A new member starts the same way: with the checks on it registers drained under
`sunk-hc: verify: ...` (sunk.operator.nodeset.members.FIRST_CHECK_REASON), so it takes no job before
their first clean run.

That leaves one gap: a member the operator drained (to scale in, for a cordon) that is
wanted back. Its reason is the operator's, so a check failing meanwhile could not replace
it, and a plain resume would return the node to jobs without any check having passed since.
With the checks on, the operator therefore never resumes its own drain itself: it hands the
node over, rewriting the reason to `sunk-hc: verify: ...`, and the runner resumes it after
its next clean run, or names the failing check instead. Without the checks (the default),
the operator resumes as it always did, and so it does for a member made before the checks
were turned on (it has no runner to lift a hand-over, and a roll-out skips members drained
by someone else, so a handed-over one would stay drained for ever).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sunk.operator.nodeset import members as m
from sunk.operator.nodeset import removal as r
from sunk.operator.nodeset.actions import Action
from sunk.runtime.actions import Drain, Event, Resume
from sunk.slurm.models import SlurmNode

OWN_PREFIX = "sunk-hc: "  # the runner's OWN; Slurm-side tools classify reasons by it
VERIFY = "verify"  # the check name the runner lifts after any clean run
VERIFYING = "VerifyingMember"  # the Event of a member handed to the checks before it returns


def owned_by_checks(record: SlurmNode) -> bool:
    """Drained under a reason only the health checks may lift."""
    return record.drained and record.reason.startswith(OWN_PREFIX)


def handed_over(record: SlurmNode) -> bool:
    """Drained only to wait for a clean run (the operator's hand-over, or a new member's
    first run): no fault of the node, so another owner's fault reason may replace it."""
    return record.drained and record.reason.startswith(f"{OWN_PREFIX}{VERIFY}: ")


def runs_checks(pod: dict[str, Any]) -> bool:
    """The member has the runner mounted (made while the checks were on)."""
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any(v.get("name") == m.HEALTH_CHECKS_VOLUME for v in volumes)


def verify_reason(nodeset: str) -> str:
    return f"{OWN_PREFIX}{VERIFY}: NodeSet {nodeset} wants it back; it returns once every check passes"


def give_back(nodeset: str, slurm_name: str, record: SlurmNode, checks_on: bool) -> Action | None:
    """What returning a member this NodeSet no longer wants drained takes.

    None when the drain is not this NodeSet's (an administrator's, Slurm's, the checks'
    own: theirs to lift); a Resume without health checks; with them, the hand-over drain
    that the checks lift after a clean run."""
    if owned_by_checks(record) or not r.drained_by(nodeset, record):
        return None
    if checks_on:
        return Drain(slurm_name, verify_reason(nodeset))
    return Resume(slurm_name)


def wanted_back(nodeset: str, slurm_name: str, record: SlurmNode, checks_on: bool) -> list[Action]:
    """The actions for a member this NodeSet wants back: give_back's, and with a hand-over
    the Event that says why the member is not in service yet."""
    action = give_back(nodeset, slurm_name, record, checks_on)
    if action is None:
        return []
    if isinstance(action, Drain):
        note = f"member {slurm_name} is wanted back; it returns once its health checks pass"
        return [action, Event(VERIFYING, note)]
    return [action]


CONFIG_PREFIX = "sunk-hc-config: "  # the runner's comment on a node whose checks cannot all run
CONFIGURED = "HealthChecksConfigured"  # the NodeSet condition that names such members


def config_problems(records: Mapping[str, SlurmNode], names: list[str]) -> list[str]:
    """One line per member whose runner says, in its node's comment, that a check of the
    operator's could not run (a script that is missing or not executable, an interpreter
    the image lacks). Such a problem drains nothing, so without this line only slurmd's log
    would tell."""
    said = []
    for name in names:
        record = records.get(name)
        if record is not None and record.comment.startswith(CONFIG_PREFIX):
            said.append(f"member {name}: {record.comment.removeprefix(CONFIG_PREFIX)}")
    return said
