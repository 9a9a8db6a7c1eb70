"""Each slurmrestd dialect against real answers recorded from that version
(tests/unit/samples/slurm-<release>/<version>/, made by hack/record-slurm-samples.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from sunk.scheduler.translate import PodRef, Settings, pod_of_job_name, translate
from sunk.slurm.client import SUPPORTED_VERSIONS, SlurmVersionError, choose_version, make_dialect
from sunk.slurm.dataparser import job_states, summarize_state
from sunk.slurm.dialect import Submission, group_submission, partition_time_limits
from sunk.slurm.errors import SlurmJobGone, SlurmRejected, SlurmUnavailable, raise_for
from sunk.slurm.hostlist import expand
from sunk.slurm.replies import decode, job_reply_decoder

SAMPLES = Path(__file__).parent / "samples"
RECORDED = sorted(p for p in SAMPLES.glob("slurm-*/v*") if p.is_dir())
IDS = [f"{p.parent.name}/{p.name}" for p in RECORDED]
POD = PodRef("ns", "web-0", "0000-uid")  # what the recorder wrote into its job


def sample(directory: Path, name: str) -> tuple[int, dict[str, Any]]:
    data = json.loads((directory / f"{name}.json").read_text())
    return data["status"], data["body"]


def only_job(directory: Path, name: str) -> dict[str, Any]:
    job: dict[str, Any] = sample(directory, name)[1]["jobs"][0]
    return job


def test_samples_cover_every_version_sunk_speaks() -> None:
    assert {p.name for p in RECORDED} == set(SUPPORTED_VERSIONS)


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r4_2_a_running_placeholder_reads_as_started_on_one_node(directory: Path) -> None:
    job = make_dialect(directory.name).parse_job(only_job(directory, "job-running"))
    assert (job.state, job.running, job.started) == ("RUNNING", True, True)
    assert len(job.nodes) == 1 and job.nodes[0].startswith("sn-")
    assert (job.time_limit_min, job.priority, job.partition) == (30, 5000, "batch")
    assert job.submit_time > 1_700_000_000 and job.start_time >= job.submit_time


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r3_4_the_job_names_its_pod_where_only_the_scheduler_could_write(directory: Path) -> None:
    dialect = make_dialect(directory.name)
    job = dialect.parse_job(only_job(directory, "job-running"))
    assert pod_of_job_name(dialect.owner_name(job), "rec") == POD
    assert pod_of_job_name(dialect.owner_name(job), "another-scheduler") is None


@pytest.mark.parametrize("directory", [p for p in RECORDED if p.name != "v0.0.38"], ids=str)
def test_r11_2_a_job_name_alone_or_a_tag_on_another_users_job_is_not_ours(directory: Path) -> None:
    dialect = make_dialect(directory.name)
    raw = only_job(directory, "job-running")
    job = dialect.parse_job(raw)
    assert job.user_id == 1001
    named_only = dialect.parse_job({**raw, "admin_comment": ""})
    assert (
        named_only.name.startswith("sunk:rec:")
        and pod_of_job_name(dialect.owner_name(named_only), "rec") is None
    )
    other_user = replace(job, user_id=0)
    assert pod_of_job_name(dialect.owner_name(other_user), "rec") is None


@pytest.mark.parametrize("directory", [p for p in RECORDED if p.name != "v0.0.38"], ids=str)
def test_r11_2_the_started_mark_lives_in_extra_not_in_the_comment(directory: Path) -> None:
    dialect = make_dialect(directory.name)
    raw = only_job(directory, "job-running")
    assert raw["extra"] == ": started" and raw["comment"] == "recorded"
    forged = dialect.parse_job({**raw, "extra": "", "comment": "anything: started"})
    assert not forged.started


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r4_5_a_pending_job_has_no_nodes_and_slurms_reason(directory: Path) -> None:
    job = make_dialect(directory.name).parse_job(only_job(directory, "job-pending"))
    assert (job.state, job.pending, job.started, job.nodes) == ("PENDING", True, False, ())
    assert job.reason == "ReqNodeNotAvail"


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r5_a_cancelled_job_is_ending(directory: Path) -> None:
    job = make_dialect(directory.name).parse_job(only_job(directory, "job-cancelled"))
    assert job.state in ("COMPLETING", "CANCELLED") and job.ending
    assert job.why_ending(job.end_time)[0] == "CancelledInSlurm"


STATES = [p for p in RECORDED if make_dialect(p.name).reads_job_states]


def test_every_version_that_reads_job_states_has_a_recorded_answer() -> None:
    assert STATES and all((p / "job-states.json").exists() for p in STATES)


@pytest.mark.parametrize("directory", STATES, ids=[f"{p.parent.name}/{p.name}" for p in STATES])
def test_r5_2_one_state_read_shows_which_jobs_slurm_is_ending(directory: Path) -> None:
    """The recorder's running job, one cancelled while its script holds on, and job 999999,
    which Slurm does not have and leaves out."""
    states = job_states(sample(directory, "job-states")[1])
    running, ending = sorted(states)
    assert states[running] == ("RUNNING", ("RUNNING",))
    assert states[ending] == ("COMPLETING", ("CANCELLED", "COMPLETING"))
    assert 999999 not in states


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r4_3_a_drained_node_reads_as_draining_and_the_others_do_not(directory: Path) -> None:
    dialect = make_dialect(directory.name)
    nodes = [dialect.parse_node(n) for n in sample(directory, "nodes")[1]["nodes"]]
    drained = [n for n in nodes if n.draining]
    assert [n.reason for n in drained] == ["recorded drain"]
    assert [n.drained for n in drained] == [True] and not any(n.drained for n in nodes if not n.draining)
    assert drained[0].reason_changed_at > 1_700_000_000  # when it was drained: tells drains apart
    assert len(nodes) - len(drained) >= 2


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r9_2_a_node_says_what_slurm_has_handed_out_of_it(directory: Path) -> None:
    """The recorder's running job holds one CPU, 256 MiB and one GPU of sn-001."""
    nodes = {
        n.name: n
        for n in map(make_dialect(directory.name).parse_node, sample(directory, "nodes")[1]["nodes"])
    }
    used, idle = nodes["sn-001"], nodes["sn-002"]
    assert (used.cpus, used.alloc_cpus, used.memory_mib, used.alloc_memory_mib) == (8, 1, 16000, 256)
    assert (used.free_gres("gpu"), used.in_use) == (3, True)
    assert (idle.free_gres("gpu"), idle.in_use, idle.partitions) == (4, False, ("batch", "high"))


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r9_2_the_dialects_update_narrows_and_then_clears_a_jobs_excluded_nodes(directory: Path) -> None:
    """Recorded with the dialect's own exclusion_update: an empty list would change nothing."""
    dialect = make_dialect(directory.name)
    steps = {}
    for name, nodes in (("job-excluded-narrowed", ["sn-002"]), ("job-excluded-cleared", [])):
        recorded = json.loads((directory / f"{name}.json").read_text())
        assert recorded["request"] == dialect.exclusion_update(nodes)
        steps[name] = dialect.parse_job(recorded["body"]["jobs"][0]).excluded_nodes
    assert dialect.parse_job(only_job(directory, "job-excluded")).excluded_nodes == (
        "sn-001",
        "sn-002",
        "sn-003",
    )
    assert steps == {"job-excluded-narrowed": ("sn-002",), "job-excluded-cleared": ()}


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r11_3_a_bad_partition_is_final_with_slurms_words(directory: Path) -> None:
    status, body = sample(directory, "submit-bad-partition")
    with pytest.raises(SlurmRejected, match="Invalid partition name") as err:
        raise_for(status, body, "", "submit a job")
    assert err.value.code == 2000 and not err.value.retryable


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_an_unknown_job_is_gone(directory: Path) -> None:
    status, body = sample(directory, "job-unknown")
    with pytest.raises(SlurmJobGone):
        raise_for(status, body, "", "read job")


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r11_3_slurm_queues_a_job_for_a_drained_node_and_says_so_with_its_id(directory: Path) -> None:
    _, body = sample(directory, "submit-drained-node")
    assert isinstance(body["job_id"], int) and body["job_id"] > 0
    codes = {e.get("error_number") or e.get("error_code") for e in body.get("errors") or []}
    assert codes <= {2068}  # 22.05 adds ESLURM_NODE_NOT_AVAIL; later versions say nothing


