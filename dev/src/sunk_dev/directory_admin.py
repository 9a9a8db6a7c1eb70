"""Adding and removing people and groups in the dev cluster's directory, as its admin.

The seeded people (alice, bob, carol) are made once, offline, by `directory.start`; this
module changes the running slapd the way an admin of a real directory would: LDIF sent with
ldapmodify (Debian's ldap-utils, installed with slapd), bound as the rootdn with the
password read from `directory/admin.password` (`-y`: never on a command line). What it
checks first is what sunk's operator would refuse anyway (`sunk.operator.directory.people`): a
person or group it would leave out of the name service is refused here, with the reason,
rather than added and silently ignored.

A new person is in the `people` group, like the seeded ones, so the operator gives them
the `people` Slurm account; their generated key pair stays under the run directory
(`directory/keys/<name>`), where `sunk_dev.people.ssh` looks for it.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sunk.ldap.models import Directory, DirectoryError, DirectorySettings, Group, User
from sunk.ldap.reader import read
from sunk.operator.directory.people import RESERVED_IDS, render
from sunk_dev import directory
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout

PRIMARY_NAME, PRIMARY_GID = directory.PRIMARY_GROUP
# New ids go above the seeded ones, so a newcomer never shares alice's UID or ml's GID.
FIRST_UID = max(p.uid for p in directory.PEOPLE_SEEDED) + 1
FIRST_GID = max(directory.GROUPS_SEEDED.values()) + 1
# The portable user names of POSIX (and useradd's default): they are also safe in a DN.
_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_KEY_TYPES = ("ssh-ed25519 ", "ssh-rsa ", "ecdsa-sha2-", "sk-ssh-ed25519@", "sk-ecdsa-sha2-")

NOT_RUNNING = (
    "no dev cluster with a directory is running: `sunk dev up --real-nodes 3` starts one "
    "(or `sunk dev up --directory`, without real Nodes)"
)


@dataclass(frozen=True)
class AddedPerson:
    name: str
    uid: int
    groups: tuple[str, ...]  # every group they are in, `people` first
    private_key: Path | None  # the key pair made for them, or None when they brought one


# ---- what is written: LDIF for ldapmodify --------------------------------------------------


def _value(attribute: str, value: str) -> str:
    """One `attribute: value` line, base64 (`::`) where LDIF's plain form cannot hold it."""
    plain = value.isascii() and not value.startswith((" ", ":", "<")) and not value.endswith(" ")
    if plain and "\n" not in value and "\r" not in value and "\0" not in value:
        return f"{attribute}: {value}"
    return f"{attribute}:: {base64.b64encode(value.encode()).decode()}"


def person_dn(name: str) -> str:
    return f"uid={name},{directory.PEOPLE}"


def group_dn(name: str) -> str:
    return f"cn={name},{directory.GROUPS}"


def _membership(group: str, name: str, change: str) -> str:
    return f"dn: {group_dn(group)}\nchangetype: modify\n{change}: memberUid\nmemberUid: {name}\n-\n"


def person_ldif(
    name: str, uid: int, public_key: str | None, password_hash: str | None, groups: Iterable[str]
) -> str:
    """The person's entry, shaped like the seeded people's, then their memberships."""
    lines = [f"dn: {person_dn(name)}", "changetype: add"]
    lines += [f"objectClass: {c}" for c in ("inetOrgPerson", "posixAccount", "ldapPublicKey")]
    lines += [f"uid: {name}", f"cn: {name.title()}", f"sn: {name.title()}"]
    lines += [f"uidNumber: {uid}", f"gidNumber: {PRIMARY_GID}"]
    lines += [f"homeDirectory: /home/{name}", "loginShell: /bin/bash"]
    if public_key:
        lines.append(_value("sshPublicKey", public_key))
    if password_hash:
        lines.append(_value("userPassword", password_hash))
    records = ["\n".join(lines) + "\n"] + [_membership(g, name, "add") for g in groups]
    return "\n".join(records)


def person_removal_ldif(name: str, groups: Iterable[str]) -> str:
    """Out of each group that lists them first (no group keeps a name nobody has), then gone."""
    records = [_membership(g, name, "delete") for g in groups]
    records.append(f"dn: {person_dn(name)}\nchangetype: delete\n")
    return "\n".join(records)


def group_ldif(name: str, gid: int, members: Iterable[str]) -> str:
    lines = [f"dn: {group_dn(name)}", "changetype: add", "objectClass: posixGroup"]
    lines += [f"cn: {name}", f"gidNumber: {gid}"] + [f"memberUid: {m}" for m in members]
    return "\n".join(lines) + "\n"


