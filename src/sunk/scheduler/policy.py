"""Who may do what in Slurm through a Pod: the trust policy (issue #12).

A Pod's annotations choose the Slurm identity, account, partition, QoS, reservation and
priority of its placeholder job, and the scheduler submits that job with a token that may
do anything. The policy bounds those choices per namespace. It is read from a YAML file
(`--policy`; in the chart, a ConfigMap) and re-read whenever the file changes.

    default:                  # for namespaces not listed below
      uids: ["*"]             # Slurm user IDs a Pod may ask for ("*": any)
      gids: ["*"]
      defaultUid: 0           # the identity of a Pod that names none
      defaultGid: 0           # (defaults to defaultUid)
      accounts: ["*"]         # also partitions, qos, reservations
      priority: {min: 0, max: 4294967295}
    namespaces:
      inference:              # keys left out come from `default`
        uids: [1001]
        defaultUid: 1001
        accounts: [inference]
        qos: [normal]

A list names what is allowed; `[]` allows nothing (the Pod may still leave the field unset
and get Slurm's default). With no file the built-in policy is the reference system's:
any uid (root by default) and anything else, which the scheduler warns about at start.
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
_KEYS = frozenset({"uids", "gids", "defaultUid", "defaultGid", "priority", *_NAMED})


class PolicyError(ValueError):
    """The policy file cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Rules:
    """What Pods of one namespace may ask for. A tuple holding ANY allows anything."""

    where: str  # "default" or "namespaces.<name>", for messages
    uids: tuple[int | str, ...] = (ANY,)
    gids: tuple[int | str, ...] = (ANY,)
    default_uid: int = 0
    default_gid: int | None = None
    accounts: tuple[str, ...] = (ANY,)
    partitions: tuple[str, ...] = (ANY,)
    qos: tuple[str, ...] = (ANY,)
    reservations: tuple[str, ...] = (ANY,)
    priority_min: int = 0
    priority_max: int = _MAX_U32

    @property
    def permissive_root(self) -> bool:
        """Root is the default identity and nothing is bounded: the reference's behaviour."""
        unbounded = all(ANY in getattr(self, name) for name in ("uids", "gids", *_NAMED))
        return unbounded and self.default_uid == 0


@dataclass(frozen=True)
class Policy:
    default: Rules
    namespaces: dict[str, Rules]

    def rules_for(self, namespace: str) -> Rules:
        return self.namespaces.get(namespace, self.default)

    @property
    def permissive(self) -> bool:
        return self.default.permissive_root or any(r.permissive_root for r in self.namespaces.values())


PERMISSIVE = Policy(Rules("default"), {})


def apply(rules: Rules, options: JobOptions, named: frozenset[str]) -> tuple[JobOptions, list[str]]:
    """The job options a Pod gets under `rules`, and every rule it breaks. `named` holds the
    annotation keys the Pod set (e.g. "user-id"): a Pod that names no identity gets the
    namespace's default one, not root."""
    uid = options.user_id if "user-id" in named else rules.default_uid
    if "group-id" in named:
        gid = options.group_id
    elif "user-id" in named:
        gid = uid  # the Pod chose a user and no group: that user's own, as before
    else:
        gid = rules.default_gid if rules.default_gid is not None else uid
    problems = []
    if "user-id" in named and not _allows(rules.uids, uid):
        problems.append(f"may not run jobs as uid {uid} ({rules.where}.uids allows {_show(rules.uids)})")
    if "group-id" in named and not _allows(rules.gids, gid):
        problems.append(f"may not run jobs as gid {gid} ({rules.where}.gids allows {_show(rules.gids)})")
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
    if options.priority is not None and not rules.priority_min <= options.priority <= rules.priority_max:
        problems.append(
            f"may not set priority {options.priority} ({rules.where}.priority allows "
            f"{rules.priority_min} to {rules.priority_max})"
        )
    return replace(options, user_id=uid, group_id=gid), problems


def check(
    policy: Policy, pod: dict[str, Any], job: PlaceholderJob, prefix: str
) -> tuple[PlaceholderJob, list[str]]:
    """The job a Pod gets under the policy of its namespace, and every rule it breaks."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    named = frozenset(k[len(prefix) :] for k in annotations if k.startswith(prefix))
    options, problems = apply(policy.rules_for(job.pod.namespace), job.options, named)
    return replace(job, options=options), [f"namespace {job.pod.namespace} {p}" for p in problems]


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
    unknown = sorted(set(raw) - {"default", "namespaces"})
    if unknown:
        raise PolicyError(f"{source}: unknown top-level key(s) {', '.join(unknown)}; use default, namespaces")
    default = _rules(raw.get("default") or {}, "default", Rules("default"), source)
    namespaces = raw.get("namespaces") or {}
    if not isinstance(namespaces, dict):
        raise PolicyError(f"{source}: namespaces must map namespace names to rules")
    return Policy(
        default,
        {
            str(name): _rules(
                body or {}, f"namespaces.{name}", replace(default, where=f"namespaces.{name}"), source
            )
            for name, body in namespaces.items()
        },
    )


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
    if "defaultUid" in body:
        changes["default_uid"] = _id(body["defaultUid"], f"{where}.defaultUid", source)
    if "defaultGid" in body:
        changes["default_gid"] = _id(body["defaultGid"], f"{where}.defaultGid", source)
    if "priority" in body:
        bounds = body["priority"] or {}
        if not isinstance(bounds, dict) or set(bounds) - {"min", "max"}:
            raise PolicyError(f"{source}: {where}.priority must be {{min: N, max: N}}")
        changes["priority_min"] = _id(bounds.get("min", 0), f"{where}.priority.min", source)
        changes["priority_max"] = _id(bounds.get("max", _MAX_U32), f"{where}.priority.max", source)
    rules = replace(base, **changes)
    if rules.priority_min > rules.priority_max:
        raise PolicyError(f"{source}: {where}.priority: min is above max")
    default_gid = rules.default_gid if rules.default_gid is not None else rules.default_uid
    if not _allows(rules.uids, rules.default_uid) or not _allows(rules.gids, default_gid):
        raise PolicyError(
            f"{source}: {where}: the default identity {rules.default_uid}:{default_gid} is not among "
            "the allowed uids/gids"
        )
    return rules


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


class PolicyFile:
    """The policy in force: re-read when its file changes (a ConfigMap update swaps the
    file under the mount), kept as it was when the new content is invalid."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[int, int, int] | None = None
        self.policy = PERMISSIVE
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
