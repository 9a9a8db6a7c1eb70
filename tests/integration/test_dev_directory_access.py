"""Who may do what in the dev directory (issue #52): an anonymous client, on the bridge or
on the host, finds nobody; the reader reads people and groups but writes nothing; a person
bound as themselves reads their own entry alone and writes nothing, not even their own
password; the admin writes. A real slapd (Debian's OpenLDAP), seeded by the dev package, on a
free loopback port; "the bridge" is a client bound to 127.0.0.3."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import ldap3
import pytest

from sunk_dev import directory
from sunk_dev.layout import HOST, Layout
from tests.support import running_slapd

BRIDGE = "127.0.0.3"  # another host than the directory's own, as a Pod is


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    with running_slapd(tmp_path_factory.mktemp("directory")) as layout:
        yield layout


def bound(layout: Layout, who: str | None, password: str = "", source: str = BRIDGE) -> ldap3.Connection:
    """A connection from `source` over StartTLS, bound as `who` (None: anonymously)."""
    tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=str(directory.ca_file(layout)))
    server = ldap3.Server(directory.uri(layout), tls=tls, connect_timeout=5, get_info=ldap3.NONE)
    conn = ldap3.Connection(
        server, user=who, password=password or None, source_address=source, receive_timeout=5
    )
    conn.open()
    conn.start_tls()
    assert conn.bind(), conn.result
    return conn


def names(conn: ldap3.Connection, base: str = directory.SUFFIX) -> list[str]:
    """The DNs of every entry `conn` may see below `base`."""
    conn.search(base, "(objectClass=*)", search_scope=ldap3.SUBTREE, attributes=["uid", "cn"])
    return sorted(entry.entry_dn for entry in conn.entries)


def reader(layout: Layout) -> ldap3.Connection:
    return bound(layout, directory.READER, directory.reader_password_file(layout).read_text())


def alice(layout: Layout) -> ldap3.Connection:
    return bound(
        layout, f"uid=alice,{directory.PEOPLE}", directory.password_file(layout, "alice").read_text()
    )


@pytest.mark.parametrize("source", [BRIDGE, HOST])
def test_issue52_an_anonymous_search_finds_nobody(slapd: Layout, source: str) -> None:
    conn = bound(slapd, None, source=source)
    assert names(conn) == []
    assert names(conn, directory.PEOPLE) == []
    # and the reader, on the same server, does find them: the search itself is sound
    assert f"uid=bob,{directory.PEOPLE}" in names(reader(slapd))


def test_issue52_the_reader_reads_people_and_groups_but_no_password(slapd: Layout) -> None:
    conn = reader(slapd)
    found = names(conn)
    assert {f"uid={n},{directory.PEOPLE}" for n in ("alice", "bob", "carol")} <= set(found)
    assert f"cn=ml,{directory.GROUPS}" in found
    conn.search(directory.PEOPLE, "(uid=alice)", attributes=["userPassword", "uidNumber"])
    [entry] = conn.response
    assert entry["raw_attributes"].get("uidNumber") == [b"20001"]
    assert not entry["raw_attributes"].get("userPassword"), entry


def test_issue52_a_person_reads_only_their_own_entry(slapd: Layout) -> None:
    """What nslcd does after checking a password (a base search of the person's entry) works;
    anything else finds nothing."""
    conn = alice(slapd)
    own = f"uid=alice,{directory.PEOPLE}"
    assert names(conn, own) == [own]
    assert names(conn, f"uid=bob,{directory.PEOPLE}") == []
    assert names(conn, directory.GROUPS) == []
    assert names(conn) == []


@pytest.mark.parametrize(
    ("who", "attribute", "value"),
    [
        ("reader", "loginShell", "/bin/sh"),
        ("alice", "uidNumber", "0"),
        ("alice", "gidNumber", "0"),
        ("alice", "userPassword", "chosen-by-alice"),
        ("alice", "sshPublicKey", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyFakeKeyFakeKeyFakeKeyFake x"),
    ],
)
def test_issue52_only_the_admin_writes(slapd: Layout, who: str, attribute: str, value: str) -> None:
    conn = reader(slapd) if who == "reader" else alice(slapd)
    target = f"uid=alice,{directory.PEOPLE}"
    assert not conn.modify(target, {attribute: [(ldap3.MODIFY_REPLACE, [value])]})
    assert conn.result["description"] == "insufficientAccessRights", conn.result
    admin = bound(slapd, directory.ADMIN, directory.admin_password_file(slapd).read_text())
    assert admin.modify(target, {"description": [(ldap3.MODIFY_REPLACE, ["changed by the admin"])]}), (
        admin.result
    )