def group_removal_ldif(name: str) -> str:
    return f"dn: {group_dn(name)}\nchangetype: delete\n"


# ---- what is refused, and which ids are chosen ---------------------------------------------


def next_id(taken: Iterable[int], first: int) -> int:
    """The id after the highest one taken (and never below `first`), skipping the ids the
    images' own accounts hold."""
    chosen = max([first - 1, *taken]) + 1
    while chosen in RESERVED_IDS:
        chosen += 1
    return chosen


def _name_problem(name: str, kind: str) -> str | None:
    if not _NAME.fullmatch(name):
        return (
            f"{name!r} is not a {kind} name sunk takes: up to 32 lower-case letters, digits, '_' "
            "and '-', starting with a letter or '_'"
        )
    return None


def person_refusal(name: str, uid: int, known: Directory) -> str | None:
    """Why `name` with `uid` cannot be added to the directory `known` holds, or None."""
    why = _name_problem(name, "user")
    if why is None:
        user = User(name, uid, PRIMARY_GID, f"/home/{name}", "/bin/bash")
        refused = render(Directory((user,), ())).refused
        why = refused[0].removeprefix(f"user {name}: ") if refused else None
    if why is None and any(u.name == name for u in known.users):
        why = f"{name} already exists (`sunk dev people remove {name}` first, to make them anew)"
    owner = next((u.name for u in known.users if u.uid == uid), None)
    if why is None and owner is not None:
        why = f"UID {uid} is already {owner}'s"
    return why


def group_refusal(name: str, gid: int, members: Iterable[str], known: Directory) -> str | None:
    """Why the group cannot be added to the directory `known` holds, or None."""
    why = _name_problem(name, "group")
    if why is None:
        refused = render(Directory((), (Group(name, gid, ()),))).refused
        why = refused[0].removeprefix(f"group {name}: ") if refused else None
    if why is None and any(g.name == name for g in known.groups):
        why = f"the group {name} already exists"
    owner = next((g.name for g in known.groups if g.gid == gid), None)
    if why is None and owner is not None:
        why = f"GID {gid} is already the group {owner}'s"
    people = {u.name for u in known.users}
    strangers = [m for m in members if m not in people]
    if why is None and strangers:
        why = f"no person {strangers[0]} in the directory (`sunk dev people add {strangers[0]}` adds them)"
    return why


def public_key_of(path: Path) -> str:
    """The one public key line in `path`, or an error that says what the file is instead."""
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as err:
        raise DevClusterError(f"cannot read the public key {path}: {err}") from None
    if "PRIVATE KEY" in text:
        raise DevClusterError(f"{path} is a private key: give its public half ({path}.pub)")
    if "\n" in text or not text.startswith(_KEY_TYPES):
        raise DevClusterError(f"{path} does not hold one OpenSSH public key line (ssh-ed25519 AAAA...)")
    return text


# ---- the running directory ---------------------------------------------------------------


def snapshot(layout: Layout) -> Directory:
    """Everyone and every group, read the way the operator reads them (as the reader)."""
    if not (directory.directory_dir(layout) / "slapd.conf").is_file():
        raise DevClusterError(NOT_RUNNING)
    settings = DirectorySettings(
        directory.uri(layout),
        directory.READER,
        directory.reader_password_file(layout),
        directory.PEOPLE,
        directory.GROUPS,
        timeout_s=5,
    )
    try:
        return read(settings)
    except DirectoryError as err:
        if "cannot reach" in str(err):
            raise DevClusterError(NOT_RUNNING) from None
        raise DevClusterError(f"reading the dev directory failed: {err}") from None


def admin_password(layout: Layout) -> Path:
    """The file with the rootdn's password. A directory started before sunk kept it gets
    one now: a new password in slapd.conf, and slapd restarted on its data (a second)."""
    path = directory.admin_password_file(layout)
    if path.is_file():
        return path
    conf = directory.directory_dir(layout) / "slapd.conf"
    hashed = directory.keep_secret(path)
    text, count = re.subn(r"(?m)^rootpw .*$", lambda _: f"rootpw {hashed}", conf.read_text())
    if count != 1:
        path.unlink()
        raise DevClusterError(f"{conf} has no single rootpw line to set the admin's password in")
    conf.write_text(text)
    directory.stop(layout)
    directory.serve(layout)
    print(f"sunk: the dev directory had no admin password kept; it has one now in {path}", file=sys.stderr)
    return path


