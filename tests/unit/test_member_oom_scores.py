"""Issue #49: a job past its memory loses its task to the OOM killer, never its slurmstepd.

The member's start script (sunk.operator.nodeset.confinement.OOM_FLOOR) chooses the OOM scores slurmd
and slurmstepd start with. Run here with sh on this machine's kernel, from a process at the
score the kubelet gives a Burstable Pod, as a member's container starts.
"""

from __future__ import annotations

import subprocess

from sunk.operator.nodeset.confinement import OOM_FLOOR

BURSTABLE = 979


def start_script(then: str, *, env: dict[str, str] | None = None) -> str:
    """OOM_FLOOR run by a shell whose score is BURSTABLE, followed by `then` (which reads what
    the daemons would: the environment a child process gets)."""
    raise_then_run = f'echo {BURSTABLE} >/proc/self/oom_score_adj && exec sh -c "$1"'
    done = subprocess.run(
        ["sh", "-c", raise_then_run, "member", f"{OOM_FLOOR}\n{then}"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def allowed(score: int) -> bool:
    """Whether a process started at BURSTABLE may set `score` (slurmstepd's own test)."""
    script = f"echo {BURSTABLE} >/proc/self/oom_score_adj && echo {score} >/proc/self/oom_score_adj"
    return subprocess.run(["sh", "-c", script], capture_output=True).returncode == 0


def test_slurmstepd_never_starts_above_the_tasks_it_resets_to_zero() -> None:
    """The bug: slurmstepd kept 979 while Slurm moved its tasks to 0, so it was killed first."""
    stepd, slurmd = (int(v) for v in start_script("printenv SLURMSTEPD_OOM_ADJ SLURMD_OOM_ADJ").split())
    tasks = 0 if allowed(0) else stepd  # Slurm resets each task to 0 where the kernel lets it
    assert stepd <= tasks
    assert slurmd == stepd


def test_the_score_chosen_is_the_lowest_this_process_may_set() -> None:
    """Catches a search that stops short (leaving slurmstepd higher than it could be) or
    overshoots to a score the kernel refuses (Slurm then keeps the inherited 979)."""
    stepd = int(start_script("printenv SLURMSTEPD_OOM_ADJ"))
    assert allowed(stepd)
    assert stepd == -999 or not allowed(stepd - 1)


def test_an_administrators_own_score_in_the_environment_is_kept() -> None:
    assert start_script("printenv SLURMSTEPD_OOM_ADJ", env={"SLURMSTEPD_OOM_ADJ": "500"}) == "500"


def test_the_start_script_itself_keeps_its_score() -> None:
    """Only the daemons' environment changes: the probes run in subshells."""
    assert int(start_script("cat /proc/self/oom_score_adj")) == BURSTABLE
