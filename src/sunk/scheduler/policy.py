"""Who may do what in Slurm through a Pod: the trust policy (issues #12 and #38).

A Pod's annotations choose the Slurm identity, account, partition, QoS, reservation,
priority, nodes and time limit of its placeholder job, and the scheduler submits that job
with a token that may do anything. The policy bounds those choices per namespace. It is
read from a YAML file (`--policy`; in the chart, a ConfigMap) and re-read whenever the file
changes. Nothing is granted unless the file says so:

    default:                  # for namespaces not listed below; best left empty
    namespaces:
      inference:              # keys left out come from `default`
        uids: [1001]          # Slurm user IDs a Pod may name (user-id)
        gids: [1001]          # and group IDs (group-id)
        defaultUid: 1001      # the identity of a Pod that names none (none set: such a
        defaultGid: 1001      #   Pod is refused); defaultGid defaults to defaultUid
        accounts: [inference] # also partitions, qos, reservations
        priority: {min: 0, max: 100}
        annotations: [timeout, constraints]   # the placement and time annotations allowed

A list names what is allowed; left out or `[]`, nothing (a Pod may still leave the field
unset and get Slurm's default). Root (0) and `"*"` (anything) reopen what the policy keeps
closed; the file must then say `acknowledgeUnbounded: true`, or it is refused. With no
file nothing is granted at all: every Pod is refused.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from sunk.scheduler.translate import JobOptions, PlaceholderJob

log = logging.getLogger(__name__)

ANY = "*"
_MAX_U32 = 2**32 - 1
_NAMED = ("accounts", "partitions", "qos", "reservations")
# The annotations that steer where a job runs or for how long: each needs a grant.
STEERING = (
    "required-nodes",
    "excluded-nodes",
    "exclusive",
    "constraints",
    "prefer",
    "timeout",
    "current-working-dir",
)
_KEYS = frozenset({"uids", "gids", "defaultUid", "defaultGid", "priority", "annotations", *_NAMED})
ACKNOWLEDGE = "acknowledgeUnbounded"


class PolicyError(ValueError):
    """The policy file cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Rules:
    """What Pods of one namespace may ask for. Empty grants nothing; ANY allows anything."""

    where: str  # "default" or "namespaces.<name>", for messages
    uids: tuple[int | str, ...] = ()
    gids: tuple[int | str, ...] = ()
    default_uid: int | None = None
    default_gid: int | None = None
    accounts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    qos: tuple[str, ...] = ()
    reservations: tuple[str, ...] = ()
    priority: tuple[int, int] | None = None  # (min, max); None: the annotation is refused
    annotations: tuple[str, ...] = ()  # of STEERING

    def unbounded(self) -> list[str]:
        """The keys granting root or anything at all: what needs the acknowledgement."""
        found = [f"{self.where}.{key}" for key in ("uids", "gids") if {0, ANY} & set(getattr(self, key))]
        if self.default_uid == 0:
            found.append(f"{self.where}.defaultUid")
        if self.default_gid == 0:
            found.append(f"{self.where}.defaultGid")
        found += [f"{self.where}.{key}" for key in (*_NAMED, "annotations") if ANY in getattr(self, key)]
        return found


@dataclass(frozen=True)
class Policy:
    default: Rules
    namespaces: dict[str, Rules]
    acknowledged: bool = False  # acknowledgeUnbounded: root and wildcards were meant

    def rules_for(self, namespace: str) -> Rules:
        return self.namespaces.get(namespace, self.default)

    def unbounded(self) -> list[str]:
        return self.default.unbounded() + [k for r in self.namespaces.values() for k in r.unbounded()]

    @property
    def permissive(self) -> bool:
        return bool(self.unbounded())


# Without a file: nothing granted, every Pod refused.
CLOSED = Policy(Rules("default"), {})
# The reference system's behaviour ("as SUNK does"): root by default, anything allowed.
# Only for an explicit choice (the dev cluster and tests use it; the chart needs the
# acknowledgement value).
PERMISSIVE_YAML = f"""\
{ACKNOWLEDGE}: true
default:
  uids: ["*"]
  gids: ["*"]
  defaultUid: 0
  accounts: ["*"]
  partitions: ["*"]
  qos: ["*"]
  reservations: ["*"]
  priority: {{min: 0, max: {_MAX_U32}}}
  annotations: ["*"]
"""


