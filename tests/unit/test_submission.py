"""Whether a Pod may have a placeholder job, decided without I/O: the order in which
problems refuse a Pod (R2.4, R12.1, R11, R7.2) and the warnings it carries (R3, R9.3)."""

from __future__ import annotations

from typing import Any

from sunk.scheduler.decide.submission import Refusal, vet
from sunk.scheduler.policy import PERMISSIVE, parse
from sunk.scheduler.translate import Settings, translate
from sunk.slurm.request import JobRequest
from tests.fakes.scheduler_world import PREFIX, pod

SETTINGS = Settings(PREFIX, 30, "sunk")


def nothing_unsupported(_job: JobRequest) -> list[str]:
    return []


def vetted(manifest: dict[str, Any], **kw: Any) -> Any:
    return vet(
        manifest,
        translate(manifest, SETTINGS),
        kw.pop("rules", PERMISSIVE),
        kw.pop("unsupported", nothing_unsupported),
        prefix=PREFIX,
        refuse_static_cpu=kw.pop("refuse_static_cpu", False),
    )


def guaranteed(cpu: str = "2") -> dict[str, Any]:
    manifest = pod(cpu=cpu)
    manifest["status"]["qosClass"] = "Guaranteed"
    return manifest


def test_r2_4_an_invalid_pod_is_refused_with_every_problem() -> None:
    result = vetted(pod(terminationGracePeriodSeconds=3600, cpu="banana"))
    assert result.job is None
    assert result.refusal.reason == "InvalidForSlurm"
    problems = " | ".join(result.refusal.problems)
    assert '"banana" is not a quantity' in problems
    assert "terminationGracePeriodSeconds: 24 or less" in problems


def test_r12_1_a_pod_breaking_its_namespaces_policy_is_refused() -> None:
    rules = parse("namespaces:\n  ns:\n    uids: [1000]\n    gids: [1000]\n    defaultUid: 1000\n")
    result = vetted(pod(annotations={PREFIX + "user-id": "0"}), rules=rules)
    assert result.refusal is not None and result.refusal.reason == "ForbiddenByPolicy"
    assert result.refusal.problems[0].startswith("namespace ns ")


def test_r11_what_the_rest_version_cannot_express_is_refused() -> None:
    result = vetted(pod(), unsupported=lambda _job: ["exclusive=topo needs v0.0.41"])
    assert result.refusal == Refusal("InvalidForSlurm", ("exclusive=topo needs v0.0.41",))


def test_r7_2_static_cpu_pinning_is_a_warning_by_default() -> None:
    result = vetted(guaranteed())
    assert result.job is not None
    assert [n.reason for n in result.notices] == ["StaticCPUPinning"]


def test_r7_2_static_cpu_pinning_is_refused_when_the_scheduler_says_so() -> None:
    result = vetted(guaranteed(), refuse_static_cpu=True)
    assert result.refusal is not None
    assert result.refusal.problems[0].endswith("this scheduler refuses such Pods")


def test_r9_3_rules_sunk_does_not_apply_are_named_not_dropped() -> None:
    manifest = pod(
        affinity={
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
                ]
            }
        }
    )
    result = vetted(manifest)
    assert result.job is not None
    assert [n.reason for n in result.notices] == ["SchedulingRuleNotHonoured"]
    assert result.notices[0].note.startswith("sunk does not apply: ")


def test_r2_a_plain_pod_gets_its_job_and_no_warning() -> None:
    result = vetted(pod())
    assert result.refusal is None and result.notices == ()
    assert result.job is not None and result.job.cpus == 1


def test_the_first_kind_of_problem_refuses_even_when_later_ones_would_too() -> None:
    result = vetted(pod(cpu="banana"), unsupported=lambda _job: ["never asked"])
    assert result.refusal is not None and result.refusal.reason == "InvalidForSlurm"
    assert "never asked" not in result.refusal.problems
