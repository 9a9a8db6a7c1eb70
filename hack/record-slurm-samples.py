#!/usr/bin/env python3
"""Record real slurmrestd answers for the dialect unit tests (tests/unit/samples/).

Run against a running dev cluster (`sunk dev up --slurm VERSION`); it records, for every
REST version that Slurm serves and sunk speaks, what the scheduler parses: a placeholder-
like job running (started mark, owner tag, another user, one GPU), one pending, one
cancelled, a submit that works, one Slurm refuses, one it queues with an error, and the
node list with a drained node, a gang's job, and a held job whose excluded nodes the
dialect's own update narrows and then clears (--placement=pack). The samples are Slurm's
own words, so the unit tests of each dialect never rest on a guess.

    .venv/bin/python hack/record-slurm-samples.py [group|exclusions|states]   (only that part)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from sunk.slurm.client import SUPPORTED_VERSIONS, make_dialect
from sunk_dev import DevCluster
from sunk_dev.slurmrun import run_cli, runtime

OUT = Path(__file__).resolve().parents[1] / "tests" / "unit" / "samples"
TAG = "sunk:rec:ns/web-0:0000-uid runas=1001"


def body(version: str, script: str, **job: Any) -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin"}
    base: dict[str, Any] = {"current_working_directory": "/tmp", "standard_output": "/dev/null"}
    if version == "v0.0.38":
        return {"script": script, "job": {**base, "environment": env, **job}}
    return {"job": {**base, "environment": [f"{k}={v}" for k, v in env.items()], "script": script, **job}}


def wait(probe: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    sys.exit(f"timed out waiting for {what}")


def record(version: str, http: httpx.Client, cluster: DevCluster, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    layout = cluster.layout

    def save(name: str, resp: httpx.Response) -> dict[str, Any]:
        data: dict[str, Any] = resp.json()
        (out / f"{name}.json").write_text(
            json.dumps({"status": resp.status_code, "body": data}, indent=1) + "\n"
        )
        return data

    def job_state(job_id: int) -> list[str] | str:
        jobs = http.get(f"/job/{job_id}").json().get("jobs") or [{}]
        state: list[str] | str = jobs[0].get("job_state") or ""
        return state

    modern = version != "v0.0.38"
    mark = "extra" if modern else "comment"
    running: dict[str, Any] = {
        "name": "sunk:rec:ns/web-0:0000-uid",
        "cpus_per_task": 1,
        "comment": "recorded",
    }
    script = f'#!/bin/bash\nscontrol update jobid=$SLURM_JOB_ID {mark}="{"recorded" if not modern else ""}: started"\nsleep 300\n'
    if modern:
        running |= {
            "admin_comment": TAG,
            "user_id": "1001",
            "group_id": "1001",
            "tres_per_node": "gres/gpu:1",
            "memory_per_node": {"set": True, "number": 256},
            "time_limit": {"set": True, "number": 30},
            "priority": {"set": True, "number": 5000},
        }
    else:
        running |= {"gres": "gpu:1", "memory_per_node": 256, "time_limit": 30, "priority": "5000"}
    submitted = save("submit-ok", http.post("/job/submit", json=body(version, script, **running)))
    job_id = int(submitted["job_id"])
    wait(lambda: "RUNNING" in job_state(job_id), "the recorded job to run")
    wait(
        lambda: (http.get(f"/job/{job_id}").json()["jobs"][0].get(mark) or "").endswith(": started"),
        "the started mark",
    )
    save("job-running", http.get(f"/job/{job_id}"))

    node = run_cli(layout, "sinfo", "-h", "-N", "-o", "%N").split()[-1]
    run_cli(layout, "scontrol", "update", f"nodename={node}", "state=drain", "reason=recorded drain")
    try:
        save("nodes", http.get("/nodes"))
        nodelist = {"required_nodes": [node]} if modern else {"nodelist": node}
        queued = save(
            "submit-drained-node",
            http.post(
                "/job/submit", json=body(version, "#!/bin/sh\nsleep 60\n", name="needs-drained", **nodelist)
            ),
        )
        if queued.get("job_id"):
            wait(lambda: "PENDING" in job_state(int(queued["job_id"])), "the queued job")
            save("job-pending", http.get(f"/job/{queued['job_id']}"))
            http.delete(f"/job/{queued['job_id']}")
    finally:
        run_cli(layout, "scontrol", "update", f"nodename={node}", "state=resume")
    save(
        "submit-bad-partition",
        http.post("/job/submit", json=body(version, "#!/bin/sh\nsleep 1\n", name="bad", partition="nope")),
    )
    save("cancel", http.delete(f"/job/{job_id}"))
    wait(lambda: any(s in job_state(job_id) for s in ("COMPLETING", "CANCELLED")), "the cancel")
    save("job-cancelled", http.get(f"/job/{job_id}"))
    save("job-unknown", http.get("/job/999999"))
    if modern:  # a partition with a MaxTime beside the cluster's unlimited ones
        run_cli(layout, "scontrol", "create", "PartitionName=recorded", "MaxTime=90", "Nodes=ALL", "State=UP")
        try:
            save("partitions", http.get("/partitions"))
        finally:
            run_cli(layout, "scontrol", "delete", "PartitionName=recorded")


def record_group(version: str, http: httpx.Client, out: Path) -> None:
    """A gang's job: two components of different shapes, each naming its own member."""
    out.mkdir(parents=True, exist_ok=True)
    modern = version != "v0.0.38"
    env: Any = ["PATH=/usr/bin:/bin"] if modern else {"PATH": "/usr/bin:/bin"}
    parts = []
    for offset, cpus in ((0, 1), (1, 2)):
        name = f"sunk:rec:ns/train-{offset}:000{offset}-uid"
        part: dict[str, Any] = {
            "name": name,
            "cpus_per_task": cpus,
            "environment": env,
            "current_working_directory": "/tmp",
            "standard_output": "/dev/null",
        }
        if modern:
            part |= {"admin_comment": f"sunk:rec:ns/train-{offset}:000{offset}-uid runas=0", "user_id": "0"}
        parts.append(part)
    submitted = http.post("/job/submit", json={"script": "#!/bin/sh\nsleep 300\n", "jobs": parts}).json()
    leader = int(submitted["job_id"])

    def both_running() -> bool:
        jobs = http.get(f"/job/{leader}").json().get("jobs") or []
        return len(jobs) == 2 and all("RUNNING" in str(j.get("job_state")) for j in jobs)

    wait(both_running, "the group's job to run")
    reply = http.get(f"/job/{leader}")
    (out / "job-group.json").write_text(
        json.dumps({"status": reply.status_code, "body": reply.json()}, indent=1) + "\n"
    )
    http.delete(f"/job/{leader}")


