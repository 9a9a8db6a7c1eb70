"""One read of a directory's people and groups, with the settings a cluster operator gives.

The read is a whole snapshot (every user and group under the configured bases), made by
one reader for the whole cluster, so that a thousand nodes never each query the
directory; callers keep the last good snapshot when a read fails. ldap3 is pure Python,
so the sunk image needs no LDAP C library or compiler (see docs/architecture.md).
"""

from __future__ import annotations

import ssl

import ldap3
from ldap3.core import exceptions as ldap_errors

from sunk.ldap.models import Directory, DirectoryError, DirectorySettings, Group, User


def read(settings: DirectorySettings) -> Directory:
    """Every user and group the filters select. Blocking: call it from a thread."""
    try:
        password = settings.password_file.read_text().strip()
    except OSError as err:
        raise DirectoryError(
            f"cannot read the directory's bind password {settings.password_file}: {err}"
        ) from None
    try:
        with _connect(settings, password) as conn:
            users = _search(conn, settings.user_base, settings.user_filter, _user_attributes(settings))
            groups = _search(conn, settings.group_base, settings.group_filter, _GROUP_ATTRIBUTES)
    except (ldap_errors.LDAPBindError, ldap_errors.LDAPInvalidCredentialsResult):
        raise DirectoryError(
            f"the directory at {settings.uri} refused the bind as {settings.bind_dn}: check the bind DN "
            "and the password in its Secret"
        ) from None
    except ldap_errors.LDAPSocketOpenError as err:
        raise DirectoryError(f"cannot reach the directory at {settings.uri}: {err}") from None
    except ldap_errors.LDAPException as err:
        raise DirectoryError(f"reading the directory at {settings.uri} failed: {err}") from None
    return _snapshot(users, groups, settings.ssh_key_attribute)


def _user_attributes(settings: DirectorySettings) -> list[str]:
    return [
        "uid",
        "uidNumber",
        "gidNumber",
        "homeDirectory",
        "loginShell",
        "gecos",
        "cn",
        settings.ssh_key_attribute,
    ]


_GROUP_ATTRIBUTES = ["cn", "gidNumber", "memberUid", "member"]


def _connect(settings: DirectorySettings, password: str) -> ldap3.Connection:
    tls = None
    if settings.uri.startswith("ldaps://") or settings.start_tls:
        tls = ldap3.Tls(
            validate=ssl.CERT_REQUIRED,
            ca_certs_file=str(settings.ca_file) if settings.ca_file else None,
        )
    server = ldap3.Server(settings.uri, tls=tls, connect_timeout=settings.timeout_s)
    conn = ldap3.Connection(
        server,
        user=settings.bind_dn,
        password=password,
        receive_timeout=settings.timeout_s,
        raise_exceptions=True,
        read_only=True,
    )
    conn.open()
    if settings.start_tls:
        conn.start_tls()
    conn.bind()
    return conn


def _search(
    conn: ldap3.Connection, base: str, query: str, attributes: list[str]
) -> list[tuple[str, dict[str, list[str]]]]:
    entries = conn.extend.standard.paged_search(
        base, query, attributes=attributes, paged_size=500, generator=True
    )
    found = []
    for entry in entries:
        if entry.get("type") != "searchResEntry":
            continue
        raw = entry.get("attributes") or {}
        found.append((entry["dn"], {k: _strings(v) for k, v in raw.items()}))
    return found


def _strings(value: object) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values if v not in (None, "")]


def _snapshot(
    users: list[tuple[str, dict[str, list[str]]]],
    groups: list[tuple[str, dict[str, list[str]]]],
    key_attribute: str,
) -> Directory:
    found_users, skipped = [], []
    for dn, attrs in users:
        name, uid, gid = _first(attrs, "uid"), _first(attrs, "uidNumber"), _first(attrs, "gidNumber")
        if not (name and uid.isdigit() and gid.isdigit()):
            skipped.append(f"{dn}: no uid, uidNumber or gidNumber")
            continue
        found_users.append(
            User(
                name,
                int(uid),
                int(gid),
                _first(attrs, "homeDirectory") or f"/home/{name}",
                _first(attrs, "loginShell") or "/bin/bash",
                _first(attrs, "gecos") or _first(attrs, "cn"),
                tuple(attrs.get(key_attribute, [])),
                dn.lower(),
            )
        )
    by_dn = {u.dn: u.name for u in found_users}
    found_groups = []
    for dn, attrs in groups:
        name, gid = _first(attrs, "cn"), _first(attrs, "gidNumber")
        if not (name and gid.isdigit()):
            skipped.append(f"{dn}: no cn or gidNumber")
            continue
        members = set(attrs.get("memberUid", []))
        members |= {by_dn[m.lower()] for m in attrs.get("member", []) if m.lower() in by_dn}
        found_groups.append(Group(name, int(gid), tuple(sorted(members))))
    return Directory(
        tuple(sorted(found_users, key=lambda u: u.name)),
        tuple(sorted(found_groups, key=lambda g: g.name)),
        tuple(skipped),
    )


def _first(attrs: dict[str, list[str]], key: str) -> str:
    values = attrs.get(key) or []
    return values[0] if values else ""
