"""`sunk apply-config`: slurmctld's sidecar that applies a changed Slurm configuration.

The chart renders slurm.conf and the files beside it into the ConfigMap `<release>-slurm-config`,
which the kubelet copies into slurmctld's /etc/slurm some seconds to a minute after it
changes. Only a container that mounts that directory can tell when the copy is complete,
so the applier runs there, beside slurmctld. Each pass:

1. reads the ConfigMap and the mounted files; while they differ the kubelet has not
   copied the change yet, and nothing is done but one nudge (issue #55): the kubelet
   rewrites a Pod's ConfigMap volumes whenever it syncs that Pod, which on its own happens
   once a minute or more (syncFrequency, 1 to 1.5 minutes with jitter). Any change to the
   Pod's annotations makes it sync at once, so the sidecar writes the hash it waits for
   on its own Pod (`sunk.coreweave.com/config-wanted`) and the copy follows within about a
   second;
2. when they agree on content that was not applied yet, it asks Slurm which unfinished
   jobs use a partition the new slurm.conf no longer declares; if any do, it holds the
   change (a Warning Event naming the jobs) until they end, since slurmctld cannot keep
   jobs whose partition vanished. A Helm upgrade is refused earlier by the chart's
   pre-upgrade check; this catches edits made to the ConfigMap by other means;
3. otherwise it asks slurmctld over REST to reconfigure: slurmctld reads the files again
   and hands them to every slurmd (configless), so no daemon restarts and no job stops.
   Not when the Pod has just started with these very files (nothing recorded yet, and the
   kubelet wrote them before this sidecar began): slurmctld read them at its start, and a
   reconfigure in its first seconds can wedge Slurm 24.11 for good (seen on the dev
   cluster: slurmctld stuck in "Attempting to reconfigure", answering nothing);
4. records the applied content's hash and time as annotations on the ConfigMap, with an
   Event, so `kubectl describe configmap <release>-slurm-config` shows what Slurm runs.

Every read fails closed: a ConfigMap or job listing that cannot be had means try again
on the next pass, never apply blind. A pass runs as soon as a watch shows the ConfigMap
changed, every `FAST_S` while it waits for the kubelet's copy, and at least every
`--interval` seconds otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from sunk.kube.client import KubeClient, KubeError
from sunk.kube.events import event_object
from sunk.metrics.server import serve_metrics
from sunk.operator.chart.upgrade_check import refusals
from sunk.slurm.client import SlurmClient, SlurmVersionError
from sunk.slurm.errors import SlurmError
from sunk.slurm.models import SlurmJob
from sunk.slurm.tokens import MintedTokens

log = logging.getLogger(__name__)
Json = dict[str, Any]

APPLIED_HASH = "sunk.coreweave.com/applied-config-hash"
APPLIED_AT = "sunk.coreweave.com/applied-at"
HELD_HASH = "sunk.coreweave.com/held-config-hash"
# On slurmctld's Pod: the configuration the sidecar waits for the kubelet to copy. Changing
# it is what makes the kubelet sync the Pod (and rewrite its ConfigMap volume) now.
WANTED_HASH = "sunk.coreweave.com/config-wanted"
FAST_S = 0.5  # between passes while the kubelet's copy is awaited
WATCH_RETRY_S = 5.0  # before a ConfigMap watch that ended is opened again
COMPONENT = "sunk-config"
_PARTITION = re.compile(r"^\s*PartitionName\s*=\s*(\S+)", re.IGNORECASE)
_TOPOLOGY = re.compile(r"^\s*TopologyPlugin\s*=\s*topology/(tree|block)\s*$", re.IGNORECASE | re.MULTILINE)


def config_hash(files: Mapping[str, str]) -> str:
    """A short, stable digest of a configuration (file names and contents)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return digest.hexdigest()[:16]


def partitions_in(slurm_conf: str) -> set[str]:
    """The partitions a slurm.conf declares (a `PartitionName=DEFAULT` line sets defaults
    and declares none)."""
    found = {m.group(1) for line in slurm_conf.splitlines() if (m := _PARTITION.match(line))}
    return {name for name in found if name.upper() != "DEFAULT"}


def mounted(directory: Path, names: Mapping[str, str]) -> dict[str, str]:
    """The mounted copy of each ConfigMap file (missing ones left out)."""
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = (directory / name).read_text()
        except OSError:
            continue
    return found


def beat(alive_file: Path | None) -> None:
    """Touch the file a liveness probe checks: this loop still turns."""
    if alive_file is not None:
        alive_file.touch()


class ConfigKube(Protocol):
    async def get(self, path: str) -> Json: ...

    async def patch_merge(self, path: str, patch: Json) -> Json: ...

    async def create_event(self, namespace: str, event: Json) -> None: ...


class ConfigSlurm(Protocol):
    async def jobs(self) -> list[SlurmJob]: ...

    async def reconfigure(self) -> None: ...