def apply(rules: Rules, options: JobOptions, named: frozenset[str]) -> tuple[JobOptions, list[str]]:
    """The job options a Pod gets under `rules`, and every rule it breaks. `named` holds the
    annotation keys the Pod set (e.g. "user-id"): a Pod that names no identity gets the
    namespace's default one, never root unless that is the default."""
    problems = []
    if "user-id" in named:
        uid = options.user_id
        if not _allows(rules.uids, uid) and uid != rules.default_uid:
            problems.append(f"may not run jobs as uid {uid} ({rules.where}.uids allows {_show(rules.uids)})")
    elif rules.default_uid is not None:
        uid = rules.default_uid
    else:
        uid = options.user_id
        problems.append(f"must name a user-id: {rules.where}.defaultUid is not set")
    if "group-id" in named:
        gid = options.group_id
        if not _allows(rules.gids, gid) and gid != _default_gid(rules):
            problems.append(f"may not run jobs as gid {gid} ({rules.where}.gids allows {_show(rules.gids)})")
    elif "user-id" in named or rules.default_gid is None:
        gid = uid  # the Pod chose a user and no group, or no default group: the user's own
    else:
        gid = rules.default_gid
    for key, value in (
        ("accounts", options.account),
        ("partitions", options.partition),
        ("qos", options.qos),
        ("reservations", options.reservation),
    ):
        allowed: tuple[str, ...] = getattr(rules, key)
        if value is not None and not _allows(allowed, value):
            problems.append(
                f'may not use {key[:-1] if key != "qos" else key} "{value}" '
                f"({rules.where}.{key} allows {_show(allowed)})"
            )
    if options.priority is not None:
        if rules.priority is None:
            problems.append(f"may not set priority {options.priority} ({rules.where}.priority is not set)")
        elif not rules.priority[0] <= options.priority <= rules.priority[1]:
            problems.append(
                f"may not set priority {options.priority} ({rules.where}.priority allows "
                f"{rules.priority[0]} to {rules.priority[1]})"
            )
    for key in STEERING:
        if key in named and not _allows(rules.annotations, key):
            allowed_keys = _show(rules.annotations)
            problems.append(f"may not set {key} ({rules.where}.annotations allows {allowed_keys})")
    return replace(options, user_id=uid, group_id=gid), problems


