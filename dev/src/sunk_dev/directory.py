"""A real LDAP directory for the dev cluster: OpenLDAP's slapd from Debian's packages,
seeded with a few people, their groups and their SSH keys, for `sunk dev up --directory`.

The tests and the demo log in and submit as these people. Nothing in sunk itself knows
that the directory is slapd: it speaks LDAP to whatever the chart's values name.

The tree:

    dc=sunk,dc=dev
      ou=people   alice, bob, carol (posixAccount + ldapPublicKey: uid, uidNumber, keys)
      ou=groups   people (every person's primary group), ml (alice), hpc (bob);
                  carol is in no group but her own, so no Slurm account is made for her
      cn=reader   the read-only identity clients bind as (its password in the run directory)
      cn=admin    slapd's rootdn, which may change anything (its password in
                  `directory/admin.password`, for `sunk dev people` and `sunk dev group`)

Each person's SSH key pair and password are made here; the private keys and the passwords
stay in the run directory (`directory/keys/<name>`, `directory/passwords/<name>`) for the
tests that log in as them.

slapd offers StartTLS with a certificate from a CA of its own (`directory/tls/ca.crt`, which
the chart's values name as `directory.caSecret`), and takes a password (a person's, the
reader's) from anywhere but the host itself only over TLS: the login Pods' password check
and the operator's reads cross the Nodes' bridge encrypted, as the chart requires of a
directory that checks passwords (issue #52).
"""

from __future__ import annotations

import secrets
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sunk_dev import pki, procs
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import HOST, Layout

SUFFIX = "dc=sunk,dc=dev"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
READER = f"cn=reader,{SUFFIX}"
ADMIN = f"cn=admin,{SUFFIX}"
PRIMARY_GROUP = ("people", 30000)


@dataclass(frozen=True)
class Person:
    name: str
    uid: int
    groups: tuple[str, ...]  # supplementary groups, by name


PEOPLE_SEEDED = (
    Person("alice", 20001, ("ml",)),
    Person("bob", 20002, ("hpc",)),
    Person("carol", 20003, ()),
)
GROUPS_SEEDED = {"ml": 30001, "hpc": 30002}

# The attribute and class most directories use for SSH public keys (the "openssh-lpk"
# schema, which Debian's slapd does not ship): standard identifiers, our own wording.
_SSH_KEY_SCHEMA = """\
attributetype ( 1.3.6.1.4.1.24552.500.1.1.1.13 NAME 'sshPublicKey'
  DESC 'an OpenSSH public key' EQUALITY octetStringMatch
  SYNTAX 1.3.6.1.4.1.1466.115.121.1.40 )
objectclass ( 1.3.6.1.4.1.24552.500.1.1.2.0 NAME 'ldapPublicKey' SUP top AUXILIARY
  DESC 'an entry that may carry SSH public keys' MAY ( sshPublicKey $ uid ) )
"""


def directory_dir(layout: Layout) -> Path:
    return layout.root / "directory"


def reader_password_file(layout: Layout) -> Path:
    return directory_dir(layout) / "reader.password"


def admin_password_file(layout: Layout) -> Path:
    """The rootdn's password (owner-only), so that an admin can add and remove people."""
    return directory_dir(layout) / "admin.password"


def private_key(layout: Layout, name: str) -> Path:
    return directory_dir(layout) / "keys" / name


def password_file(layout: Layout, name: str) -> Path:
    return directory_dir(layout) / "passwords" / name


def uri(layout: Layout, host: str = HOST) -> str:
    return f"ldap://{host}:{layout.ports.ldap}"


def tls_dir(layout: Layout) -> Path:
    return directory_dir(layout) / "tls"


def ca_file(layout: Layout) -> Path:
    """The CA that signed slapd's certificate (what clients verify StartTLS against)."""
    return tls_dir(layout) / "ca.crt"


def serves_tls(layout: Layout) -> bool:
    """Whether the running directory offers StartTLS (one started before it did, does not)."""
    conf = directory_dir(layout) / "slapd.conf"
    return ca_file(layout).is_file() and conf.is_file() and "TLSCertificateFile" in conf.read_text()


def make_certificate(layout: Layout, hosts: tuple[str, ...]) -> None:
    """A CA of the directory's own and slapd's certificate for the addresses it listens on.
    Each address is in the certificate as an IP address and as a DNS name too: ldap3 on
    Python 3.12+ (the sunk image's 3.13) checks names with a fallback that knows no IP
    entries."""
    here = tls_dir(layout)
    pki.make_ca(here, "sunk-dev-directory-ca")
    pki.issue_serving(here, here, "slapd", "sunk-dev-directory", ips=list(hosts), dns=list(hosts))


def slapd_conf(layout: Layout, admin_hash: str, reader_hash: str) -> str:
    """slapd's configuration: the standard schemas, StartTLS, one database, and access that
    lets the reader read everything but passwords, a person read their own entry (nslcd
    reads it back after checking their password), anonymous clients only bind, and takes a
    password from another host than this one only over TLS. Only the admin (the rootdn,
    above every rule) writes: not a person, not even their own password."""
    here = directory_dir(layout)
    tls = tls_dir(layout)
    return f"""\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/nis.schema
include /etc/ldap/schema/inetorgperson.schema
include {here / "ssh-key.schema"}
pidfile {here / "slapd.pid"}
TLSCACertificateFile {tls / "ca.crt"}
TLSCertificateFile {tls / "slapd.crt"}
TLSCertificateKeyFile {tls / "slapd.key"}
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
suffix "{SUFFIX}"
rootdn "{ADMIN}"
rootpw {admin_hash}
directory {here / "db"}
access to attrs=userPassword
  by anonymous peername.ip={HOST} auth
  by anonymous tls_ssf=128 auth
  by * none
access to *
  by dn.exact="{READER}" read
  by self read
  by * none
"""