# -- what is sent -------------------------------------------------------------------------
def placeholder(**annotations: str) -> Any:
    pod = {
        "metadata": {
            "name": "web-0",
            "namespace": "ns",
            "uid": "0000-uid",
            "annotations": {f"sunk.coreweave.com/{k}": v for k, v in annotations.items()},
        },
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}],
        },
    }
    result = translate(pod, Settings(scheduler_name="rec"))
    assert result.job is not None, result.errors
    return result.job


@pytest.mark.parametrize("version", [v for v in SUPPORTED_VERSIONS if v != "v0.0.38"])
def test_r11_2_user_group_and_identity_are_fields_on_current_slurm(version: str) -> None:
    submission = make_dialect(version).submission(
        placeholder(**{"user-id": "1001"}).request, "#!/bin/sh", {"A": "1"}
    )
    job = submission.body["job"]
    assert submission.as_user is None  # no impersonation
    assert (job["user_id"], job["group_id"]) == ("1001", "1001")
    assert job["admin_comment"] == "sunk:rec:ns/web-0:0000-uid runas=1001"
    assert job["environment"] == ["A=1"] and job["script"] == "#!/bin/sh"
    assert job["cpus_per_task"] == 2 and job["memory_per_node"] == {"set": True, "number": 1024}
    assert job["requeue"] is False and "extra" not in job


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_r8_2_a_held_request_is_submitted_held_and_a_plain_one_not(version: str) -> None:
    """A re-adopted Pod's new job is submitted held (issue #34): a dialect that dropped the
    flag would let it launch before its ID is checked against the lost jobs."""
    request = placeholder().request
    dialect = make_dialect(version)
    assert "hold" not in dialect.submission(request, "", {}).body["job"]
    assert dialect.submission(replace(request, hold=True), "", {}).body["job"]["hold"] is True


