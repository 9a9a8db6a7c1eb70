"""The accounts adapter against slurmdbd's own answers, recorded from the dev cluster by
hack/record-slurmdb-samples.py for every REST version it speaks: what it sends is what
Slurm accepted, and what it reads is what Slurm said."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sunk.slurm.accounts import VERSIONS, Account, Association, SlurmAccounts, unsupported
from sunk.slurm.errors import SlurmRejected, raise_for

SAMPLES = Path(__file__).parent / "samples"
RECORDED = sorted(p for p in SAMPLES.glob("slurm-*/v*") if (p / "slurmdb-accounts.json").exists())


def sample(folder: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / f"slurmdb-{name}.json").read_text())
    return data


class Replay:
    """A SlurmDbPort answering from the recorded samples, noting every request it gets."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.sent: list[dict[str, Any]] = []

    async def slurmdb(self, method: str, path: str, what: str, **kw: Any) -> dict[str, Any]:
        self.sent.append({"method": method, "path": path, "params": kw.get("params"), "json": kw.get("json")})
        name = {
            "/accounts/": "accounts",
            "/associations/": "associations",
            "/users/": "users",
            "/qos/": "qos",
        }
        found = sample(self.folder, name[path])
        body: dict[str, Any] = found["body"]
        return body


def test_every_version_spoken_is_recorded() -> None:
    assert sorted({p.name for p in RECORDED}) == sorted(VERSIONS)


@pytest.mark.parametrize("folder", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_snapshot_reads_accounts_associations_users_and_qos(folder: Path) -> None:
    snapshot = asyncio.run(SlurmAccounts(Replay(folder), "sunkdev").snapshot())
    assert snapshot.accounts["recml"] == Account("recml", "from directory group ml-team", "sunk-rec", "root")
    assert snapshot.accounts["acct1"].organization == "acct1"
    mine = [x for x in snapshot.associations if x.account == "recml"]
    assert sorted(mine, key=lambda x: x.user) == [
        Association("rec-newbie", "recml", ("high", "normal"), "high", True),
        Association("sunk-k8s", "recml", ("low", "normal"), "normal", False),
    ]
    # A known user's default account stayed where the administrator put it.
    assert (
        Association("sunk-k8s", "acct1", ("high", "low", "normal", "urgent"), "normal", True)
        in snapshot.associations
    )
    assert {"rec-newbie", "sunk-k8s", "root"} <= snapshot.users
    assert {"normal", "low", "high", "urgent"} <= snapshot.qos


WRITES = {
    "add-account": lambda s: s.add_account("recml", "root", "from directory group ml-team", "sunk-rec"),
    "add-known-user": lambda s: s.add_association(
        "sunk-k8s", "recml", ("low", "normal"), "normal", new_user=False
    ),
    "add-new-user": lambda s: s.add_association("rec-newbie", "recml", ("normal",), "", new_user=True),
    "set-qos": lambda s: s.set_qos(Association("rec-newbie", "recml", ("high", "normal"), "high", True)),
    "set-default-account": lambda s: s.set_default_account("rec-newbie", "recml"),
    "remove-known-user": lambda s: s.remove_association("sunk-k8s", "recml"),
    "remove-user": lambda s: s.remove_user("rec-newbie"),
    "remove-account": lambda s: s.remove_account("recml"),
}


class Sent:
    def __init__(self) -> None:
        self.request: dict[str, Any] = {}

    async def slurmdb(self, method: str, path: str, what: str, **kw: Any) -> dict[str, Any]:
        self.request = {"method": method, "path": path, "params": kw.get("params"), "json": kw.get("json")}
        return {}


@pytest.mark.parametrize("folder", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("step", sorted(WRITES))
def test_each_write_is_the_request_slurm_accepted(folder: Path, step: str) -> None:
    recorded = sample(folder, step)
    port = Sent()
    asyncio.run(WRITES[step](SlurmAccounts(port, "sunkdev")))
    assert port.request == recorded["request"]
    assert recorded["status"] == 200 and recorded["body"]["errors"] == []


@pytest.mark.parametrize("folder", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_an_unknown_qos_is_slurms_final_refusal_in_its_words(folder: Path) -> None:
    recorded = sample(folder, "bad-qos")
    with pytest.raises(SlurmRejected, match="Invalid qos specification"):
        raise_for(recorded["status"], recorded["body"], "", "associate")


@pytest.mark.parametrize("folder", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_removing_what_is_not_there_answers_304_with_no_body(folder: Path) -> None:
    # SlurmClient.slurmdb takes this 304 for an empty success.
    assert sample(folder, "remove-nothing") == {
        "request": {
            "method": "DELETE",
            "path": "/association/",
            "params": {"user": "rec-newbie", "account": "recml", "cluster": "sunkdev"},
            "json": None,
        },
        "status": 304,
        "body": {},
    }


def test_slurm_24_11_and_26_05_are_both_spoken_each_version_recorded_on_its_release() -> None:
    releases = {p.name: p.parent.name.split("-")[1][:5] for p in RECORDED}
    assert VERSIONS == ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
    assert {releases[v] for v in ("v0.0.40", "v0.0.41")} == {"24.11"}
    assert {releases[v] for v in ("v0.0.43", "v0.0.44", "v0.0.45")} == {"26.05"}
    # v0.0.42 is served by both: recorded on each.
    assert {p.parent.name.split("-")[1][:5] for p in RECORDED if p.name == "v0.0.42"} == {"24.11", "26.05"}


def test_rest_versions_without_recorded_answers_are_refused_in_a_sentence() -> None:
    assert all(unsupported(v) is None for v in VERSIONS)
    why = unsupported("v0.0.38") or ""
    assert why == (
        "slurmrestd speaks REST v0.0.38 here, and sunk keeps accounts over v0.0.40, v0.0.41, "
        "v0.0.42, v0.0.43, v0.0.44, v0.0.45 (Slurm 24.11 and 26.05) only"
    )
