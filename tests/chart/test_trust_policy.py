"""Issue #38, point 2: the chart's trust policy refuses by default, and values that would
reopen root or "anything" fail the render unless scheduler.policy.acknowledgeUnbounded says
so, naming the value."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from sunk.scheduler.policy import PERMISSIVE, PERMISSIVE_YAML
from tests.chart.conftest import CHART, TENANTS, render, render_text
from tests.chart.test_chart import of_kind, policy_of

# Each value (under scheduler.policy.) that grants root or anything, and what it is set to.
UNBOUNDED = [
    pytest.param("default.uids", "{*}", id="any_uid"),
    pytest.param("namespaces.a.gids", "{0}", id="gid_0"),
    pytest.param("namespaces.a.defaultUid", "0", id="root_by_default"),
    pytest.param("default.defaultGid", "0", id="group_0_by_default"),
    pytest.param("default.accounts", "{*}", id="any_account"),
    pytest.param("namespaces.a.partitions", "{*}", id="any_partition"),
    pytest.param("default.qos", "{*}", id="any_qos"),
    pytest.param("default.reservations", "{*}", id="any_reservation"),
    pytest.param("namespaces.a.annotations", "{*}", id="any_placement_or_time_annotation"),
]


@pytest.mark.parametrize(("key", "value"), UNBOUNDED)
def test_issue38_a_value_reopening_root_or_anything_fails_the_render_naming_it(
    helm: Path, key: str, value: str
) -> None:
    """Catches a grant of root or "*" slipping in without the acknowledgement."""
    named = f"scheduler.policy.{key}"
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_text(helm, CHART, TENANTS, f"{named}={value}")
    said = str(failed.value.stderr)
    assert named in said and "scheduler.policy.acknowledgeUnbounded=true" in said


@pytest.mark.parametrize(("key", "value"), UNBOUNDED)
def test_issue38_the_acknowledgement_lets_it_render_and_marks_the_policy(
    helm: Path, key: str, value: str
) -> None:
    named = f"scheduler.policy.{key}"
    objects = render(helm, f"{named}={value}", "scheduler.policy.acknowledgeUnbounded=true")
    [config] = [c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("-policy")]
    assert config["metadata"]["annotations"]["sunk.coreweave.com/unbounded-grants"] == named
    assert policy_of(objects).acknowledged


def test_issue38_named_grants_need_no_acknowledgement(helm: Path) -> None:
    objects = render(
        helm,
        "scheduler.policy.namespaces.web.defaultUid=1001",
        "scheduler.policy.namespaces.web.accounts={web}",
        "scheduler.policy.namespaces.web.annotations={timeout}",
    )
    rules = policy_of(objects).rules_for("web")
    assert (rules.default_uid, rules.accounts, rules.annotations) == (1001, ("web",), ("timeout",))


def test_issue38_the_reference_behaviour_written_as_values_is_the_permissive_policy(helm: Path) -> None:
    """The values docs/security.md gives for "as SUNK does" render the scheduler's own
    permissive policy, nothing more or less."""
    values = {"scheduler": {"scope": {"namespaces": "tenants"}, "policy": yaml.safe_load(PERMISSIVE_YAML)}}
    objects = [d for d in yaml.safe_load_all(render_text(helm, CHART, values=values)) if d]
    policy = policy_of(objects)
    assert (policy.default, policy.namespaces, policy.acknowledged) == (
        PERMISSIVE.default,
        PERMISSIVE.namespaces,
        True,
    )