@pytest.mark.parametrize(
    ("word", "shared"), [("none", "none"), ("ok", "oversubscribe"), ("user", "user"), ("mcs", "mcs")]
)
def test_r3_exclusive_is_slurms_shared_list_on_current_slurm(word: str, shared: str) -> None:
    job = make_dialect("v0.0.42").submission(placeholder(exclusive=word).request, "", {}).body["job"]
    assert job["shared"] == [shared]


def test_r3_5_exclusive_topo_is_refused_only_by_v0_0_40_and_22_05() -> None:
    job = placeholder(exclusive="topo")
    refusing = [v for v in SUPPORTED_VERSIONS if make_dialect(v).unsupported(job.request)]
    assert refusing == ["v0.0.40", "v0.0.38"]


def test_r11_1_the_newest_served_version_sunk_speaks_wins() -> None:
    assert choose_version(["v0.0.40", "v0.0.41", "v0.0.42"]) == "v0.0.42"
    assert choose_version(["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"]) == "v0.0.45"
    assert choose_version(["v0.0.36", "v0.0.37", "v0.0.38"]) == "v0.0.38"
    assert choose_version(["v0.0.40", "v0.0.41", "v0.0.42"], "v0.0.40") == "v0.0.40"


def test_r11_1_a_slurm_serving_nothing_sunk_speaks_is_named_in_one_sentence() -> None:
    with pytest.raises(SlurmVersionError, match=r"serves REST versions v0\.0\.39, and sunk speaks"):
        choose_version(["v0.0.39"])
    with pytest.raises(SlurmVersionError, match="not one sunk speaks"):
        choose_version(["v0.0.42"], "v0.0.39")


