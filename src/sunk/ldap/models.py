"""What a directory read is asked for and what it returns: plain values, so that settings
can be parsed (by `sunk operator`'s flags) without loading the LDAP client."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class DirectoryError(Exception):
    """The directory could not be read; the message says what to check."""


@dataclass(frozen=True)
class DirectorySettings:
    uri: str  # ldap://host:389, ldaps://host:636
    bind_dn: str
    password_file: Path  # from a Secret; never on a command line
    user_base: str
    group_base: str
    user_filter: str = "(objectClass=posixAccount)"
    group_filter: str = "(objectClass=posixGroup)"
    ssh_key_attribute: str = "sshPublicKey"
    ca_file: Path | None = None  # the CA that signed the directory's certificate
    start_tls: bool = False
    timeout_s: int = 10


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: str
    shell: str
    gecos: str = ""
    ssh_keys: tuple[str, ...] = ()
    dn: str = ""


@dataclass(frozen=True)
class Group:
    name: str
    gid: int
    members: tuple[str, ...]  # user names


@dataclass(frozen=True)
class Directory:
    users: tuple[User, ...]
    groups: tuple[Group, ...]
    skipped: tuple[str, ...] = ()  # entries that lack what a POSIX account needs, one line each