def record_exclusions(version: str, http: httpx.Client, out: Path) -> None:
    """A held job leaving three nodes out; the dialect's update narrows that to one, then
    clears it. Each step's job is saved with the request that made it."""
    out.mkdir(parents=True, exist_ok=True)
    dialect = make_dialect(version)
    left_out = ["sn-001", "sn-002", "sn-003"]
    excluded = {"excluded_nodes": left_out} if version != "v0.0.38" else {"exclude_nodes": ",".join(left_out)}
    job = body(version, "#!/bin/sh\nsleep 300\n", name="rec-excluded", hold=True, **excluded)
    job_id = int(http.post("/job/submit", json=job).json()["job_id"])
    try:
        for name, request in (
            ("job-excluded", None),
            ("job-excluded-narrowed", dialect.exclusion_update(["sn-002"])),
            ("job-excluded-cleared", dialect.exclusion_update([])),
        ):
            if request is not None:
                http.post(f"/job/{job_id}", json=request).raise_for_status()
            reply = http.get(f"/job/{job_id}")
            sample = {"request": request, "status": reply.status_code, "body": reply.json()}
            (out / f"{name}.json").write_text(json.dumps(sample, indent=1) + "\n")
    finally:
        http.delete(f"/job/{job_id}")


def record_states(version: str, http: httpx.Client, out: Path) -> None:
    """Many jobs' states in one read (`GET /jobs/state`, what `terminating` calls share): one
    job running, one Slurm is ending while its script still holds on, and one unknown."""
    if version == "v0.0.38":
        return  # no such endpoint before Slurm 24.05
    out.mkdir(parents=True, exist_ok=True)
    holding = "#!/bin/bash\ntrap 'sleep 60' TERM\nsleep 300 & wait\n"
    ids = [
        int(http.post("/job/submit", json=body(version, script, name=name)).json()["job_id"])
        for name, script in (("running", "#!/bin/sh\nsleep 300\n"), ("ending", holding))
    ]

    def states() -> dict[str, list[str]]:
        found = http.get("/jobs/state/", params={"job_id": [str(i) for i in ids]}).json()
        return {j["job_id"]: j["state"] for j in found.get("jobs") or []}

    wait(lambda: all(s == ["RUNNING"] for s in states().values()) and len(states()) == 2, "both jobs to run")
    http.delete(f"/job/{ids[1]}")
    wait(lambda: "COMPLETING" in states().get(str(ids[1]), []), "the ending job to complete")
    resp = http.get("/jobs/state/", params={"job_id": [*(str(i) for i in ids), "999999"]})
    (out / "job-states.json").write_text(
        json.dumps({"status": resp.status_code, "body": resp.json()}, indent=1) + "\n"
    )
    for job_id in ids:
        http.delete(f"/job/{job_id}", params={"signal": "KILL"})


def main() -> int:
    cluster = DevCluster()
    spec = cluster.require_running()
    rt = runtime(cluster.layout)
    token = cluster.layout.slurm_token.read_text().strip()
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
    for version in rt.rest_versions:
        if version not in SUPPORTED_VERSIONS:
            continue
        http = httpx.Client(
            base_url=f"{cluster.layout.rest_url}/slurm/{version}", headers=headers, timeout=30
        )
        try:
            out = OUT / f"slurm-{rt.release or spec.slurm}" / version
            only = sys.argv[1] if sys.argv[1:] else None
            if only is None:
                record(version, http, cluster, out)
            if only in (None, "group"):
                record_group(version, http, out)
            if only in (None, "exclusions"):
                record_exclusions(version, http, out)
            if only in (None, "states"):
                record_states(version, http, out)
            print(f"recorded {version} into {out}")
        finally:
            http.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