@pytest.mark.parametrize(
    ("states", "word"),
    [
        (["RUNNING"], "RUNNING"),
        (["CANCELLED", "COMPLETING"], "COMPLETING"),
        (["PENDING", "REQUEUED"], "REQUEUED"),
        (["RUNNING", "CONFIGURING"], "CONFIGURING"),
        ([], "UNKNOWN"),
    ],
)
def test_job_state_lists_read_as_the_word_squeue_shows(states: list[str], word: str) -> None:
    assert summarize_state(states)[0] == word


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("sn-001", ("sn-001",)),
        ("sn-[001-003]", ("sn-001", "sn-002", "sn-003")),
        ("sn-[001,004],gpu7", ("sn-001", "sn-004", "gpu7")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
        ("", ()),
    ],
)
def test_host_lists_expand_to_node_names(hostlist: str, names: tuple[str, ...]) -> None:
    assert expand(hostlist) == names


@pytest.mark.parametrize("code", [2007, 2050, 1007, 5004, 7000, 11])
def test_r11_3_transient_slurm_errors_are_retried(code: int) -> None:
    with pytest.raises(SlurmUnavailable):
        raise_for(500, {"errors": [{"error_number": code, "error": "busy"}]}, "", "submit a job")


def test_r11_3_an_error_number_sunk_does_not_know_is_retried_not_final() -> None:
    with pytest.raises(SlurmRejected) as err:
        raise_for(500, {"errors": [{"error_number": 2999, "error": "new in a later Slurm"}]}, "", "submit")
    assert err.value.retryable


@pytest.mark.parametrize("version", [v for v in SUPPORTED_VERSIONS if v != "v0.0.38"])
def test_r12_3_every_mapped_device_is_a_gres_of_the_job_on_current_slurm(version: str) -> None:
    job = replace(placeholder(), gres=(("gpu", 1), ("gpu:1g.10gb", 2)))
    body = make_dialect(version).submission(job.request, "", {}).body["job"]
    assert body["tres_per_node"] == "gres/gpu:1,gres/gpu:1g.10gb:2"


GROUPS = [p for p in RECORDED if (p / "job-group.json").exists()]


@pytest.mark.parametrize("directory", GROUPS, ids=[f"{p.parent.name}/{p.name}" for p in GROUPS])
def test_r9_1_each_component_of_a_gangs_job_names_its_member_and_leader(directory: Path) -> None:
    dialect = make_dialect(directory.name)
    jobs = [dialect.parse_job(raw) for raw in sample(directory, "job-group")[1]["jobs"]]
    leader = min(j.job_id for j in jobs)
    assert [(j.group_leader, j.het_job_offset) for j in jobs] == [(leader, 0), (leader, 1)]
    owners = [pod_of_job_name(dialect.owner_name(j), "rec") for j in jobs]
    assert [o.name if o else None for o in owners] == ["train-0", "train-1"]
    assert all(j.running and len(j.nodes) == 1 for j in jobs)
    assert jobs[0].nodes != jobs[1].nodes  # each member gets a node of its own


def test_r9_1_a_plain_job_is_no_gangs_component() -> None:
    directory = RECORDED[-1]
    job = make_dialect(directory.name).parse_job(only_job(directory, "job-running"))
    assert job.group_leader is None


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_r9_1_a_gang_is_one_submission_with_a_component_per_member(version: str) -> None:
    dialect = make_dialect(version)
    members = [placeholder(), placeholder(exclusive="ok")]
    parts = [dialect.submission(job.request, "#!/bin/sh", {"A": str(i)}) for i, job in enumerate(members)]
    body = group_submission(parts).body
    assert body["script"] == "#!/bin/sh" and len(body["jobs"]) == 2
    assert all("script" not in spec for spec in body["jobs"])
    assert [spec["name"] for spec in body["jobs"]] == [parts[0].body["job"]["name"]] * 2


