"""The Pod annotations that shape the placeholder job (R2.3, R3).

Values are only checked for being *passable* to Slurm: an integer where Slurm wants one, a
known word for `exclusive`, a list without blanks. Whether a partition or account exists
is Slurm's call and comes back as Slurm's own error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sunk.slurm.request import Exclusive

DEFAULT_PREFIX = "sunk.coreweave.com/"
_MAX_U32 = 2**32 - 1


_EXCLUSIVE_WORDS = {e.value: e for e in Exclusive} | {"true": Exclusive.NONE}


@dataclass(frozen=True)
class JobOptions:
    account: str | None = None
    comment: str = ""
    constraints: str | None = None
    exclusive: Exclusive | None = None
    excluded_nodes: tuple[str, ...] = ()
    required_nodes: tuple[str, ...] = ()
    partition: str | None = None
    prefer: str | None = None
    priority: int | None = None
    qos: str | None = None
    reservation: str | None = None
    user_id: int = 0
    group_id: int = 0
    current_working_dir: str | None = None
    timeout_minutes: int | None = None
    notes: list[str] = field(default_factory=list)


STRING_KEYS = (
    "account",
    "comment",
    "constraints",
    "partition",
    "prefer",
    "qos",
    "reservation",
    "current-working-dir",
)
INTEGER_KEYS = ("priority", "user-id", "group-id", "timeout")
LIST_KEYS = ("excluded-nodes", "required-nodes")
# Written by the scheduler itself, not read as job options.
SCHEDULER_KEYS = ("job-id", "avoid-nodes", "drain-explained")
ALL_KEYS = (*STRING_KEYS, *INTEGER_KEYS, *LIST_KEYS, "exclusive", *SCHEDULER_KEYS)
_NODE_NAME = re.compile(r"^[A-Za-z0-9._\-\[\],]+$")


def _integer(prefix: str, key: str, raw: str, errors: list[str], *, minimum: int) -> int | None:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        errors.append(f'annotation {prefix}{key} must be an integer, not "{raw}"')
        return None
    value = int(text)
    if not minimum <= value <= _MAX_U32:
        errors.append(f"annotation {prefix}{key} must be between {minimum} and {_MAX_U32}, not {value}")
        return None
    return value


def _node_list(prefix: str, key: str, raw: str, errors: list[str]) -> tuple[str, ...]:
    names = tuple(part.strip() for part in raw.split(","))
    if not raw.strip() or any(not n or not _NODE_NAME.match(n) for n in names):
        errors.append(
            f'annotation {prefix}{key} must be a comma-separated list of Slurm node names, not "{raw}"'
        )
        return ()
    return names


def parse_annotations(annotations: dict[str, str], prefix: str) -> tuple[JobOptions, list[str]]:
    """Read every annotation under `prefix`; return the options and all problems at once."""
    errors: list[str] = []
    ours = {k[len(prefix) :]: v for k, v in annotations.items() if k.startswith(prefix)}
    strings = {key.replace("-", "_"): ours[key] for key in STRING_KEYS if key in ours}
    comment = strings.pop("comment", "")
    cwd = strings.pop("current_working_dir", None)
    for key, value in strings.items():
        if not value.strip():
            errors.append(f"annotation {prefix}{key.replace('_', '-')} is empty; remove it or set a value")

    exclusive = None
    if "exclusive" in ours:
        word = ours["exclusive"].strip().lower()
        if word == "false":
            exclusive = None  # legacy boolean: not exclusive, Slurm's default sharing
        elif word in _EXCLUSIVE_WORDS:
            exclusive = _EXCLUSIVE_WORDS[word]
        else:
            errors.append(
                f"annotation {prefix}exclusive must be one of none, ok, user, mcs, topo "
                f'(or the legacy "true"/"false"), not "{ours["exclusive"]}"'
            )

    priority = timeout = user_id = group_id = None
    if "priority" in ours:
        priority = _integer(prefix, "priority", ours["priority"], errors, minimum=0)
    if "timeout" in ours:
        timeout = _integer(prefix, "timeout", ours["timeout"], errors, minimum=1)
    if "user-id" in ours:
        user_id = _integer(prefix, "user-id", ours["user-id"], errors, minimum=0)
    if "group-id" in ours:
        group_id = _integer(prefix, "group-id", ours["group-id"], errors, minimum=0)

    excluded = (
        _node_list(prefix, "excluded-nodes", ours["excluded-nodes"], errors)
        if "excluded-nodes" in ours
        else ()
    )
    required = (
        _node_list(prefix, "required-nodes", ours["required-nodes"], errors)
        if "required-nodes" in ours
        else ()
    )
    overlap = set(excluded) & set(required)
    if overlap:
        errors.append(f"nodes {', '.join(sorted(overlap))} are both required and excluded")

    unknown = sorted(set(ours) - set(ALL_KEYS))
    notes = [f"annotation {prefix}{key} is not one sunk knows; it is ignored" for key in unknown]

    uid = user_id if user_id is not None else 0
    options = JobOptions(
        comment=comment,
        exclusive=exclusive,
        excluded_nodes=excluded,
        required_nodes=required,
        priority=priority,
        user_id=uid,
        # The group defaults to the user's id, which for root is 0.
        group_id=group_id if group_id is not None else uid,
        current_working_dir=cwd,
        timeout_minutes=timeout,
        notes=notes,
        **strings,
    )
    return options, errors