def seed_ldif(public_keys: dict[str, str], reader_hash: str, password_hashes: dict[str, str]) -> str:
    """The tree in the module's docstring, as LDIF for slapadd."""
    entries = [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: sunk\no: sunk dev cluster\n",
        f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups\n",
        f"dn: {READER}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n"
        f"cn: reader\nuserPassword: {reader_hash}\n",
    ]
    for person in PEOPLE_SEEDED:
        entries.append(
            f"dn: uid={person.name},{PEOPLE}\n"
            "objectClass: inetOrgPerson\nobjectClass: posixAccount\nobjectClass: ldapPublicKey\n"
            f"uid: {person.name}\ncn: {person.name.title()}\nsn: {person.name.title()}\n"
            f"uidNumber: {person.uid}\ngidNumber: {PRIMARY_GROUP[1]}\n"
            f"homeDirectory: /home/{person.name}\nloginShell: /bin/bash\n"
            f"sshPublicKey: {public_keys[person.name]}\nuserPassword: {password_hashes[person.name]}\n"
        )
    groups = {PRIMARY_GROUP[0]: PRIMARY_GROUP[1], **GROUPS_SEEDED}
    for group, gid in groups.items():
        members = [p.name for p in PEOPLE_SEEDED if group in p.groups or group == PRIMARY_GROUP[0]]
        lines = [f"dn: cn={group},{GROUPS}", "objectClass: posixGroup", f"cn: {group}", f"gidNumber: {gid}"]
        lines += [f"memberUid: {member}" for member in members]
        entries.append("\n".join(lines) + "\n")
    return "\n".join(entries)


def hash_password(password: str) -> str:
    """slapd's salted hash of `password`, given to slappasswd on its stdin (never argv)."""
    done = subprocess.run(
        ["slappasswd", "-T", "/dev/stdin"], input=password, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise DevClusterError(f"slappasswd failed: {done.stderr.strip()[:200]}")
    return done.stdout.strip()


def _password(path: Path) -> str:
    """A fresh password kept at `path` (owner-only); returns its hash for the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    path.write_text(password)
    path.chmod(0o600)
    return hash_password(password)


def keep_secret(path: Path) -> str:
    """A fresh random secret kept at `path`, made owner-only before it is written and with
    no line break (ldapmodify's `-y` sends a file's bytes as they are); returns its hash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    secret = secrets.token_hex(16)
    path.write_text(secret)
    return hash_password(secret)


def make_key_pair(path: Path, name: str) -> str:
    """An ed25519 key pair for `name`; returns the public key line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@sunk-dev", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.with_suffix(".pub").read_text().strip()


def start(layout: Layout, hosts: tuple[str, ...] = (HOST,)) -> None:
    """Make the directory's files, load the seed and start slapd listening on `hosts`."""
    here = directory_dir(layout)
    (here / "db").mkdir(parents=True, exist_ok=True)
    reader_password = secrets.token_hex(16)
    reader_password_file(layout).write_text(reader_password)
    reader_password_file(layout).chmod(0o600)
    reader_hash = hash_password(reader_password)
    (here / "ssh-key.schema").write_text(_SSH_KEY_SCHEMA)
    make_certificate(layout, hosts)
    conf = here / "slapd.conf"
    conf.write_text(slapd_conf(layout, keep_secret(admin_password_file(layout)), reader_hash))
    keys = {p.name: make_key_pair(private_key(layout, p.name), p.name) for p in PEOPLE_SEEDED}
    passwords = {p.name: _password(password_file(layout, p.name)) for p in PEOPLE_SEEDED}
    seed = here / "seed.ldif"
    seed.write_text(seed_ldif(keys, reader_hash, passwords))
    loaded = subprocess.run(["slapadd", "-f", str(conf), "-l", str(seed)], capture_output=True, text=True)
    if loaded.returncode:
        raise DevClusterError(f"loading the directory's seed failed: {loaded.stderr.strip()[-300:]}")
    (here / "listen").write_text(" ".join(uri(layout, host) + "/" for host in hosts))
    serve(layout)


def serve(layout: Layout) -> None:
    """Start slapd on the directory made by `start` (again, after `stop`: as a directory
    that was down comes back, with everything it held)."""
    here = directory_dir(layout)
    urls = (here / "listen").read_text()
    argv = ["slapd", "-d", "0", "-f", str(here / "slapd.conf"), "-h", urls]
    slapd = procs.spawn("slapd", argv, layout.pids, layout.logs)
    procs.wait_until(
        lambda: _answers(layout.ports.ldap),
        timeout=20,
        what="slapd",
        watch=[slapd],
        log_dir=layout.logs,
    )


def stop(layout: Layout) -> None:
    """Stop slapd, as a directory that goes down would (its data stays for `serve`)."""
    procs.stop_many([p for p in procs.tracked(layout.pids) if p.name == "slapd"], layout.pids, timeout=10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False