def test_r9_1_members_asking_for_different_users_cannot_share_one_job() -> None:
    dialect = make_dialect("v0.0.38")
    first = dialect.submission(placeholder().request, "", {})
    with pytest.raises(ValueError, match="one Slurm user"):
        group_submission([first, Submission(first.body, as_user="someone")])


@pytest.mark.parametrize("directory", [p for p in RECORDED if (p / "partitions.json").exists()], ids=str)
def test_r10_5_partitions_are_read_with_their_max_time(directory: Path) -> None:
    """The drain-timeout check compares against MaxTime: UNLIMITED must not read as 0."""
    limits = partition_time_limits(sample(directory, "partitions")[1])
    assert limits == {"batch": None, "high": None, "recorded": 90}


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r4_2_a_job_read_without_the_allocation_detail_reads_the_same(directory: Path) -> None:
    """Current Slurm is asked for jobs without `job_resources` (the listing's largest part):
    nothing sunk reads may come from it. 22.05 reads its nodes from there, so it asks for all."""
    dialect = make_dialect(directory.name)
    raw = only_job(directory, "job-running")
    if directory.name == "v0.0.38":
        assert dialect.job_read_params == ()
        return
    assert dict(dialect.job_read_params) == {"flags": "ALL"}
    assert dialect.parse_job({**raw, "job_resources": None}) == dialect.parse_job(raw)


class _Recording(dict[str, Any]):
    """A job that notes every field read from it."""

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__(raw)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


@pytest.mark.parametrize("name", ["job-running", "job-pending", "job-cancelled", "job-excluded"])
@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_every_field_a_dialect_reads_survives_the_trimmed_decoding(directory: Path, name: str) -> None:
    """Job answers are decoded down to `job_fields`; a field parse_job reads but that list
    lacks would arrive empty, and a job would read as, say, never started."""
    dialect = make_dialect(directory.name)
    raw = _Recording(only_job(directory, name))
    dialect.parse_job(raw)
    assert raw.read <= dialect.job_fields


@pytest.mark.parametrize("name", ["job-running", "job-pending", "job-cancelled", "job-group"])
@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_r4_2_a_job_decoded_down_to_its_fields_reads_the_same(directory: Path, name: str) -> None:
    dialect = make_dialect(directory.name)
    body = (directory / f"{name}.json").read_bytes()
    full = json.loads(body)["body"]
    trimmed = job_reply_decoder(dialect.job_fields).decode(orjson.dumps(full))
    assert [dialect.parse_job(j) for j in trimmed["jobs"]] == [dialect.parse_job(j) for j in full["jobs"]]
    assert trimmed["meta"] == full["meta"]
    assert all(set(j) <= dialect.job_fields for j in trimmed["jobs"])


def test_r11_3_an_error_answer_without_a_job_list_is_decoded_in_full() -> None:
    """A reply whose `jobs` is not a list still reaches raise_for with Slurm's words."""
    body = b'{"jobs": null, "errors": [{"error_number": 2017, "error": "Invalid job id"}]}'
    reply = decode(body, job_reply_decoder(frozenset({"job_id"})))
    assert reply == {"jobs": None, "errors": [{"error_number": 2017, "error": "Invalid job id"}]}
    assert decode(b"<html>bad gateway</html>", job_reply_decoder(frozenset({"job_id"}))) is None


@pytest.mark.parametrize("directory", RECORDED, ids=IDS)
def test_issue51_a_nodes_comment_is_read_where_the_health_checks_runner_leaves_its_problems(
    directory: Path,
) -> None:
    """Catches: the node comment (the runner's `sunk-hc-config:` note) dropped by a dialect,
    so a check that cannot run never reaches the NodeSet. The recordings carry none: one is
    put in the recorded shape."""
    dialect = make_dialect(directory.name)
    raw = dict(sample(directory, "nodes")[1]["nodes"][0])
    assert "comment" in raw  # every recorded version lists the field
    raw["comment"] = "sunk-hc-config: no check scripts"
    assert dialect.parse_node(raw).comment == "sunk-hc-config: no check scripts"
