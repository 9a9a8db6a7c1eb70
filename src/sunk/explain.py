"""`sunk explain -f pod.yaml`: the placeholder job a Pod would get, offline (R9.5)."""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from sunk.policy import PERMISSIVE, Policy, check
from sunk.slurm.client import SUPPORTED_VERSIONS, make_dialect
from sunk.translate import Exclusive, PlaceholderJob, Settings, gres_text, translate
from sunk.translate.job import KILL_WAIT_MARGIN_S

_SBATCH_EXCLUSIVE = {
    Exclusive.NONE: "--exclusive",
    Exclusive.OK: "--oversubscribe",
    Exclusive.USER: "--exclusive=user",
    Exclusive.MCS: "--exclusive=mcs",
    Exclusive.TOPO: "--exclusive=topo",
}


def sbatch_line(job: PlaceholderJob) -> str:
    o = job.options
    args = [
        "sbatch",
        f"--job-name={job.name}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={job.cpus}",
        f"--mem={job.memory_mib}M",
        "--no-requeue",
    ]
    if job.gres:
        args.append(f"--gres={gres_text(job.gres)}")
    if o.exclusive is not None:
        args.append(_SBATCH_EXCLUSIVE[o.exclusive])
    pairs = [
        ("--partition", o.partition),
        ("--account", o.account),
        ("--qos", o.qos),
        ("--reservation", o.reservation),
        ("--constraint", o.constraints),
        ("--prefer", o.prefer),
        ("--comment", o.comment or None),
        ("--time", str(o.timeout_minutes) if o.timeout_minutes else None),
        ("--priority", str(o.priority) if o.priority is not None else None),
        ("--nodelist", ",".join(o.required_nodes) or None),
        ("--exclude", ",".join(job.excluded_nodes) or None),
        ("--chdir", o.current_working_dir),
    ]
    args += [f"{flag}={value}" for flag, value in pairs if value]
    if (o.user_id, o.group_id) != (0, 0):
        args += [f"--uid={o.user_id}", f"--gid={o.group_id}"]
    return shlex.join(args) + " placeholder.sh"


def first_pod(text: str) -> dict[str, Any]:
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind", "Pod") == "Pod":
            return doc
    raise ValueError("the file holds no Pod manifest")


def explain(
    pod: dict[str, Any],
    settings: Settings,
    api_version: str = SUPPORTED_VERSIONS[0],
    policy: Policy = PERMISSIVE,
) -> dict[str, Any]:
    """The job `pod` would get from a slurmrestd speaking `api_version` under `policy`, or
    every reason it would be refused (the scheduler's own checks, in the same order)."""
    dialect = make_dialect(api_version)
    meta = pod.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", "<pod-uid>")
    result = translate(pod, settings)
    errors = list(result.errors)
    job = result.job
    if job is not None:
        job, forbidden = check(policy, pod, job, settings.annotation_prefix)
        errors += forbidden + dialect.unsupported(job)
    report: dict[str, Any] = {
        "valid": not errors,
        "errors": errors,
        "notes": result.notes,
        "api_version": api_version,
    }
    if job is not None:
        submission = dialect.submission(job, "<placeholder script>", {"SUNK_POD": str(job.pod)})
        report["job"] = submission.body
        report["sbatch"] = sbatch_line(job)
        rules = policy.rules_for(job.pod.namespace)
        report["policy"] = rules.where
        report["notes"].append(
            f"policy: the rules {rules.where} apply to namespace {job.pod.namespace}; the job runs as "
            f"uid {job.options.user_id}, gid {job.options.group_id}"
        )
    spec = pod.get("spec") or {}
    if spec.get("nodeSelector") or (spec.get("affinity") or {}).get("nodeAffinity"):
        report["notes"].append(
            "nodeSelector/node affinity are resolved against the cluster's Nodes at submit time: "
            "Slurm nodes whose Node does not match are added to the excluded nodes"
        )
    return report


def render_text(report: dict[str, Any], settings: Settings) -> str:
    lines = []
    if report["valid"]:
        lines += ["The Pod is valid. sunk would submit:", "", "  " + report["sbatch"], ""]
        lines += ["REST body (slurmrestd " + report["api_version"] + "):"]
        lines += ["  " + line for line in json.dumps(report["job"], indent=2).splitlines()]
    else:
        limit = settings.kill_wait_s - KILL_WAIT_MARGIN_S
        lines.append(f"The Pod would be refused (kill-wait {settings.kill_wait_s}s, grace limit <{limit}s):")
        lines += [f"  - {error}" for error in report["errors"]]
    if report["notes"]:
        lines += ["", "Notes:"] + [f"  - {note}" for note in report["notes"]]
    return "\n".join(lines)
