"""The cluster's people as the files every login and slurmd Pod reads: `passwd` and `group`
lines for the name service (libnss-extrausers' format, the same as /etc/passwd and
/etc/group) and each person's SSH keys, made without I/O from one directory snapshot.

A directory entry that would take over an account the images already have (root, slurm,
munge, a system UID) is refused and named, never written: whoever controls the directory
must not become root on every node."""

from __future__ import annotations

from dataclasses import dataclass

from sunk.ldap.models import Directory

# Accounts of sunk's images (images/slurm-base): a directory entry with one of these
# names, or a UID/GID below FIRST_ID, is refused.
SYSTEM_NAMES = frozenset({"root", "slurm", "munge", "slurmrestd", "nobody", "nogroup", "sshd", "daemon"})
FIRST_ID = 1000
RESERVED_IDS = frozenset({64030, 65534, 990, 991})  # slurm, nobody, munge, slurmrestd
# The images' groups a person's primary GID may name, by number (images/slurm-base).
SYSTEM_GROUPS = {0: "root", 64030: "slurm", 65534: "nogroup", 990: "munge", 991: "slurmrestd"}


@dataclass(frozen=True)
class People:
    passwd: str
    group: str
    keys: dict[str, str]  # user name -> authorized_keys
    refused: tuple[str, ...]  # one line per entry left out, naming it and why

    def files(self) -> dict[str, str]:
        """The ConfigMap's data: passwd, group and one `keys.<name>` per person with keys."""
        data = {"passwd": self.passwd, "group": self.group}
        data |= {f"keys.{name}": keys for name, keys in self.keys.items()}
        return data


def render(directory: Directory) -> People:
    refused: list[str] = []
    passwd: list[str] = []
    keys: dict[str, str] = {}
    taken_uids: dict[int, str] = {}
    for user in directory.users:
        why = (
            _refusal(user.name, user.uid, "UID")
            or _primary_group_problem(user.gid)
            or _field_problem(user.name, user.home, user.shell, user.gecos)
        )
        if why is None and user.uid in taken_uids:
            why = f"UID {user.uid} is also {taken_uids[user.uid]}'s"
        if why is not None:
            refused.append(f"user {user.name}: {why}")
            continue
        taken_uids[user.uid] = user.name
        # "*": no password here and no shadow entry to look for (with "x", PAM's account
        # check looks one up, finds none and refuses the login); people log in with keys.
        passwd.append(f"{user.name}:*:{user.uid}:{user.gid}:{user.gecos}:{user.home}:{user.shell}")
        if user.ssh_keys:
            keys[user.name] = "".join(f"{key.strip()}\n" for key in user.ssh_keys)
    known = set(taken_uids.values())
    group = []
    for entry in directory.groups:
        why = _refusal(entry.name, entry.gid, "GID")
        if why is not None:
            refused.append(f"group {entry.name}: {why}")
            continue
        members = ",".join(m for m in entry.members if m in known)
        group.append(f"{entry.name}:x:{entry.gid}:{members}")
    return People(_lines(passwd), _lines(group), keys, tuple(refused))


def _refusal(name: str, number: int, kind: str) -> str | None:
    if name in SYSTEM_NAMES:
        return f"{name} is an account of the images; rename it in the directory"
    if number < FIRST_ID or number in RESERVED_IDS:
        return f"{kind} {number} belongs to the images' system accounts (use {FIRST_ID} or more)"
    if not name or any(c in name for c in ":\n/ ") or name.startswith("-"):
        return f"{name!r} is not a name the name service can hold"
    return None


def _primary_group_problem(gid: int) -> str | None:
    """A person's own group counts as much as their UID: with GID 0 or Slurm's group their
    processes could read what those groups may (the login host's keys, slurm.key, the
    directory's bind password), so it is refused as a system UID is (issue #52)."""
    if gid < FIRST_ID or gid in RESERVED_IDS:
        group = f"the images' group {SYSTEM_GROUPS[gid]}" if gid in SYSTEM_GROUPS else "a system group"
        return (
            f"primary GID {gid} is {group}: the person's files and processes would "
            f"read what it may (give them a GID of {FIRST_ID} or more, not in use by the images)"
        )
    return None


def _field_problem(*fields: str) -> str | None:
    bad = [f for f in fields if ":" in f or "\n" in f]
    return f"{bad[0]!r} holds a ':' or a line break" if bad else None


def _lines(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)
