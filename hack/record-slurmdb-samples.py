#!/usr/bin/env python3
"""Record slurmdbd's answers for the accounts adapter's unit tests (tests/unit/samples/).

Run against a running dev cluster with accounting (`sunk dev up --accounting`). For every
REST version sunk.slurm.accounts speaks and slurmrestd serves, it drives the adapter itself
through one cycle (an account, a known user and a new one associated with it, QoS changed,
a snapshot, everything removed again, one refusal) and saves each request the adapter sent
with Slurm's answer, so the tests check both what is sent and what is read.

    .venv/bin/python hack/record-slurmdb-samples.py
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from sunk.slurm.accounts import VERSIONS, Association, SlurmAccounts
from sunk_dev import DevCluster
from sunk_dev.slurmrun import runtime

OUT = Path(__file__).resolve().parents[1] / "tests" / "unit" / "samples"
CLUSTER = "sunkdev"
KNOWN_USER = "sunk-k8s"  # made by the dev cluster, with associations of its own
NEW_USER = "rec-newbie"


class Recorder:
    """A SlurmDbPort that sends with httpx and saves what it sent and got."""

    def __init__(self, http: httpx.AsyncClient, version: str, out: Path) -> None:
        self.http = http
        self.version = version
        self.out = out
        self.name = ""

    async def slurmdb(self, method: str, path: str, what: str, **kw: Any) -> dict[str, Any]:
        resp = await self.http.request(
            method, f"/slurmdb/{self.version}{path}", json=kw.get("json"), params=kw.get("params")
        )
        body: dict[str, Any] = resp.json() if resp.content else {}
        body.pop("meta", None)  # the client's and server's versions and a timestamp
        if self.name:
            request = {"method": method, "path": path, "params": kw.get("params"), "json": kw.get("json")}
            record = {"request": request, "status": resp.status_code, "body": body}
            (self.out / f"slurmdb-{self.name}.json").write_text(json.dumps(record, indent=1) + "\n")
        return body


async def record(version: str, http: httpx.AsyncClient, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (a script; nothing else runs)
    port = Recorder(http, version, out)
    accounts = SlurmAccounts(port, CLUSTER)

    async def step(name: str, call: Any) -> None:
        port.name = name
        await call
        port.name = ""

    await step(
        "add-account", accounts.add_account("recml", "root", "from directory group ml-team", "sunk-rec")
    )
    await step(
        "add-known-user",
        accounts.add_association(KNOWN_USER, "recml", ("low", "normal"), "normal", new_user=False),
    )
    await step("add-new-user", accounts.add_association(NEW_USER, "recml", ("normal",), "", new_user=True))
    await step("set-qos", accounts.set_qos(Association(NEW_USER, "recml", ("high", "normal"), "high", True)))
    await step("set-default-account", accounts.set_default_account(NEW_USER, "recml"))
    for name, path, params in (
        ("accounts", "/accounts/", None),
        ("associations", "/associations/", {"cluster": CLUSTER}),
        ("users", "/users/", None),
        ("qos", "/qos/", None),
    ):
        port.name = name
        await port.slurmdb("GET", path, name, params=params)
    port.name = ""
    await step("bad-qos", accounts.add_association(NEW_USER, "recml", ("nope",), "", new_user=False))
    await step("remove-known-user", accounts.remove_association(KNOWN_USER, "recml"))
    await step("remove-new-user", accounts.remove_association(NEW_USER, "recml"))
    await step("remove-user", accounts.remove_user(NEW_USER))
    await step("remove-account", accounts.remove_account("recml"))
    await step("remove-nothing", accounts.remove_association(NEW_USER, "recml"))


async def main() -> None:
    cluster = DevCluster()
    layout = cluster.layout
    rt = runtime(layout)
    token = layout.slurm_token.read_text().strip()
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
    spoken = [v for v in VERSIONS if v in rt.rest_versions]
    if not spoken:
        sys.exit(f"this cluster serves {rt.rest_versions}, none of {VERSIONS}")
    async with httpx.AsyncClient(base_url=layout.rest_url, headers=headers, timeout=30) as http:
        for version in spoken:
            # Debian's security suffix (+deb13u1) changes no answer: one folder per release.
            release = rt.release.split("+")[0]
            await record(version, http, OUT / f"slurm-{release}" / version)
            print(f"recorded {version} under slurm-{release}")


if __name__ == "__main__":
    asyncio.run(main())
