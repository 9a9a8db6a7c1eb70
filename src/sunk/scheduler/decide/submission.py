"""Whether a Pod may have a placeholder job at all, decided without I/O (R2, R7.2, R9.3, R12.1).

`vet` takes what the checks need (the translation, the namespace's trust policy, what the
REST version cannot express) and answers with the job to submit or a final refusal, plus
the warnings the Pod should carry either way. Which Slurm nodes it may use is decided after
(`sunk.scheduler.decide.problems.placement_problem`), from the cluster's state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sunk.scheduler import policy
from sunk.scheduler.translate import PlaceholderJob, Translation
from sunk.slurm.request import JobRequest

Json = dict[str, Any]
# Event and condition reasons (kept equal to sunk.kube.events' by a unit test).
INVALID = "InvalidForSlurm"
FORBIDDEN = "ForbiddenByPolicy"
STATIC_CPU = "StaticCPUPinning"
IGNORED_ANNOTATION = "IgnoredAnnotation"
RULE_NOT_HONOURED = "SchedulingRuleNotHonoured"


@dataclass(frozen=True)
class Refusal:
    """Final: the Pod is never tried again (condition reason and every problem found)."""

    reason: str
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Notice:
    """A Warning Event: something the Pod asked for that sunk does not do as asked."""

    reason: str
    note: str


@dataclass(frozen=True)
class Vetting:
    job: PlaceholderJob | None  # None when refused
    refusal: Refusal | None = None
    notices: tuple[Notice, ...] = ()


def static_cpu_problem(pod: Json) -> str | None:
    """R7.2: Guaranteed Pods with whole CPUs get pinned CPUs by the kubelet's static policy,
    which Slurm does not know about."""
    if (pod.get("status") or {}).get("qosClass") != "Guaranteed":
        return None
    cpus = [
        ((c.get("resources") or {}).get("requests") or {}).get("cpu", "")
        for c in (pod.get("spec") or {}).get("containers") or []
    ]
    if not cpus or not all(str(cpu).isdigit() for cpu in cpus):
        return None
    return (
        "the Pod is Guaranteed with whole CPUs, so a kubelet with the static CPU manager policy pins "
        "CPUs Slurm does not know are taken; this can drain the node. Make CPU requests differ from "
        "limits, or use fractional CPUs"
    )


def vet(
    pod: Json,
    translation: Translation,
    rules: policy.Policy,
    unsupported: Callable[[JobRequest], list[str]],
    *,
    prefix: str,
    refuse_static_cpu: bool,
) -> Vetting:
    """The job `pod` may have, or why never. The first kind of problem found refuses the
    Pod, with every problem of that kind: invalid for Slurm, then forbidden by the trust
    policy, then what this REST version cannot express, then static CPU pinning when the
    scheduler refuses it."""
    if translation.errors or translation.job is None:
        return Vetting(None, Refusal(INVALID, tuple(translation.errors)))
    job, forbidden = policy.check(rules, pod, translation.job, prefix)
    if forbidden:
        return Vetting(None, Refusal(FORBIDDEN, tuple(forbidden)))
    problems = unsupported(job.request)
    if problems:
        return Vetting(None, Refusal(INVALID, tuple(problems)))
    pinned = static_cpu_problem(pod)
    if pinned and refuse_static_cpu:
        return Vetting(None, Refusal(INVALID, (pinned + "; this scheduler refuses such Pods",)))
    notices = [Notice(STATIC_CPU, pinned)] if pinned else []
    notices += [Notice(IGNORED_ANNOTATION, note) for note in translation.notes]
    if translation.not_honoured:
        notices.append(
            Notice(RULE_NOT_HONOURED, "sunk does not apply: " + "; ".join(translation.not_honoured))
        )
    return Vetting(job, None, tuple(notices))
