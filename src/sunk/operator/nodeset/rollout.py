"""A NodeSet's roll-out, decided without I/O: which members are out of date (their template
or their Node's resources changed) and which of them start their replacement this pass,
at most maxUnavailable at a time, within the maintenance window, never dropping a feature
pending jobs still ask for."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sunk.kube.nodefilter import node_ready  # any object's Ready condition: here a Pod's
from sunk.operator.nodeset import features
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset import removal as r
from sunk.operator.nodeset.actions import Action
from sunk.operator.nodeset.hardware import ShapeError, shape
from sunk.operator.nodeset.selection import Share
from sunk.operator.nodeset.spec import ON_DELETE, NodeSet
from sunk.operator.nodeset.view import SlurmView, slurm_state
from sunk.runtime.actions import Event

Json = dict[str, Any]
FEATURE_IN_USE = "FeatureInUse"


@dataclass(frozen=True)
class RollOut:
    """The members whose replacement runs this pass, what the UpToDate condition says
    ("" when every member is current), and the Events to write."""

    leaving: tuple[r.Leaving, ...] = ()
    message: str = ""
    actions: tuple[Action, ...] = ()


def why_outdated(nodeset: NodeSet, current: str, pod: Json, nodes: Mapping[str, Json]) -> str | None:
    """Why a member no longer matches what it would be made as now: its template changed
    (a roll-out), or its Node's resources did (a GPU gone, more memory), so that its
    `--conf` would differ and Slurm would hand out what the Node does not have."""
    annotations = pod["metadata"].get("annotations") or {}
    if annotations.get(m.TEMPLATE_HASH) != current:
        return r.ROLL_OUT
    node = nodes.get((pod.get("spec") or {}).get("nodeName", ""))
    if node is None:
        return None
    try:
        conf = shape(nodeset, node).conf()
    except ShapeError:
        return None  # reported where members are made
    return r.HARDWARE if annotations.get(m.SLURMD_CONF, conf) != conf else None


def roll_out(
    nodeset: NodeSet,
    share: Share,
    staying: list[Json],
    nodes: Mapping[str, Json],
    slurm: SlurmView,
    cost: Callable[[str], Any],
    now: dt.datetime,
    settings: m.Settings,
) -> RollOut:
    """Members that are out of date (`why_outdated`), replaced through the removal path at most
    maxUnavailable at a time; one that cannot be drained now is skipped and reported."""
    records = slurm.nodes or {}
    current = m.template_hash(nodeset, settings)  # once per pass, not once per member
    causes = {p["metadata"]["name"]: c for p in staying if (c := why_outdated(nodeset, current, p, nodes))}
    outdated = [p for p in staying if p["metadata"]["name"] in causes]
    if not outdated:
        return RollOut()
    if nodeset.update.type == ON_DELETE:
        said = f"{len(outdated)} members run an outdated template"
        return RollOut(message=f"{said} (OnDelete: delete them to replace them)")

    def leaving(pods: list[Json]) -> tuple[r.Leaving, ...]:
        return tuple(
            r.Leaving(p, m.slurm_name_of(p), p["spec"]["nodeName"], causes[p["metadata"]["name"]])
            for p in pods
        )

    def in_progress(pod: Json) -> bool:
        record = records.get(m.slurm_name_of(pod))
        return bool(pod["metadata"].get("deletionTimestamp")) or (
            record is not None and r.drained_by(nodeset.name, record)
        )

    def available(pod: Json) -> bool:
        record = records.get(m.slurm_name_of(pod))
        return (
            node_ready(pod) and record is not None and slurm_state(record) in ("idle", "allocated", "mixed")
        )

    def why_skipped(pod: Json) -> str | None:
        """Why an outdated member cannot start its replacement now (then it is skipped,
        reported, and does not hold up the others: a roll-out never wedges on it)."""
        record = records.get(m.slurm_name_of(pod))
        if record is None:
            return "not registered"
        if record.drained or slurm_state(record) == "down":
            return record.reason or slurm_state(record)
        return None

    held = _features_held(nodeset, outdated, nodes, slurm)
    if held:
        said = "; ".join(
            f"feature {f} is asked for by pending jobs {', '.join(map(str, ids))}" for f, ids in held.items()
        )
        message = (
            f"roll-out of {len(outdated)} members held: {said}, and the new template drops it; "
            "put the feature back, or wait until those jobs run or are cancelled"
        )
        # Replacements already under way finish; no new one starts.
        return RollOut(
            leaving([p for p in outdated if in_progress(p)]),
            message,
            (Event(FEATURE_IN_USE, message, warning=True, once_as=f"{nodeset.name}.features.{said}"),),
        )
    going = [p for p in outdated if in_progress(p)]
    window = nodeset.update.window
    if window is not None and not window.open_at(now):
        ahead = f"{len(going)} being replaced; " if going else ""
        return RollOut(
            leaving(going),
            f"{len(outdated)} outdated members; {ahead}the others wait for the maintenance window "
            f"({window.describe()})",
        )
    candidates = [p for p in outdated if not in_progress(p)]
    skipped = [f"{m.slurm_name_of(p)} ({why})" for p in candidates if (why := why_skipped(p))]
    ready = sum(1 for p in staying if available(p) and not in_progress(p))
    slots = nodeset.update.budget(share.wanted) - max(0, share.wanted - ready - len(skipped))
    for pod in sorted(candidates, key=lambda p: cost(p["spec"]["nodeName"])):
        if slots > 0 and why_skipped(pod) is None:
            going.append(pod)
            slots -= 1
    waiting = len(outdated) - len(going) - len(skipped)
    parts = [f"{len(going)} of {len(outdated)} outdated members being replaced"]
    if waiting:
        parts.append(f"{waiting} wait for maxUnavailable {nodeset.update.max_unavailable}")
    if skipped:
        parts.append(f"skipped until they can be drained: {', '.join(skipped)}")
    return RollOut(leaving(going), "; ".join(parts))


def _features_held(
    nodeset: NodeSet, outdated: list[Json], nodes: Mapping[str, Json], slurm: SlurmView
) -> dict[str, tuple[int, ...]]:
    """Features the roll-out would take off these members that no other Slurm node offers
    and pending jobs ask for (those jobs would wait for ever)."""
    dropped: set[str] = set()
    for pod in outdated:
        node = nodes.get((pod.get("spec") or {}).get("nodeName", ""))
        if node is None:
            continue
        try:
            now = set(shape(nodeset, node).features)
        except ShapeError:
            continue
        dropped |= features.in_conf((pod["metadata"].get("annotations") or {}).get(m.SLURMD_CONF, "")) - now
    leaving = {m.slurm_name_of(p) for p in outdated}
    elsewhere = {f for name, rec in (slurm.nodes or {}).items() if name not in leaving for f in rec.features}
    return features.held_back(dropped, elsewhere, slurm.asking)
