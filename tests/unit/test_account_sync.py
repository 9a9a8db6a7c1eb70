"""The accounts sync carries its plan out in order through its port, tells each problem
once, and stops at the first step Slurm refuses (the next pass plans again)."""

from __future__ import annotations

import asyncio
from typing import Any

from sunk.operator.accounts.mapping import GroupMapping
from sunk.operator.accounts.sync import FAILED, SYNCED, AccountSync
from sunk.slurm.accounts import Account, AccountsSnapshot, Association
from sunk.slurm.errors import SlurmRejected
from tests.unit.test_people_sync import FakeConfigMaps, FakeRecorder

PATH = "/api/v1/namespaces/slurm/configmaps/slurm-people"
PEOPLE = {"passwd": "alice:*:20001:30000::/home/alice:/bin/bash\n", "group": "ml-team:x:30001:alice\n"}


class FakeAccounts:
    """slurmdbd in memory: a snapshot the writes change, and a step it can be told to refuse."""

    def __init__(self) -> None:
        self.accounts = {"root": Account("root", "", "root")}
        self.associations: dict[tuple[str, str], Association] = {}
        self.qos = frozenset({"normal"})
        self.calls: list[str] = []
        self.refuse = ""

    async def snapshot(self) -> AccountsSnapshot:
        users = frozenset(u for u, _ in self.associations)
        return AccountsSnapshot(dict(self.accounts), tuple(self.associations.values()), users, self.qos)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.refuse:
            raise SlurmRejected("could not do it: Invalid account", 2045)

    async def add_account(self, name: str, parent: str, description: str, organization: str) -> None:
        self._call("add_account")
        self.accounts[name] = Account(name, description, organization, parent)

    async def add_association(
        self, user: str, account: str, qos: tuple[str, ...], default_qos: str, *, new_user: bool
    ) -> None:
        self._call("add_association")
        self.associations[(user, account)] = Association(user, account, qos, default_qos, new_user)

    async def set_qos(self, association: Association) -> None:
        self._call("set_qos")

    async def set_default_account(self, user: str, account: str) -> None:
        self._call("set_default_account")

    async def remove_association(self, user: str, account: str) -> None:
        self._call("remove_association")
        del self.associations[(user, account)]

    async def remove_user(self, user: str) -> None:
        self._call("remove_user")

    async def remove_account(self, name: str) -> None:
        self._call("remove_account")
        del self.accounts[name]


def world(mapping: GroupMapping) -> tuple[AccountSync, FakeConfigMaps, FakeAccounts, FakeRecorder]:
    kube, slurm, recorder = FakeConfigMaps(), FakeAccounts(), FakeRecorder()
    sync = AccountSync(
        kube,
        slurm,
        recorder,
        (mapping,),
        namespace="slurm",
        configmap="slurm-people",
        release="slurm",
        interval_s=30,
    )
    return sync, kube, slurm, recorder


ML = GroupMapping("ml-team", "ml", ("normal",), "normal", "root")


def test_accounts_wait_for_the_people_configmap() -> None:
    sync, _, slurm, _ = world(ML)
    assert asyncio.run(sync.sync_once()) is None
    assert slurm.calls == []


def test_a_member_is_added_then_removed_when_she_leaves_the_group() -> None:
    sync, kube, slurm, recorder = world(ML)
    kube.objects[PATH] = {"data": PEOPLE}
    asyncio.run(sync.sync_once())
    assert slurm.accounts["ml"].organization == "sunk-slurm"
    assert set(slurm.associations) == {("alice", "ml")}
    assert [r for r, _ in recorder.events.values()] == [SYNCED]
    asyncio.run(sync.sync_once())
    assert slurm.calls == ["add_account", "add_association"]  # the second pass found nothing to do
    kube.objects[PATH] = {"data": {**PEOPLE, "group": "ml-team:x:30001:\n"}}
    asyncio.run(sync.sync_once())
    assert slurm.associations == {}
    assert slurm.calls[2:] == ["remove_association", "remove_user"]


def test_a_refused_step_stops_the_pass_and_is_told_once() -> None:
    sync, kube, slurm, recorder = world(ML)
    kube.objects[PATH] = {"data": PEOPLE}
    slurm.refuse = "add_account"
    asyncio.run(sync.sync_once())
    asyncio.run(sync.sync_once())
    assert slurm.calls == ["add_account", "add_account"]  # tried again; never past it
    failures = [note for reason, note in recorder.events.values() if reason == FAILED]
    assert len(failures) == 1 and "add account ml" in failures[0] and "Invalid account" in failures[0]


def test_an_unknown_qos_is_a_warning_told_once_and_changes_nothing() -> None:
    sync, kube, slurm, recorder = world(GroupMapping("ml-team", "ml", ("gold",), "", "root"))
    kube.objects[PATH] = {"data": PEOPLE}
    for _ in range(2):
        asyncio.run(sync.sync_once())
    assert slurm.calls == []
    told: list[Any] = [note for reason, note in recorder.events.values() if reason == "AccountMappingInvalid"]
    assert told == [
        "group ml-team -> account ml: slurmdbd has no QoS gold (add it with sacctmgr, or fix the mapping)"
    ]
