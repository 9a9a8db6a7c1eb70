"""The member's preStop hook (R10.5), run by sh against a stand-in `scontrol` that answers
from a script of states: it drains unless someone already did, waits while Slurm shows
work or cannot be asked, and lets slurmd stop once the node is idle."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sunk.operator.nodeset.members import PRE_STOP

SCONTROL = r"""#!/bin/sh
# `show node`: the next line of $STATES ("fail" = no answer); `update`: logged.
if [ "$1" = update ]; then echo "$*" >> "$LOG"; exit 0; fi
line=$(head -n 1 "$STATES"); sed -i 1d "$STATES"
[ -z "$line" ] && line=$(tail -n 1 "$LOG.last" 2>/dev/null)
echo "$line" > "$LOG.last"
[ "$line" = fail ] && exit 1
echo "NodeName=$3 Arch=x86_64 State=$line ThreadsPerCore=1"
"""


def run(tmp_path: Path, states: list[str], seconds: float = 10) -> tuple[int, list[str], int]:
    """(exit code, scontrol updates, states left unread) for a hook given `seconds`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    (bin_dir / "sleep").write_text("#!/bin/sh\n")  # no waiting between polls
    (bin_dir / "sleep").chmod(0o755)
    (tmp_path / "states").write_text("".join(f"{s}\n" for s in states))
    log = tmp_path / "log"
    log.touch()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STATES": str(tmp_path / "states"), "LOG": str(log)}
    try:
        done = subprocess.run(["sh", "-c", PRE_STOP, "pre-stop", "gpu-001-002"], env=env, timeout=seconds)
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = -1
    left = len((tmp_path / "states").read_text().splitlines())
    return code, log.read_text().splitlines(), left


def test_r10_5_a_busy_node_is_drained_and_the_hook_returns_only_once_it_is_idle(tmp_path: Path) -> None:
    code, updates, left = run(tmp_path, ["MIXED", "MIXED+DRAIN", "MIXED+DRAIN", "IDLE+DRAIN"])
    assert code == 0 and left == 0
    assert updates == [
        "update nodename=gpu-001-002 state=drain reason=sunk: Pod gpu-001-002 is being deleted"
    ]


def test_r10_5_a_node_someone_drained_keeps_their_drain(tmp_path: Path) -> None:
    code, updates, _ = run(tmp_path, ["IDLE+DRAIN", "IDLE+DRAIN"])
    assert code == 0 and updates == []


def test_r10_5_a_drain_the_health_checks_lift_after_a_clean_run_is_replaced(tmp_path: Path) -> None:
    """A member handed to the checks (or new) is drained only until their runner's next
    clean run: the hook drains it under its own reason, or the runner could return the node
    to jobs as slurmd stops."""
    verify = "IDLE+DRAIN Reason=sunk-hc: verify: NodeSet a wants it back"
    code, updates, _ = run(tmp_path, [verify, "IDLE+DRAIN"])
    assert code == 0
    assert updates == [
        "update nodename=gpu-001-002 state=drain reason=sunk: Pod gpu-001-002 is being deleted"
    ]


def test_r10_5_no_answer_from_slurm_means_wait_not_stop(tmp_path: Path) -> None:
    code, _, left = run(tmp_path, ["ALLOCATED+DRAIN", "fail", "fail", "IDLE+COMPLETING+DRAIN", "IDLE+DRAIN"])
    assert code == 0 and left == 0  # it read every state: neither failure nor COMPLETING let it go


def test_r10_5_a_node_that_stays_busy_holds_the_hook_until_the_grace_period(tmp_path: Path) -> None:
    code, _, _ = run(tmp_path, ["MIXED+DRAIN"], seconds=2)  # for ever (the last answer repeats)
    assert code == -1
