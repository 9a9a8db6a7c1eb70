"""Which directory group gives which Slurm account and QoS: the chart's
`accounting.fromDirectory.groups`, handed to the operator as JSON in one flag.

Values, not a CRD: the mapping is a handful of lines an administrator sets with the rest of
the release, the chart refuses a bad one at `helm install` time, and changing it restarts
nothing but the operator. A CRD would add an API type, its RBAC and its own validation for
no reader but the operator."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# sacctmgr's own rule in practice: lower-case names (it lower-cases what it is given).
ACCOUNT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class GroupMapping:
    group: str
    account: str
    qos: tuple[str, ...]  # the QoS its members may use; () leaves Slurm's default
    default_qos: str  # "" when not given
    parent: str  # the account's parent in Slurm's tree ("root" unless given)


def parse(text: str) -> tuple[GroupMapping, ...]:
    """The flag's JSON list, checked: a bad one is a start-up error naming the entry."""
    if not text.strip():
        return ()
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise ValueError(f"--accounts-from-directory is not JSON: {err}") from None
    if not isinstance(raw, list):
        raise ValueError("--accounts-from-directory must be a JSON list of {group, account, ...}")
    found: list[GroupMapping] = []
    groups: set[str] = set()
    for index, entry in enumerate(raw):
        where = f"--accounts-from-directory[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object with group and account")
        group, account = str(entry.get("group") or ""), str(entry.get("account") or "")
        if not group or not account:
            raise ValueError(f"{where} needs both group and account")
        if not ACCOUNT_NAME.match(account):
            raise ValueError(
                f"{where}: account {account!r} must be lower-case letters, digits, '_', '.', '-'"
            )
        if group in groups:
            raise ValueError(f"{where}: group {group} is mapped twice")
        groups.add(group)
        qos = entry.get("qos") or []
        if not isinstance(qos, list) or not all(isinstance(q, str) and q for q in qos):
            raise ValueError(f"{where}: qos must be a list of QoS names")
        default_qos = str(entry.get("defaultQos") or "")
        if default_qos and default_qos not in qos:
            raise ValueError(f"{where}: defaultQos {default_qos} is not one of its qos {qos}")
        parent = str(entry.get("parent") or "root")
        found.append(GroupMapping(group, account, tuple(sorted(set(qos))), default_qos, parent))
    return tuple(found)
