"""Keeps the cluster's people ConfigMap equal to the directory: one reader for the whole
cluster (the acting operator), so that no node queries the directory itself.

Every interval it reads a snapshot (sunk.ldap), renders it (sunk.operator.directory.people) and
replaces the ConfigMap's data when it changed. Login and slurmd Pods mount the ConfigMap:
the kubelet brings a change to them within about a minute, so a person removed from the
directory loses their login within one interval and that minute. When the directory
cannot be read, the last ConfigMap stays as it is: running jobs and cached people go on,
and a Warning Event (one per distinct error) and a metric say what is wrong.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client import Counter, Gauge

from sunk.kube.client import KubeError
from sunk.ldap.models import Directory, DirectoryError
from sunk.operator.directory.people import People, render

log = logging.getLogger(__name__)
Json = dict[str, Any]

READ_FAILED = "DirectoryUnreadable"
REFUSED = "DirectoryEntryRefused"
UPDATED = "PeopleUpdated"
HOME_OFF_VOLUME = "HomeNotOnSharedVolume"
# The ConfigMap's key that says whether its people are current; mounted in every login and
# slurmd container, whose logs repeat it when it changes.
STATUS_KEY = "status"
CURRENT = "current: people as the directory lists them"

LAST_READ = Gauge(
    "sunk_directory_last_read_timestamp_seconds", "When the directory was last read successfully (Unix time)"
)
READ_ERRORS = Counter("sunk_directory_read_errors_total", "Directory reads that failed")
PEOPLE = Gauge("sunk_directory_people", "People written to the people ConfigMap")


class ConfigMapPort(Protocol):
    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = ...) -> Json: ...


class EventPort(Protocol):
    async def event_on(
        self, regarding: Json, reason: str, note: str, *, warning: bool = False, name: str | None = None
    ) -> bool: ...


class PeopleSync:
    def __init__(
        self,
        kube: ConfigMapPort,
        recorder: EventPort,
        read: Callable[[], Directory],
        namespace: str,
        configmap: str,
        interval_s: float,
        *,
        homes_root: str | None = None,
    ) -> None:
        self.kube = kube
        self.recorder = recorder
        self.read = read
        self.namespace = namespace
        self.configmap = configmap
        self.interval_s = interval_s
        # The writable shared volume the login Pods make homes on (the chart's sharedVolumes
        # entry at /home), if any: a person whose home is not directly under it gets none
        # there, and their jobs on the members would not find it (issue #49), said by an Event.
        self.homes_root = homes_root
        self.path = f"/api/v1/namespaces/{namespace}/configmaps/{configmap}"
        self.told: set[str] = set()  # named Events this process recorded: not sent again
        self.problem: str | None = None  # why the last read failed (None: it worked, or none yet)
        self.failing_since = ""  # when reads began to fail, for the ConfigMap's status
        self.on_change: Callable[[], None] = lambda: None  # called when `problem` changes

    async def sync_once(self) -> bool:
        """One read and, if it differs, one write. True when the ConfigMap was written."""
        try:
            snapshot = await asyncio.to_thread(self.read)
        except DirectoryError as err:
            READ_ERRORS.inc()
            log.warning("the directory could not be read; people stay as last written: %s", err)
            await self._event(READ_FAILED, f"{err}; people stay as last written", warning=True)
            if self.problem is None:
                self.failing_since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._set_problem(str(err))
            await self._write_status(
                f"unreadable since {self.failing_since}: {err}; people stay as last written"
            )
            return False
        LAST_READ.set(time.time())
        self._set_problem(None)
        people = render(snapshot)
        for line in (*people.refused, *snapshot.skipped):
            await self._event(REFUSED, f"{line}; left out of the cluster's people", warning=True)
        PEOPLE.set(people.passwd.count("\n"))
        for line in self._homes_off_volume(people):
            await self._event(HOME_OFF_VOLUME, line, warning=True)
        return await self._write(people)

    def _homes_off_volume(self, people: People) -> list[str]:
        """One line per person whose home the login Pods will not make on the shared /home."""
        root = self.homes_root
        if not root:
            return []
        said = []
        for line in people.passwd.splitlines():
            fields = line.split(":")
            name, home = fields[0], fields[5]
            parent, _, leaf = home.rpartition("/")
            if parent != root or leaf in ("", ".", ".."):
                said.append(
                    f"user {name}: home {home} is not directly under {root}, the shared volume: "
                    "no home is made for them there, and their jobs on the compute nodes will not find it"
                )
        return said

    def _set_problem(self, problem: str | None) -> None:
        if problem != self.problem:
            self.problem = problem
            self.on_change()

    async def _write_status(self, status: str) -> None:
        """The ConfigMap's status, the people in it left as they are."""
        await self._replace_data(lambda data: {**data, STATUS_KEY: status})

    async def _write(self, people: People) -> bool:
        data = {**people.files(), STATUS_KEY: CURRENT}
        if not await self._replace_data(lambda _: data):
            return False
        count = people.passwd.count("\n")
        log.info(
            "wrote %d people and %d groups to ConfigMap %s", count, people.group.count("\n"), self.configmap
        )
        await self._event(UPDATED, f"{count} people, {people.group.count(chr(10))} groups written")
        return True

    async def _replace_data(self, change: Callable[[dict[str, str]], dict[str, str]]) -> bool:
        """Write the ConfigMap's data as `change` makes it from the present data (made
        when missing); False when that changes nothing."""
        try:
            current = await self.kube.request("GET", self.path)
        except KubeError as err:
            if not err.not_found:
                raise
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": self._meta(), "data": change({})}
            await self.kube.request("POST", f"/api/v1/namespaces/{self.namespace}/configmaps", body=body)
            return True
        data = current.get("data") or {}
        wanted = change(data)
        if wanted == data:
            return False
        await self.kube.request("PUT", self.path, body={**current, "data": wanted})
        return True

    def _meta(self) -> Json:
        return {
            "name": self.configmap,
            "namespace": self.namespace,
            "labels": {
                "app.kubernetes.io/component": "people",
                "app.kubernetes.io/managed-by": "sunk-operator",
            },
        }

    async def _event(self, reason: str, note: str, *, warning: bool = False) -> None:
        regarding = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "namespace": self.namespace,
            "name": self.configmap,
        }
        # Named after what it says, so a fact is told once however often it is seen again.
        name = None
        if reason != UPDATED:
            digest = hashlib.sha256(f"{reason}\0{note}".encode()).hexdigest()[:16]
            name = f"{self.configmap}.{reason.lower()}.{digest}"
            if name in self.told:
                return  # a refusal seen again every interval costs the API server nothing
        if await self.recorder.event_on(regarding, reason, note, warning=warning, name=name) and name:
            self.told.add(name)

    async def run(self) -> None:
        while True:
            try:
                await self.sync_once()
            except KubeError as err:
                log.warning("could not write ConfigMap %s: API status %s", self.configmap, err.status)
            await asyncio.sleep(self.interval_s)
