"""The NodeSet controller: gather from the caches, plan (pure), execute the plan in order.

It writes only through two narrow ports (`OperatorKube`, `OperatorSlurm`), so unit tests
drive it with in-memory fakes (tests/fakes/operator_world.py) and production with the real
clients. Slurm's nodes come from `SlurmView`, which only the poller writes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from sunk.kube.client import KubeError
from sunk.kube.events import Recorder
from sunk.operator.nodeset import actions as a
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset import plan as p
from sunk.operator.nodeset.nodeset_metrics import Observed
from sunk.operator.nodeset.removal import busy, lifted_soon
from sunk.operator.nodeset.selection import assign, member_nodeset
from sunk.operator.nodeset.spec import API_VERSION, PLURAL, Invalid, NodeSet, parse, regarding
from sunk.operator.nodeset.view import SlurmView
from sunk.runtime.actions import CancelJob, Drain, Event, Resume
from sunk.runtime.controller import DONE, Outcome, after
from sunk.runtime.expectations import Expectations
from sunk.runtime.ports import Cache
from sunk.slurm.errors import SlurmError
from sunk.slurm.models import SlurmJob, SlurmNode

Json = dict[str, Any]
log = logging.getLogger(__name__)
# A write whose answer never came (a timeout, an operator frozen past it) may still land
# this much later; listings begun before then may not show it.
UNCERTAIN_WRITE_S = 30.0
# A Pod deletion whose answer never came is believed landed this long (no drain of it is
# lifted meanwhile) unless the cache shows it; then the cache is believed again.
UNCERTAIN_DELETE_S = 60.0


class OperatorKube(Protocol):
    async def create_pod(self, namespace: str, pod: Json) -> Json: ...

    async def delete_pod(
        self, namespace: str, name: str, uid: str, *, grace_s: int | None = None
    ) -> None: ...

    async def patch_status(self, path: str, status: Json) -> Json: ...

    async def patch_merge(self, path: str, patch: Json) -> Json: ...

    async def patch_pod(self, namespace: str, name: str, uid: str, patch: Json) -> Json: ...

    async def create_event(self, namespace: str, event: Json) -> None: ...

    async def patch_node_status(self, name: str, status: Json) -> Json: ...


class OperatorSlurm(Protocol):
    async def nodes(self) -> list[SlurmNode]: ...

    async def partitions(self) -> dict[str, int | None]: ...

    async def jobs(self) -> list[SlurmJob]: ...

    async def cancel(self, job_id: int) -> None: ...

    async def delete_node(self, name: str) -> None: ...

    async def drain(self, node: str, reason: str) -> str | None: ...

    async def resume(self, node: str) -> str | None: ...

    async def mark_down(self, node: str, reason: str) -> str | None: ...


def nodeset_path(namespace: str, name: str) -> str:
    return f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeSetController:
    name = "nodesets"

    def __init__(
        self,
        kube: OperatorKube,
        slurm: OperatorSlurm,
        view: Callable[[], SlurmView],
        *,
        nodesets: Cache,
        nodes: Cache,
        pods: Cache,
        settings: m.Settings,
        default_image: str,
        recorder: Recorder,
        clock: Callable[[], str] = utc_now,
        stale_s: float = 60.0,
        refresh: Callable[[], Awaitable[None]] | None = None,
        directory_problem: Callable[[], str | None] = lambda: None,
    ) -> None:
        """`view`: the poller's latest listing; `refresh`: list Slurm now and make that the
        view (the poller's `refresh`), asked for before a pass drains a member;
        `directory_problem`: why the last read of the directory failed, if it did."""
        self.kube, self.slurm, self.view = kube, slurm, view
        self.refresh = refresh
        self.directory_problem = directory_problem
        self.nodesets, self.nodes, self.pods = nodesets, nodes, pods
        self.settings = settings
        self.default_image = default_image
        self.recorder = recorder
        self.clock = clock
        self.stale_s = stale_s
        self.created: Expectations[bool] = Expectations()
        # Pods this process deleted (by UID), until the cache shows them terminating or gone.
        # A deletion cannot be undone, so the cache is never believed over it: no deadline.
        self.deleted: Expectations[bool] = Expectations(within=math.inf)
        # Pods whose deletion got no answer (it may have landed): as above, for a while.
        self.maybe_deleted: Expectations[bool] = Expectations(within=UNCERTAIN_DELETE_S)
        # Slurm node → time.monotonic() after this process last drained or resumed it.
        self.slurm_written: dict[str, float] = {}
        # What the last pass of each NodeSet found, for its metrics (nodeset_metrics).
        self.observed: dict[str, Observed] = {}

    # -- gather -------------------------------------------------------------------------------
    def members(self, namespace: str) -> list[Json]:
        """Every NodeSet's Pods in `namespace` (of this release); one this process deleted
        shows as terminating even before the watch brings its deletion (else a scale back up
        on the lagging copy would lift its drain, and Slurm start a job on a going member)."""
        deleted = self._deletions_unseen()
        return [
            self._as_deleted(pod) if pod["metadata"].get("uid") in deleted else pod
            for pod in self.pods.store.values()
            if (pod.get("metadata") or {}).get("namespace") == namespace
            and member_nodeset(pod) is not None
            and (
                (pod["metadata"].get("labels") or {}).get("app.kubernetes.io/instance")
                == self.settings.release
            )
        ]

    def _deletions_unseen(self) -> set[str]:
        """UIDs of Pods this process deleted (or may have) that the cache still shows live."""
        if not self.deleted.waiting_for() and not self.maybe_deleted.waiting_for():
            return set()
        live = {
            pod["metadata"].get("uid")
            for pod in self.pods.store.values()
            if not pod["metadata"].get("deletionTimestamp")
        }
        return {
            str(uid)
            for expected in (self.deleted, self.maybe_deleted)
            for uid in expected.waiting_for()
            if expected.unseen(uid, uid not in live)
        }

    def _as_deleted(self, pod: Json) -> Json:
        return {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": self.clock()}}

    def pods_by_node(self) -> dict[str, list[Json]]:
        by_node: dict[str, list[Json]] = {}
        for pod in self.pods.store.values():
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                by_node.setdefault(node, []).append(pod)
        return by_node

    def view_now(self) -> SlurmView:
        """The poller's view, unless it is older than `stale_s`: a poller stuck on a slow
        slurmrestd must not let a member go on what Slurm said minutes ago."""
        view = self.view()
        age = time.monotonic() - view.listed_at
        if view.known and age > self.stale_s:
            return SlurmView(problem=f"Slurm's last listing is {age:.0f} s old")
        self.slurm_written = {n: at for n, at in self.slurm_written.items() if at >= view.listed_at}
        if self.slurm_written:
            return dataclasses.replace(view, rewritten=frozenset(self.slurm_written))
        return view

    async def reconcile(self, key: str) -> Outcome:
        began = time.monotonic()  # after the caches showed what this pass acts on
        obj = self.nodesets.get(key)
        if obj is None:
            self.observed.pop(key, None)
            return DONE  # its Pods go with it (owner references); see docs/platform.md
        namespace = obj["metadata"]["namespace"]
        parsed = {
            k: parse(
                o,
                self.default_image,
                allow_host_access=self.settings.allow_host_access,
                allowed_images=self.settings.allowed_images,
            )
            for k, o in self.nodesets.store.items()
            if (o.get("metadata") or {}).get("namespace") == namespace
        }
        valid = [n for n in parsed.values() if isinstance(n, NodeSet)]
        members = self.members(namespace)
        shares = assign(valid, self.nodes.store, self.pods_by_node(), members)
        nodeset: NodeSet | Invalid = parsed[key]
        mine = [pod for pod in members if member_nodeset(pod) == nodeset.name]
        present = {pod["metadata"]["name"] for pod in mine}
        unseen = frozenset(
            str(name)
            for name in self.created.waiting_for()
            if self.created.unseen(name, str(name) in present)
        )
        now = self.clock()

        def decide(view: SlurmView) -> p.Plan:
            return p.plan(
                obj,
                nodeset,
                shares.get(nodeset.name),
                mine,
                self.nodes.store,
                view,
                self.settings,
                now=now,
                unseen=unseen,
                directory_problem=self.directory_problem(),
            )

        view = self.view_now()
        result = decide(view)
        if self.refresh is not None and view.listed_at < began and _drains(result):
            # Which members go was chosen on a listing from before this pass: a job that
            # started on an "idle" member since would be missed and a busy member drained
            # (or one whose health checks lifted their drain meanwhile deleted). Choose
            # again on a listing begun now, so every job started before the scale-in (or
            # roll-out, or cordon, or replacement) was seen is known.
            await self.refresh()
            result = decide(self.view_now())
        share = shares.get(nodeset.name)
        self.observed[key] = Observed(
            nodeset if isinstance(nodeset, NodeSet) else None,
            share.wanted if share is not None else 0,
            next((x.status for x in result.actions if isinstance(x, a.PatchStatus)), obj.get("status") or {}),
        )
        if not await self.execute(obj, result):
            return after(p.RECHECK_S)
        return DONE if result.after is None else after(result.after)

    async def set_finalizer(self, obj: Json, present: bool) -> None:
        """Add or drop our finalizer; the resourceVersion makes a concurrent change fail
        (409) rather than be overwritten, and the next pass tries again on fresh data."""
        meta = obj["metadata"]
        others = [f for f in meta.get("finalizers") or [] if f != p.FINALIZER]
        patch = {
            "metadata": {
                "finalizers": [*others, p.FINALIZER] if present else others,
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        try:
            await self.kube.patch_merge(nodeset_path(meta["namespace"], meta["name"]), patch)
        except KubeError as err:
            if err.conflict:  # the cache lags behind a change: the next pass sees it
                return
            if not err.not_found:
                raise
        log.info(
            "%s/%s: finalizer %s", meta["namespace"], meta["name"], "added" if present else "removed: deleted"
        )

    async def change_node(self, node: str, call: Awaitable[str | None]) -> None:
        """Drain or resume `node`, noting when (a listing begun before it may not show it).
        A call that failed may still land later (slurmrestd or slurmctld answers after our
        timeout): listings begun in the next UNCERTAIN_WRITE_S do not count for it either."""
        landed = False
        try:
            problem = await call
            landed = not problem
        finally:
            at = time.monotonic() + (0.0 if landed else UNCERTAIN_WRITE_S)
            self.slurm_written[node] = max(at, self.slurm_written.get(node, at))
        if problem:
            raise SlurmError(problem)

    async def confirm_idle(self, node: str) -> str | None:
        """Why the member on Slurm node `node` must not be deleted now, or None: a listing
        begun now (after every write of ours to it landed) must still show it drained and
        without work. The plan's listing may be seconds old by the time its deletion is
        sent (earlier actions slowed by a frozen API server, a frozen operator), and a
        drain can be lifted meanwhile (a slurmctld restarted from older state, a resume
        that landed late), letting a job start there."""
        if self.refresh is not None:
            await self.refresh()
        view = self.view_now()
        if not view.known:
            return f"Slurm cannot be read ({view.problem})"
        record = (view.nodes or {}).get(node)
        if record is None:
            return "Slurm lists no such node"
        if node in view.rewritten:
            return "a drain or resume of it may not show in Slurm's listing yet"
        if not record.drained or lifted_soon(record):
            return "it is no longer drained (or only until the health checks' next clean run)"
        if busy(record, view.jobs_on(node)):
            jobs = ", ".join(str(j.job_id) for j in view.jobs_on(node)) or "a job still completing"
            return f"it runs {jobs}"
        return None

    # -- execute ------------------------------------------------------------------------------
    async def execute(self, obj: Json, result: p.Plan) -> bool:
        """Carry out the actions in order; a failure stops the rest (the pass is retried).
        False when a member's deletion was called off (confirm_idle): the rest, planned on
        what Slurm no longer says, is left to the next pass."""
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        for action in result.actions:
            match action:
                case a.CreatePod(pod=pod):
                    pod_name = pod["metadata"]["name"]
                    try:
                        await self.kube.create_pod(namespace, pod)
                    except KubeError as err:
                        if not err.conflict:
                            raise
                        log.info("%s/%s: Pod %s exists already", namespace, name, pod_name)
                    self.created.expect(pod_name, True)
                    log.info(
                        "%s/%s: created Pod %s on %s", namespace, name, pod_name, pod["spec"]["nodeName"]
                    )
                case a.DeletePod(name=pod_name, uid=uid, why=why, idle_on=node, grace_s=grace):
                    if node:
                        kept = await self.confirm_idle(node)
                        if kept:
                            log.info("%s/%s: kept Pod %s for now: %s", namespace, name, pod_name, kept)
                            return False
                    try:
                        await self.kube.delete_pod(namespace, pod_name, uid, grace_s=grace)
                    except KubeError as err:
                        if err.unreachable or err.status >= 500:  # it may have landed
                            self.maybe_deleted.expect(uid, True)
                        if not err.not_found:
                            raise
                    else:
                        self.deleted.expect(uid, True)
                    log.info("%s/%s: deleted Pod %s: %s", namespace, name, pod_name, why)
                case a.DeleteSlurmNode(node=node, why=why):
                    await self.slurm.delete_node(node)
                    log.info("%s/%s: deleted Slurm node %s: %s", namespace, name, node, why)
                case Drain(node=node, reason=reason):
                    await self.change_node(node, self.slurm.drain(node, reason))
                    log.info("%s/%s: drained Slurm node %s: %s", namespace, name, node, reason)
                case Resume(node=node):
                    await self.change_node(node, self.slurm.resume(node))
                    log.info("%s/%s: resumed Slurm node %s", namespace, name, node)
                case a.MarkDown(node=node, reason=reason):
                    await self.change_node(node, self.slurm.mark_down(node, reason))
                    log.warning("%s/%s: marked Slurm node %s DOWN: %s", namespace, name, node, reason)
                case a.SetNodeCondition(node=node, condition=condition):
                    try:
                        await self.kube.patch_node_status(node, {"conditions": [condition]})
                    except KubeError as err:
                        if not err.not_found:  # a Node gone has nothing to show
                            raise
                case a.LabelBusy(name=pod_name, uid=uid, busy=now_busy):
                    try:
                        labels = {m.BUSY_LABEL: str(now_busy).lower()}
                        await self.kube.patch_pod(namespace, pod_name, uid, {"metadata": {"labels": labels}})
                    except KubeError as err:
                        if not (err.not_found or err.conflict):  # gone or replaced: nothing to mark
                            raise
                case CancelJob(job_id=job_id, why=why):
                    await self.slurm.cancel(job_id)
                    log.warning("%s/%s: cancelled Slurm job %s: %s", namespace, name, job_id, why)
                case a.SetFinalizer(present=present):
                    await self.set_finalizer(obj, present)
                case Event(reason=reason, note=note, warning=warning, once_as=once_as, pod=member):
                    subject = regarding(obj) if member is None else _pod(namespace, member)
                    await self.recorder.event_on(subject, reason, note, warning=warning, name=once_as)
                case a.PatchStatus(status=status):
                    try:
                        await self.kube.patch_status(nodeset_path(namespace, name), status)
                    except KubeError as err:
                        if not err.not_found:
                            raise
        return True


def _drains(result: p.Plan) -> bool:
    """The plan drains a member or deletes one (a member a check drained is deleted without
    a drain of ours: sunk.operator.nodeset.unhealthy)."""
    return any(isinstance(action, (Drain, a.DeletePod)) for action in result.actions)


def _pod(namespace: str, pod: Json) -> Json:
    """A member Pod as an Event's subject (`kubectl describe pod` shows it)."""
    meta = pod.get("metadata") or {}
    name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
    return {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid or None}
