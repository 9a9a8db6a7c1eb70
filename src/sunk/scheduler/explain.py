"""`sunk explain -f pod.yaml`: the placeholder job a Pod would get, offline (R9.5)."""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from sunk.scheduler.policy import PERMISSIVE, Policy, check
from sunk.scheduler.translate import PlaceholderJob, Settings, gang, translate
from sunk.scheduler.translate.job import KILL_WAIT_MARGIN_S
from sunk.slurm.client import SUPPORTED_VERSIONS, make_dialect
from sunk.slurm.dialect import group_submission
from sunk.slurm.request import Exclusive, gres_text

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


def manifests(texts: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Pods, PodGroups) in the files, in order."""
    pods, groups = [], []
    for text in texts:
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind", "Pod") == "Pod":
                pods.append(doc)
            elif isinstance(doc, dict) and doc.get("kind") == "PodGroup":
                groups.append(doc)
    if not pods:
        raise ValueError("the files hold no Pod manifest")
    return pods, groups


def explain_group(
    name: str,
    pods: list[dict[str, Any]],
    groups: list[dict[str, Any]],
    settings: Settings,
    api_version: str = SUPPORTED_VERSIONS[0],
    policy: Policy = PERMISSIVE,
) -> dict[str, Any]:
    """The one heterogeneous job the members of PodGroup `name` among `pods` would get
    (R9.1), or why they would wait or be refused."""
    members = sorted(
        (p for p in pods if gang.group_of(p) == name),
        key=lambda p: str((p.get("metadata") or {}).get("name")),
    )
    reports = [explain(p, settings, api_version, policy) for p in members]
    errors = [
        f"{p['metadata'].get('name')}: {e}"
        for p, r in zip(members, reports, strict=True)
        for e in r["errors"]
    ]
    notes = [
        f"{p['metadata'].get('name')}: {n}" for p, r in zip(members, reports, strict=True) for n in r["notes"]
    ]
    found = [g for g in groups if (g.get("metadata") or {}).get("name") == name]
    if found:
        found[0].setdefault("metadata", {}).setdefault("namespace", members[0]["metadata"]["namespace"])
        group, problem = gang.parse(found[0])
        if problem:
            errors.append(problem)
        elif group is not None:
            waiting = gang.waiting_for_members(group, [str(p["metadata"].get("name")) for p in members])
            notes.append(waiting or f"PodGroup {name}: {len(members)} members, minMember {group.min_member}")
            notes.append(f"the job is cancelled and tried again if it waits over {group.timeout_s}s in Slurm")
    else:
        notes.append(f"no PodGroup {name} in the files: the members wait until it exists")
    report: dict[str, Any] = {
        "valid": not errors,
        "errors": errors,
        "notes": notes,
        "api_version": api_version,
        "group": name,
    }
    if not errors:
        dialect = make_dialect(api_version)
        jobs = [translate(p, settings).job for p in members]
        parts = []
        for pod, job in zip(members, jobs, strict=True):
            assert job is not None
            job, _ = check(policy, pod, job, settings.annotation_prefix)
            parts.append(dialect.submission(job.request, "<placeholder script>", {"SUNK_POD": str(job.pod)}))
        try:
            report["job"] = group_submission(parts).body
        except ValueError as err:
            report["valid"] = False
            report["errors"].append(str(err))
            return report
        lines = [r["sbatch"].removesuffix(" placeholder.sh").removeprefix("sbatch ") for r in reports]
        report["sbatch"] = "sbatch " + " : ".join(lines) + " placeholder.sh"
    return report


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
        errors += forbidden + dialect.unsupported(job.request)
    report: dict[str, Any] = {
        "valid": not errors,
        "errors": errors,
        "notes": result.notes,
        "api_version": api_version,
    }
    if job is not None:
        submission = dialect.submission(job.request, "<placeholder script>", {"SUNK_POD": str(job.pod)})
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
        what = f"The members of PodGroup {report['group']} are" if report.get("group") else "The Pod is"
        lines += [f"{what} valid. sunk would submit:", "", "  " + report["sbatch"], ""]
        lines += ["REST body (slurmrestd " + report["api_version"] + "):"]
        lines += ["  " + line for line in json.dumps(report["job"], indent=2).splitlines()]
    else:
        limit = settings.kill_wait_s - KILL_WAIT_MARGIN_S
        what = f"The PodGroup {report['group']}" if report.get("group") else "The Pod"
        lines.append(f"{what} would be refused (kill-wait {settings.kill_wait_s}s, grace limit <{limit}s):")
        lines += [f"  - {error}" for error in report["errors"]]
    if report["notes"]:
        lines += ["", "Notes:"] + [f"  - {note}" for note in report["notes"]]
    return "\n".join(lines)
