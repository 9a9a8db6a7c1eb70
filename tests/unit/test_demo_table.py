"""`sunk demo`'s table: each Pod next to its Slurm job, and a refusal's reason whole."""

from __future__ import annotations

from sunk.scheduler.translate.job import check_grace_period
from sunk_dev.demo import table

REFUSAL = check_grace_period({"terminationGracePeriodSeconds": 30}, 30) or ""


def pod(name: str, node: str = "", job: str = "", reason: str = "", message: str = "") -> dict[str, object]:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": reason, "message": message}]
    return {
        "metadata": {"name": name, "annotations": {"sunk.coreweave.com/job-id": job} if job else {}},
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": conditions if reason else []},
    }


def test_a_refused_pods_reason_is_printed_whole_however_narrow_the_terminal() -> None:
    """Issue #32: the note was cut at 70 characters, so the one refusal ended mid-sentence."""
    pods = [
        pod("cpu-shared-a", node="node-004", job="7"),
        pod("invalid-grace", reason="InvalidForSlurm", message=REFUSAL),
    ]
    for width in (80, 120, 300):
        lines = table(pods, {"cpu-shared-a": 0.41}, {"7": ["RUNNING", "sn-001", "root"]}, width)
        assert lines[0].split()[:4] == ["POD", "NODE", "JOB", "SLURM"]
        assert "node-004" in lines[1] and "sn-001" in lines[1] and "0.41s" in lines[1]
        assert "InvalidForSlurm (below)" in lines[2]
        said = " ".join(" ".join(lines[lines.index("") + 1 :]).split())
        assert said == f"invalid-grace: {REFUSAL}"
        assert all(len(line) <= width for line in lines[3:])
