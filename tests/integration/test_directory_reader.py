"""sunk's directory reader against a real slapd (Debian's OpenLDAP, seeded by the dev
package with alice, bob and carol): what it reads, and what it says when it cannot (R10.6)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunk.ldap.models import Directory, DirectoryError, DirectorySettings
from sunk.ldap.reader import read
from sunk.operator.directory.people import render
from sunk_dev import directory
from sunk_dev.layout import Layout
from tests.support import running_slapd


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    with running_slapd(tmp_path_factory.mktemp("directory")) as layout:
        yield layout


def settings(layout: Layout, **changes: object) -> DirectorySettings:
    base = DirectorySettings(
        directory.uri(layout),
        directory.READER,
        directory.reader_password_file(layout),
        directory.PEOPLE,
        directory.GROUPS,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def snapshot(slapd: Layout) -> Directory:
    return read(settings(slapd))


def test_r10_6_every_person_is_read_with_their_ids_home_and_ssh_key(
    snapshot: Directory, slapd: Layout
) -> None:
    alice = next(u for u in snapshot.users if u.name == "alice")
    assert (alice.uid, alice.gid, alice.home, alice.shell) == (20001, 30000, "/home/alice", "/bin/bash")
    public = directory.private_key(slapd, "alice").with_suffix(".pub").read_text().strip()
    assert alice.ssh_keys == (public,)
    assert [u.name for u in snapshot.users] == ["alice", "bob", "carol"]


def test_r10_6_groups_carry_their_members(snapshot: Directory) -> None:
    groups = {g.name: (g.gid, g.members) for g in snapshot.groups}
    assert groups["ml"] == (30001, ("alice",))
    assert groups["hpc"] == (30002, ("bob",))


def test_r10_6_the_snapshot_renders_to_name_service_lines(snapshot: Directory) -> None:
    people = render(snapshot)
    assert "alice:*:20001:30000:Alice:/home/alice:/bin/bash\n" in people.passwd
    assert "ml:x:30001:alice\n" in people.group
    assert people.refused == ()


def test_r10_6_a_wrong_bind_password_says_which_identity_was_refused(slapd: Layout, tmp_path: Path) -> None:
    wrong = tmp_path / "password"
    wrong.write_text("not-the-password\n")
    with pytest.raises(DirectoryError, match=r"refused the bind as cn=reader.*password in its Secret"):
        read(settings(slapd, password_file=wrong))


def test_r10_6_an_unreachable_directory_says_where_it_looked(slapd: Layout) -> None:
    nowhere = f"ldap://127.0.0.1:{slapd.ports.ldap + 1}"
    with pytest.raises(DirectoryError, match=f"cannot reach the directory at {nowhere}"):
        read(settings(slapd, uri=nowhere, timeout_s=2))


def test_r10_6_anonymous_readers_see_nobody(slapd: Layout, tmp_path: Path) -> None:
    """The seeded directory grants reading to its reader only: a reader that got nothing
    because of an access rule must not be taken for a directory with no people."""
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(DirectoryError):
        read(settings(slapd, bind_dn="", password_file=empty))
