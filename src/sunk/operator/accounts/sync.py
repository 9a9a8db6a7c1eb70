"""Keeps slurmdbd's accounts, users and associations following the directory's groups:
gather (the people ConfigMap, the mapping, slurmdbd's listing), plan (pure:
sunk.operator.accounts.plan), execute the steps in order through one narrow port.

It reads the people ConfigMap, not the directory: the ConfigMap is what every node's name
service holds, so a person gets a Slurm association only once their UID means them on the
nodes, and entries the people sync refused (root, slurm, a system UID) never reach Slurm.
Run by the acting operator only, every interval; a step Slurm refuses stops the pass (told
in a Warning Event with Slurm's words) and the next pass plans again from a fresh listing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any, Protocol

from sunk.kube.client import KubeError
from sunk.operator.accounts import actions as a
from sunk.operator.accounts.mapping import GroupMapping
from sunk.operator.accounts.plan import Plan, Roster, marker, plan, roster
from sunk.operator.directory.people_sync import ConfigMapPort, EventPort
from sunk.slurm.accounts import AccountsSnapshot, Association
from sunk.slurm.errors import SlurmError

log = logging.getLogger(__name__)
Json = dict[str, Any]

SYNCED = "AccountsSynced"
FAILED = "AccountSyncFailed"


class AccountsPort(Protocol):
    """What the sync asks of slurmdbd (sunk.slurm.accounts.SlurmAccounts in production)."""

    async def snapshot(self) -> AccountsSnapshot: ...

    async def add_account(self, name: str, parent: str, description: str, organization: str) -> None: ...

    async def add_association(
        self, user: str, account: str, qos: tuple[str, ...], default_qos: str, *, new_user: bool
    ) -> None: ...

    async def set_qos(self, association: Association) -> None: ...

    async def set_default_account(self, user: str, account: str) -> None: ...

    async def remove_association(self, user: str, account: str) -> None: ...

    async def remove_user(self, user: str) -> None: ...

    async def remove_account(self, name: str) -> None: ...


class AccountSync:
    def __init__(
        self,
        kube: ConfigMapPort,
        slurm: AccountsPort,
        recorder: EventPort,
        mappings: tuple[GroupMapping, ...],
        *,
        namespace: str,
        configmap: str,
        release: str,
        interval_s: float,
    ) -> None:
        self.kube = kube
        self.slurm = slurm
        self.recorder = recorder
        self.mappings = mappings
        self.namespace = namespace
        self.configmap = configmap
        self.release = release
        self.interval_s = interval_s
        self.told: set[str] = set()

    async def people(self) -> Roster | None:
        """The people as the nodes see them; None while the ConfigMap is not there yet."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{self.configmap}"
        try:
            data = (await self.kube.request("GET", path)).get("data") or {}
        except KubeError as err:
            if err.not_found:
                return None
            raise
        return roster(str(data.get("passwd") or ""), str(data.get("group") or ""))

    async def sync_once(self) -> Plan | None:
        """One pass; the plan it carried out (None when there were no people to read)."""
        people = await self.people()
        if people is None:
            log.info("no people ConfigMap %s yet: accounts wait for the directory", self.configmap)
            return None
        decided = plan(self.mappings, people, await self.slurm.snapshot(), self.release)
        for problem in decided.problems:
            await self._event(problem.reason, problem.note, warning=True, once=True)
        done: list[str] = []
        for step in decided.actions:
            try:
                await self._execute(step)
            except SlurmError as err:
                note = f"{_words(step)}: {err}; tried again in {self.interval_s:.0f}s"
                log.warning("accounts: could not %s", note)
                await self._event(FAILED, f"could not {note}", warning=True, once=True)
                break
            log.info("accounts: %s", _words(step))
            done.append(_words(step))
        if done:
            await self._event(SYNCED, "; ".join(done)[:900])
        return decided

    async def _execute(self, step: a.Action) -> None:
        if isinstance(step, a.AddAccount):
            await self.slurm.add_account(step.name, step.parent, step.description, marker(self.release))
        elif isinstance(step, a.AddAssociation):
            await self.slurm.add_association(
                step.user, step.account, step.qos, step.default_qos, new_user=step.new_user
            )
        elif isinstance(step, a.SetQos):
            await self.slurm.set_qos(Association(step.user, step.account, step.qos, step.default_qos, False))
        elif isinstance(step, a.SetDefaultAccount):
            await self.slurm.set_default_account(step.user, step.account)
        elif isinstance(step, a.RemoveAssociation):
            await self.slurm.remove_association(step.user, step.account)
        elif isinstance(step, a.RemoveUser):
            await self.slurm.remove_user(step.user)
        else:
            await self.slurm.remove_account(step.name)

    async def _event(self, reason: str, note: str, *, warning: bool = False, once: bool = False) -> None:
        regarding = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "namespace": self.namespace,
            "name": self.configmap,
        }
        name = None
        if once:
            # Named after what it says: a problem seen again every pass is told once.
            digest = hashlib.sha256(f"{reason}\0{note}".encode()).hexdigest()[:16]
            name = f"{self.configmap}.{reason.lower()}.{digest}"
            if name in self.told:
                return
        if await self.recorder.event_on(regarding, reason, note, warning=warning, name=name) and name:
            self.told.add(name)

    async def run(self) -> None:
        while True:
            try:
                await self.sync_once()
            except SlurmError as err:
                log.warning("accounts: cannot read slurmdbd's accounts: %s", err)
            except KubeError as err:
                log.warning("accounts: cannot read ConfigMap %s: API status %s", self.configmap, err.status)
            await asyncio.sleep(self.interval_s)


def _words(step: a.Action) -> str:
    if isinstance(step, a.AddAccount):
        return f"add account {step.name} (parent {step.parent}, {step.description})"
    if isinstance(step, a.AddAssociation):
        made = " (new Slurm user)" if step.new_user else ""
        return (
            f"add user {step.user}{made} to account {step.account} with QoS {','.join(step.qos) or 'default'}"
        )
    if isinstance(step, a.SetQos):
        return f"set QoS {','.join(step.qos)} of user {step.user} in account {step.account}"
    if isinstance(step, a.SetDefaultAccount):
        return f"make {step.account} the default account of user {step.user}"
    if isinstance(step, a.RemoveAssociation):
        return f"remove user {step.user} from account {step.account}"
    if isinstance(step, a.RemoveUser):
        return f"remove Slurm user {step.user} (no association left)"
    return f"remove account {step.name} (no group maps to it)"