def check(
    policy: Policy, pod: dict[str, Any], job: PlaceholderJob, prefix: str
) -> tuple[PlaceholderJob, list[str]]:
    """The job a Pod gets under the policy of its namespace, and every rule it breaks."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    named = frozenset(k[len(prefix) :] for k in annotations if k.startswith(prefix))
    options, problems = apply(policy.rules_for(job.pod.namespace), job.options, named)
    return replace(job, options=options), [f"namespace {job.pod.namespace} {p}" for p in problems]


def _default_gid(rules: Rules) -> int | None:
    return rules.default_gid if rules.default_gid is not None else rules.default_uid


def _allows(allowed: tuple[Any, ...], value: Any) -> bool:
    return ANY in allowed or value in allowed


def _show(allowed: tuple[Any, ...]) -> str:
    return ", ".join(str(a) for a in allowed) if allowed else "none"


# -- reading the file ---------------------------------------------------------------------------
def parse(text: str, source: str = "policy") -> Policy:
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise PolicyError(f"{source}: not valid YAML: {err}") from err
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: expected a mapping with `default` and `namespaces`")
    unknown = sorted(set(raw) - {"default", "namespaces", ACKNOWLEDGE})
    if unknown:
        raise PolicyError(
            f"{source}: unknown top-level key(s) {', '.join(unknown)}; use default, namespaces, {ACKNOWLEDGE}"
        )
    acknowledged = raw.get(ACKNOWLEDGE, False)
    if not isinstance(acknowledged, bool):
        raise PolicyError(f"{source}: {ACKNOWLEDGE} must be true or false, not {acknowledged!r}")
    default = _rules(raw.get("default") or {}, "default", Rules("default"), source)
    namespaces = raw.get("namespaces") or {}
    if not isinstance(namespaces, dict):
        raise PolicyError(f"{source}: namespaces must map namespace names to rules")
    policy = Policy(
        default,
        {
            str(name): _rules(
                body or {}, f"namespaces.{name}", replace(default, where=f"namespaces.{name}"), source
            )
            for name, body in namespaces.items()
        },
        acknowledged,
    )
    unbounded = policy.unbounded()
    if unbounded and not acknowledged:
        raise PolicyError(
            f'{source}: {", ".join(unbounded)} grant root or anything at all (0 or "*"); say '
            f"{ACKNOWLEDGE}: true to mean it (chart value scheduler.policy.{ACKNOWLEDGE})"
        )
    return policy


def _rules(body: Any, where: str, base: Rules, source: str) -> Rules:
    if not isinstance(body, dict):
        raise PolicyError(f"{source}: {where} must be a mapping")
    unknown = sorted(set(body) - _KEYS)
    if unknown:
        raise PolicyError(
            f"{source}: {where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}"
        )
    changes: dict[str, Any] = {}
    for key in ("uids", "gids"):
        if key in body:
            changes[key] = _list(body[key], f"{where}.{key}", source, ids=True)
    for key in _NAMED:
        if key in body:
            changes[key] = _list(body[key], f"{where}.{key}", source, ids=False)
    if "annotations" in body:
        changes["annotations"] = _list(body["annotations"], f"{where}.annotations", source, ids=False)
        strange = sorted(set(changes["annotations"]) - {ANY, *STEERING})
        if strange:
            raise PolicyError(
                f"{source}: {where}.annotations: {', '.join(strange)} not among {', '.join(STEERING)}"
            )
    if "defaultUid" in body:
        changes["default_uid"] = _id(body["defaultUid"], f"{where}.defaultUid", source)
    if "defaultGid" in body:
        changes["default_gid"] = _id(body["defaultGid"], f"{where}.defaultGid", source)
    if "priority" in body:
        bounds = body["priority"] or {}
        if not isinstance(bounds, dict) or set(bounds) - {"min", "max"}:
            raise PolicyError(f"{source}: {where}.priority must be {{min: N, max: N}}")
        low = _id(bounds.get("min", 0), f"{where}.priority.min", source)
        high = _id(bounds.get("max", _MAX_U32), f"{where}.priority.max", source)
        if low > high:
            raise PolicyError(f"{source}: {where}.priority: min is above max")
        changes["priority"] = (low, high)
    return replace(base, **changes)


def _id(value: Any, where: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_U32:
        raise PolicyError(f"{source}: {where} must be an integer between 0 and {_MAX_U32}, not {value!r}")
    return value


def _list(value: Any, where: str, source: str, *, ids: bool) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise PolicyError(f'{source}: {where} must be a list (["*"] for any, [] for none)')
    out: list[Any] = []
    for item in value:
        if item == ANY:
            out.append(ANY)
        elif ids:
            out.append(_id(item, where, source))
        elif isinstance(item, str) and item.strip():
            out.append(item)
        else:
            raise PolicyError(f'{source}: {where} holds {item!r}; expected names or "*"')
    return tuple(out)


PERMISSIVE = parse(PERMISSIVE_YAML, "the permissive policy")


class PolicyFile:
    """The policy in force: re-read when its file changes (a ConfigMap update swaps the
    file under the mount), kept as it was when the new content is invalid."""

    def __init__(self, path: str | None, without_file: Policy = CLOSED) -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[int, int, int] | None = None
        self.policy = without_file
        self.problem: str | None = None  # why the last change was not taken
        if self.path is not None:
            self.policy = self._read()  # at start an unusable file is fatal: say why and stop

    def _read(self) -> Policy:
        assert self.path is not None
        stat = os.stat(self.path)
        self._stamp = (stat.st_mtime_ns, stat.st_ino, stat.st_size)
        return parse(self.path.read_text(), str(self.path))

    def current(self) -> Policy:
        if self.path is None:
            return self.policy
        try:
            stat = os.stat(self.path)
            if (stat.st_mtime_ns, stat.st_ino, stat.st_size) != self._stamp:
                self.policy = self._read()
                self.problem = None
                return self.policy
        except (OSError, PolicyError) as err:
            if str(err) != self.problem:
                log.error("policy not reloaded, the one read before stays in force: %s", err)
            self.problem = str(err)
        return self.policy