class ApplyMetrics:
    """What Prometheus reads of this sidecar's work: whether Slurm runs the ConfigMap's
    configuration, since when it has not, whether a change is held for jobs, and failed
    reconfigures. A registry of its own: this process serves nothing else."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.unapplied_since = Gauge(
            "sunk_slurm_config_unapplied_since_timestamp_seconds",
            "When the ConfigMap's configuration that Slurm does not run yet was first seen (Unix time); "
            "0 while Slurm runs the ConfigMap's",
            registry=self.registry,
        )
        self.held = Gauge(
            "sunk_slurm_config_held",
            "1 while a change is held because unfinished jobs use a partition it drops",
            registry=self.registry,
        )
        self.applied_at = Gauge(
            "sunk_slurm_config_last_applied_timestamp_seconds",
            "When this sidecar last applied (or found in place) a configuration (Unix time)",
            registry=self.registry,
        )
        self.failures = Counter(
            "sunk_slurm_config_reconfigure_failures",
            "Reconfigures that slurmctld refused or that failed",
            registry=self.registry,
        )
        self._pending: tuple[str, float] | None = None

    def current(self) -> None:
        self._pending = None
        self.unapplied_since.set(0)
        self.held.set(0)

    def waiting(self, target: str, now: float, *, held: bool = False) -> None:
        if self._pending is None or self._pending[0] != target:
            self._pending = (target, now)
        self.unapplied_since.set(self._pending[1])
        self.held.set(1 if held else 0)


@dataclass
class ConfigApplier:
    kube: ConfigKube
    slurm: ConfigSlurm
    namespace: str
    configmap: str
    directory: Path
    instance: str = ""
    # When this sidecar process began (wall clock), for files the Pod started with; None:
    # never assume slurmctld read the files at its start (always reconfigure).
    process_started: float | None = None
    metrics: ApplyMetrics = field(default_factory=ApplyMetrics)
    clock: Callable[[], float] = time.time
    # This sidecar's own Pod, nudged while a change waits for the kubelet; "": never nudge.
    pod: str = ""
    nudged: str = ""  # the hash last written on the Pod
    awaiting_copy: bool = False  # the last pass found the mounted files behind the ConfigMap

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps/{self.configmap}"

    async def step(self) -> str:
        """One pass; returns what it found or did (for the log and the tests)."""
        self.awaiting_copy = False
        try:
            cm = await self.kube.get(self.path)
        except KubeError as err:
            return f"cannot read ConfigMap {self.configmap}: {err}"
        wanted: dict[str, str] = {k: str(v) for k, v in (cm.get("data") or {}).items()}
        annotations: dict[str, str] = (cm.get("metadata") or {}).get("annotations") or {}
        target = config_hash(wanted)
        # None on a new cluster, or after the ConfigMap was replaced: nobody can say what
        # slurmctld last read, so the mounted copy is applied once more (a no-op if it matches).
        applied = annotations.get(APPLIED_HASH)
        if applied == target:
            self.metrics.current()
            return "up to date"
        self.metrics.waiting(target, self.clock())
        self.awaiting_copy = mounted(self.directory, wanted) != wanted
        if self.awaiting_copy:
            await self._nudge(target)
            return f"waiting for the kubelet to copy configuration {target}"
        if applied is None and self._read_at_start():
            await self._record(
                cm,
                target,
                f"configuration {target} was in place when slurmctld started; recorded without a reconfigure",
            )
            return f"recorded {target}"
        if _TOPOLOGY.search(wanted.get("slurm.conf", "")) and "topology.conf" not in wanted:
            # slurmctld would stop on reading it: the operator writes topology.conf soon.
            return f"configuration {target} waits for the operator to write topology.conf"
        try:
            jobs = await self.slurm.jobs()
        except SlurmError as err:
            return f"cannot list Slurm's jobs, so configuration {target} waits: {err}"
        held = refusals(jobs, partitions_in(wanted.get("slurm.conf", "")))
        if held:
            self.metrics.waiting(target, self.clock(), held=True)
            if annotations.get(HELD_HASH) != target:
                note = f"configuration {target} is held: " + "; ".join(held)
                await self._event(cm, "ConfigurationHeld", note, warning=True, name=f"held-{target}")
                await self._annotate({HELD_HASH: target})
            return "held: " + "; ".join(held)
        try:
            await self.slurm.reconfigure()
        except SlurmError as err:
            self.metrics.failures.inc()
            note = f"configuration {target}: {err}"
            await self._event(cm, "ReconfigureFailed", note, warning=True, name=f"failed-{target}")
            return f"reconfigure failed: {err}"
        await self._record(
            cm,
            target,
            f"configuration {target} applied with a reconfigure (was {applied or 'not recorded'}); "
            "slurmd daemons fetch it from slurmctld without restarting",
        )
        return f"applied {target}"

    async def _nudge(self, target: str) -> None:
        """Write `target` on this sidecar's Pod, once per configuration: the kubelet syncs a
        Pod whose annotations changed, and a sync rewrites its ConfigMap volumes from the
        kubelet's (watched) copy of the ConfigMap. Without it the copy waits for the next
        periodic sync. A nudge that fails only costs that wait."""
        if not self.pod or self.nudged == target:
            return
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.pod}"
        try:
            await self.kube.patch_merge(path, {"metadata": {"annotations": {WANTED_HASH: target}}})
        except KubeError as err:
            log.warning("could not ask the kubelet to copy configuration %s now: %s", target, err)
            return
        self.nudged = target

    def _read_at_start(self) -> bool:
        """The mounted files were written before this sidecar began, so before slurmctld
        (the container listed before it) read them. The kubelet swaps a ConfigMap's files in
        by renaming the `..data` link; without one (not a kubelet mount) nothing is assumed."""
        if self.process_started is None:
            return False
        try:
            written = (self.directory / "..data").lstat().st_mtime
        except OSError:
            return False
        return written < self.process_started

    async def _record(self, cm: Json, target: str, note: str) -> None:
        at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await self._annotate({APPLIED_HASH: target, APPLIED_AT: at, HELD_HASH: None})
        self.metrics.current()
        self.metrics.applied_at.set(self.clock())
        await self._event(cm, "ConfigurationApplied", note)  # each application is news
        log.info("%s", note)

    async def _annotate(self, annotations: dict[str, str | None]) -> None:
        await self.kube.patch_merge(self.path, {"metadata": {"annotations": annotations}})

    async def _event(
        self, cm: Json, reason: str, note: str, *, warning: bool = False, name: str | None = None
    ) -> None:
        """An Event on the ConfigMap; a `name` records it once (a held or failed change is
        reported once, not every pass)."""
        meta = cm.get("metadata") or {}
        regarding = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "namespace": self.namespace,
            "name": self.configmap,
            "uid": meta.get("uid"),
        }
        event = event_object(
            regarding,
            reason,
            note,
            COMPONENT,
            self.instance,
            warning=warning,
            name=f"{self.configmap}.{name}" if name else None,
            action="Reconfigure",
        )
        try:
            await self.kube.create_event(self.namespace, event)
        except KubeError as err:
            if not err.conflict:
                log.warning("could not record event %s: %s", reason, err)


async def run_forever(
    namespace: str,
    configmap: str,
    directory: Path,
    api_base: str,
    key_file: Path,
    user: str,
    interval_s: float,
    alive_file: Path | None,
    ca_file: str | None = None,
    metrics_port: int = 0,
    pod: str = "",
) -> None:
    started = time.time()
    metrics = ApplyMetrics()
    server = await serve_metrics("", metrics_port, metrics.registry) if metrics_port else None
    kube = await KubeClient.connect(None)
    tokens = MintedTokens(key_file, user)
    slurm: SlurmClient | None = None
    applier: ConfigApplier | None = None
    changed = asyncio.Event()
    watcher = asyncio.create_task(watch_configmap(kube, namespace, configmap, changed))
    try:
        said = ""
        while True:
            beat(alive_file)
            changed.clear()
            try:
                if applier is None:
                    slurm = await SlurmClient.connect(api_base, tokens, user=user, ca_file=ca_file)
                    applier = ConfigApplier(
                        kube, slurm, namespace, configmap, directory, socket.gethostname(), started, metrics
                    )
                    applier.pod = pod
                outcome = await applier.step()
            except (SlurmError, SlurmVersionError) as err:
                outcome = f"slurmrestd cannot be asked yet: {err}"
            except KubeError as err:  # an annotation not written: the next pass tries again
                outcome = f"Kubernetes API: {err}"
            if outcome != said:
                log.info("%s", outcome)
                said = outcome
            pause = FAST_S if applier is not None and applier.awaiting_copy else interval_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), pause)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        if slurm is not None:
            await slurm.aclose()
        await kube.close()
        if server is not None:
            await server.cleanup()


async def watch_configmap(kube: KubeClient, namespace: str, configmap: str, changed: asyncio.Event) -> None:
    """Set `changed` on every watch event of the ConfigMap, so a `helm upgrade` is seen at
    once rather than at the next pass. Only a hint: the passes run without it, so a watch
    that fails (or that this account may not open) is opened again a few seconds later,
    and meanwhile the passes poll as before."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    query = {"fieldSelector": f"metadata.name={configmap}"}
    while True:
        try:
            async for _ in kube.watch(path, query):
                changed.set()
        except Exception as err:  # any failure: the passes poll meanwhile
            log.debug("watch of ConfigMap %s ended: %s", configmap, err)
        await asyncio.sleep(WATCH_RETRY_S)