def apply(layout: Layout, ldif: str) -> None:
    """Send `ldif` (changetype records) to slapd as its admin."""
    secret = admin_password(layout)
    argv = ["ldapmodify", "-x", "-H", directory.uri(layout), "-D", directory.ADMIN, "-y", str(secret)]
    try:
        done = subprocess.run(argv, input=ldif, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        raise DevClusterError("ldapmodify is missing: apt-get install ldap-utils") from None
    if done.returncode:
        said = (done.stderr.strip() or done.stdout.strip())[-300:]
        if "Can't contact LDAP server" in said:
            raise DevClusterError(NOT_RUNNING)
        raise DevClusterError(f"the directory refused the change: {said}")


def _read_password(path: Path) -> str:
    try:
        password = path.read_text().removesuffix("\n")
    except (OSError, UnicodeDecodeError) as err:
        raise DevClusterError(f"cannot read the password file {path}: {err}") from None
    if not password or "\n" in password:
        raise DevClusterError(f"{path} must hold one password on one line")
    return password


def _forget_files(layout: Layout, name: str) -> None:
    key = directory.private_key(layout, name)
    for path in (key, key.with_suffix(".pub"), directory.password_file(layout, name)):
        path.unlink(missing_ok=True)


# ---- the commands' actions ---------------------------------------------------------------


def add_person(
    layout: Layout,
    name: str,
    *,
    uid: int | None = None,
    groups: Iterable[str] = (),
    key_file: Path | None = None,
    password_file: Path | None = None,
) -> AddedPerson:
    """Add `name` to the directory, in `people` and `groups`, with the public key in
    `key_file` or a key pair made for them under the run directory."""
    known = snapshot(layout)
    chosen = uid if uid is not None else next_id((u.uid for u in known.users), FIRST_UID)
    why = person_refusal(name, chosen, known)
    existing = {g.name for g in known.groups}
    wanted = list(dict.fromkeys([PRIMARY_NAME, *groups]))
    missing = [g for g in wanted if g not in existing]
    if why is None and missing:
        why = f"no group {missing[0]} in the directory (`sunk dev group add {missing[0]}` makes one)"
    if why is not None:
        raise DevClusterError(f"cannot add {name}: {why}")
    public_key = public_key_of(key_file) if key_file else None
    hashed = directory.hash_password(_read_password(password_file)) if password_file else None
    made: Path | None = None
    if public_key is None:
        made = directory.private_key(layout, name)
        _forget_files(layout, name)
        public_key = directory.make_key_pair(made, name)
    try:
        apply(layout, person_ldif(name, chosen, public_key, hashed, wanted))
    except DevClusterError:
        if made:
            _forget_files(layout, name)
        raise
    return AddedPerson(name, chosen, tuple(wanted), made)


def remove_person(layout: Layout, name: str) -> None:
    """Take `name` out of every group and the directory, and forget their key pair."""
    known = snapshot(layout)
    if not any(u.name == name for u in known.users):
        raise DevClusterError(f"no person {name} in the directory (`sunk dev people list` shows who is)")
    apply(layout, person_removal_ldif(name, [g.name for g in known.groups if name in g.members]))
    _forget_files(layout, name)


def add_group(layout: Layout, name: str, *, gid: int | None = None, members: Iterable[str] = ()) -> int:
    """Add the group `name` with `members` (people already in the directory); its GID."""
    known = snapshot(layout)
    chosen = gid if gid is not None else next_id((g.gid for g in known.groups), FIRST_GID)
    wanted = list(dict.fromkeys(members))
    why = group_refusal(name, chosen, wanted, known)
    if why is not None:
        raise DevClusterError(f"cannot add the group {name}: {why}")
    apply(layout, group_ldif(name, chosen, wanted))
    return chosen


def remove_group(layout: Layout, name: str) -> None:
    if name == PRIMARY_NAME:
        raise DevClusterError(f"{PRIMARY_NAME} is every person's own group; it stays")
    if not any(g.name == name for g in snapshot(layout).groups):
        raise DevClusterError(f"no group {name} in the directory (`sunk dev people list` shows them)")
    apply(layout, group_removal_ldif(name))


def describe(known: Directory) -> str:
    """`sunk dev people list`: each person and group, one aligned line each."""
    people = [("PERSON", "UID", "GROUPS")]
    for user in known.users:
        mine = [g.name for g in known.groups if user.name in g.members or g.gid == user.gid]
        people.append((user.name, str(user.uid), ",".join(mine) or "-"))
    groups = [("GROUP", "GID", "MEMBERS")]
    groups += [(g.name, str(g.gid), ",".join(g.members) or "-") for g in known.groups]
    return _table(people) + "\n" + _table(groups)


def _table(rows: list[tuple[str, str, str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "".join(f"{a.ljust(widths[0])}  {b.rjust(widths[1])}  {c}\n" for a, b, c in rows)
