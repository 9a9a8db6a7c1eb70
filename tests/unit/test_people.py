"""A directory snapshot as name-service files (R10.6): people and groups become passwd and
group lines, their keys authorized_keys, and an entry that would take over one of the
images' accounts is refused by name instead of written."""

from __future__ import annotations

import argparse

import pytest

from sunk.ldap.models import Directory, Group, User
from sunk.operator.config import OperatorConfig, add_arguments, from_args
from sunk.operator.directory.people import render


def user(name: str, uid: int, **kw: object) -> User:
    fields: dict[str, object] = {"gid": 30000, "home": f"/home/{name}", "shell": "/bin/bash", "gecos": ""}
    fields.update(kw)
    return User(name, uid, **fields)  # type: ignore[arg-type]


def test_r10_6_a_person_becomes_a_passwd_line_and_an_authorized_keys_file() -> None:
    people = render(Directory((user("alice", 20001, gecos="Alice", ssh_keys=("ssh-ed25519 AAA a",)),), ()))
    assert people.passwd == "alice:*:20001:30000:Alice:/home/alice:/bin/bash\n"
    assert people.keys == {"alice": "ssh-ed25519 AAA a\n"}
    assert people.files()["keys.alice"] == "ssh-ed25519 AAA a\n"


def test_r10_6_a_group_lists_only_members_who_are_people_of_the_directory() -> None:
    people = render(Directory((user("alice", 20001),), (Group("ml", 30001, ("alice", "ghost")),)))
    assert people.group == "ml:x:30001:alice\n"


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (user("root", 20009), "user root: root is an account of the images"),
        (user("mallory", 0), "user mallory: UID 0 belongs to the images' system accounts"),
        (user("mallory", 64030), "user mallory: UID 64030 belongs to the images' system accounts"),
        (user("mallory", 999), "user mallory: UID 999 belongs to the images' system accounts"),
        (user("mallory", 20009, gecos="a:b"), "user mallory: 'a:b' holds a ':'"),
        (user("mal:lory", 20009), "user mal:lory: 'mal:lory' is not a name"),
        # Issue #52: a primary group of root's or Slurm's reads what that group may.
        (user("mallory", 20009, gid=0), "user mallory: primary GID 0 is the images' group root"),
        (user("mallory", 20009, gid=64030), "user mallory: primary GID 64030 is the images' group slurm"),
        (user("mallory", 20009, gid=999), "user mallory: primary GID 999 is a system group"),
    ],
)
def test_r10_6_an_entry_taking_over_a_system_account_is_refused_by_name(entry: User, why: str) -> None:
    people = render(Directory((entry, user("alice", 20001)), ()))
    assert [line for line in people.refused if line.startswith(why)] != []
    assert people.passwd == "alice:*:20001:30000::/home/alice:/bin/bash\n"


@pytest.mark.parametrize(("gid", "group"), [(0, "root"), (64030, "slurm")])
def test_issue52_a_person_whose_primary_group_is_roots_or_slurms_is_written_nowhere(
    gid: int, group: str
) -> None:
    """Catches a directory person with GID 0 or Slurm's group written into every Pod's passwd
    as is (a group with that number was already refused): on the login Pod their files and
    processes would read what the group may, the login host's private keys and the
    directory's bind password among them. The refusal names the person, the GID and the group."""
    people = render(Directory((user("mallory", 20009, gid=gid, ssh_keys=("ssh-ed25519 AAA m",)),), ()))
    assert people.passwd == "" and people.keys == {}
    [why] = people.refused
    assert why.startswith(f"user mallory: primary GID {gid} is the images' group {group}: ")
    assert "a GID of 1000 or more" in why


def test_r10_6_a_second_person_with_a_taken_uid_is_refused() -> None:
    people = render(Directory((user("alice", 20001), user("alias", 20001)), ()))
    assert people.refused == ("user alias: UID 20001 is also alice's",)
    assert "alias" not in people.passwd


def test_r10_6_a_group_named_like_a_system_group_is_refused() -> None:
    people = render(Directory((), (Group("slurm", 30009, ()), Group("wheel2", 10, ()))))
    assert people.group == ""
    assert [line.split(":")[0] for line in people.refused] == ["group slurm", "group wheel2"]


REQUIRED = [
    "--namespace=slurm",
    "--release=slurm",
    "--slurm-api-base=http://slurmrestd:6820",
    "--slurm-jwt-key-file=/k",
    "--conf-server=ctld:6817",
    "--auth-secret=auth",
]
DIRECTORY = [
    "--directory-uri=ldaps://ldap.example:636",
    "--directory-bind-dn=cn=reader,dc=example",
    "--directory-password-file=/etc/sunk/directory/password",
    "--directory-user-base=ou=people,dc=example",
    "--directory-group-base=ou=groups,dc=example",
]


def operator_config(*flags: str) -> OperatorConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_args(parser.parse_args([*REQUIRED, *flags]))


def test_r10_6_directory_flags_make_the_operators_directory_settings() -> None:
    config = operator_config(*DIRECTORY)
    assert config.directory is not None
    assert (config.directory.uri, config.directory.user_filter) == (
        "ldaps://ldap.example:636",
        "(objectClass=posixAccount)",
    )
    assert config.people_configmap == "slurm-people"


def test_r10_6_no_directory_uri_means_no_people_sync() -> None:
    assert operator_config().directory is None


@pytest.mark.parametrize("missing", ["bind-dn", "password-file", "user-base", "group-base"])
def test_r10_6_a_half_given_directory_stops_the_operator_naming_the_missing_flag(missing: str) -> None:
    flags = [f for f in DIRECTORY if not f.startswith(f"--directory-{missing}=")]
    with pytest.raises(ValueError, match=f"needs --directory-{missing}$"):
        operator_config(*flags)
