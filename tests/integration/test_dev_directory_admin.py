"""`sunk dev people` and `sunk dev group` against a real slapd (issue #49 point 4): what an
admin adds is what the operator's reader then reads, and what they remove is gone from it.

Each test starts its own seeded slapd (the dev package's, alice, bob and carol) in a
temporary run directory on a free loopback port, and stops it by its PID."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import ldap3
import pytest

from sunk.operator.directory.people import render
from sunk_dev import directory
from sunk_dev import directory_admin as admin
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout
from tests.support import running_slapd


@pytest.fixture
def slapd(tmp_path: Path) -> Iterator[Layout]:
    with running_slapd(tmp_path / "run") as layout:
        yield layout


def user(layout: Layout, name: str) -> tuple[int, int, tuple[str, ...]] | None:
    found = [u for u in admin.snapshot(layout).users if u.name == name]
    return (found[0].uid, found[0].gid, found[0].ssh_keys) if found else None


def groups_of(layout: Layout, name: str) -> list[str]:
    return [g.name for g in admin.snapshot(layout).groups if name in g.members]


def test_a_person_added_is_read_with_the_next_uid_and_the_key_made_for_them(slapd: Layout) -> None:
    added = admin.add_person(slapd, "dave")
    public = directory.private_key(slapd, "dave").with_suffix(".pub").read_text().strip()
    assert added.private_key == directory.private_key(slapd, "dave")  # where people.ssh looks
    assert user(slapd, "dave") == (20004, 30000, (public,))
    assert groups_of(slapd, "dave") == ["people"]
    assert "dave:*:20004:30000:Dave:/home/dave:/bin/bash\n" in render(admin.snapshot(slapd)).passwd


def test_a_person_added_with_a_group_and_a_password_can_bind_with_it(slapd: Layout, tmp_path: Path) -> None:
    secret = tmp_path / "dave.password"
    secret.write_text("correct horse battery\n")
    key = tmp_path / "dave.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBring dave@laptop\n")
    added = admin.add_person(slapd, "dave", uid=21000, groups=["ml"], key_file=key, password_file=secret)
    assert (added.uid, added.groups, added.private_key) == (21000, ("people", "ml"), None)
    assert groups_of(slapd, "dave") == ["ml", "people"]
    conn = ldap3.Connection(
        directory.uri(slapd), user=admin.person_dn("dave"), password="correct horse battery"
    )
    assert conn.bind(), conn.result
    conn.unbind()


def test_a_person_removed_is_gone_from_the_directory_their_groups_and_the_run_directory(
    slapd: Layout,
) -> None:
    admin.remove_person(slapd, "alice")
    assert user(slapd, "alice") is None
    assert groups_of(slapd, "alice") == []
    assert not directory.private_key(slapd, "alice").exists()
    assert user(slapd, "bob") is not None


def test_a_person_who_exists_is_refused_and_left_as_they_were(slapd: Layout) -> None:
    before = user(slapd, "bob")
    with pytest.raises(DevClusterError, match="cannot add bob: bob already exists"):
        admin.add_person(slapd, "bob")
    assert user(slapd, "bob") == before
    assert directory.private_key(slapd, "bob").exists()  # their key pair was not replaced


def test_removing_nobody_says_who_is_not_there(slapd: Layout) -> None:
    with pytest.raises(DevClusterError, match="no person zed in the directory"):
        admin.remove_person(slapd, "zed")


def test_a_group_added_with_members_is_read_and_removed(slapd: Layout) -> None:
    assert admin.add_group(slapd, "vision", members=["alice", "carol"]) == 30003
    found = {g.name: (g.gid, g.members) for g in admin.snapshot(slapd).groups}
    assert found["vision"] == (30003, ("alice", "carol"))
    admin.remove_group(slapd, "vision")
    assert "vision" not in {g.name for g in admin.snapshot(slapd).groups}


def test_the_admin_password_is_kept_owner_only_and_opens_the_directory(slapd: Layout) -> None:
    path = directory.admin_password_file(slapd)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    conn = ldap3.Connection(directory.uri(slapd), user=directory.ADMIN, password=path.read_text())
    assert conn.bind(), conn.result
    conn.unbind()


def test_a_directory_started_without_a_kept_admin_password_gets_one_and_keeps_its_people(
    slapd: Layout,
) -> None:
    """A dev cluster started before this change: its rootdn's password was never written."""
    directory.admin_password_file(slapd).unlink()
    admin.add_person(slapd, "dave")
    assert directory.admin_password_file(slapd).is_file()
    assert [u.name for u in admin.snapshot(slapd).users] == ["alice", "bob", "carol", "dave"]
