"""The dev directory offers StartTLS and takes passwords from other hosts only over it
(issue #52): what the chart asks of a directory that checks people's passwords, so the dev
cluster does not teach the opposite. A real slapd (Debian's OpenLDAP), seeded by the dev
package, on a free loopback port; "another host" is a client bound to 127.0.0.3."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Iterator
from pathlib import Path

import ldap3
import pytest
from ldap3.core.exceptions import LDAPException
from ldap3.utils.tls_backport import match_hostname

from sunk.ldap.models import DirectorySettings
from sunk.ldap.reader import read
from sunk_dev import directory, pki
from sunk_dev.layout import HOST, Layout
from tests.support import running_slapd

ELSEWHERE = "127.0.0.3"  # a loopback address that is not the directory's own host


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    with running_slapd(tmp_path_factory.mktemp("directory")) as layout:
        yield layout


def connection(layout: Layout, source: str, ca: Path | None = None) -> ldap3.Connection:
    """The reader's connection from `source`, opened, not bound yet."""
    tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=str(ca or directory.ca_file(layout)))
    server = ldap3.Server(directory.uri(layout), tls=tls, connect_timeout=5)
    conn = ldap3.Connection(
        server,
        user=directory.READER,
        password=directory.reader_password_file(layout).read_text(),
        source_address=source,
        receive_timeout=5,
    )
    conn.open()
    return conn


def reader_bind(layout: Layout, *, start_tls: bool, source: str) -> bool:
    """Whether the reader's bind, from `source`, succeeds."""
    conn = connection(layout, source)
    try:
        if start_tls:
            conn.start_tls()
        return bool(conn.bind())
    finally:
        conn.unbind()


def test_issue52_the_operators_reader_reads_the_dev_directory_over_starttls(slapd: Layout) -> None:
    settings = DirectorySettings(
        directory.uri(slapd),
        directory.READER,
        directory.reader_password_file(slapd),
        directory.PEOPLE,
        directory.GROUPS,
    )
    snapshot = read(dataclasses.replace(settings, start_tls=True, ca_file=directory.ca_file(slapd)))
    assert [u.name for u in snapshot.users] == ["alice", "bob", "carol"]
    assert directory.serves_tls(slapd)


def test_issue52_a_password_from_another_host_is_taken_only_over_tls(slapd: Layout) -> None:
    """The Pods on the bridge are another host: a bind in clear from there is refused, the
    same bind after StartTLS succeeds; the host itself (the dev tools) may still bind in clear."""
    assert not reader_bind(slapd, start_tls=False, source=ELSEWHERE)
    assert reader_bind(slapd, start_tls=True, source=ELSEWHERE)
    assert reader_bind(slapd, start_tls=False, source=HOST)


def test_issue52_starttls_against_another_ca_is_refused(slapd: Layout, tmp_path: Path) -> None:
    pki.make_ca(tmp_path, "someone-else")
    conn = connection(slapd, ELSEWHERE, ca=tmp_path / "ca.crt")
    with pytest.raises(LDAPException, match=r"(?i)certificate verify failed"):
        conn.start_tls()


def test_issue52_the_certificate_names_its_addresses_for_every_checker_the_clients_use(slapd: Layout) -> None:
    """nslcd (libldap) matches the IP address entry; ldap3 on Python 3.12+ (the sunk image)
    falls back to a name check that knows no IP entries, so the address is a DNS name too."""
    decoded = ssl._ssl._test_decode_cert(str(directory.tls_dir(slapd) / "slapd.crt"))  # type: ignore[attr-defined]
    names = decoded["subjectAltName"]
    assert ("IP Address", HOST) in names and ("DNS", HOST) in names
    match_hostname(decoded, HOST)  # type: ignore[no-untyped-call]  # raises if the fallback refuses it
