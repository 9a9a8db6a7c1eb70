"""Certificates and keys for the dev API server: a CA, the serving certificate, an admin
client certificate (group system:masters) and the ServiceAccount token signing key."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server_ips: list[str] | None = None,
    server_dns: list[str] | None = None,
    client: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # Key identifiers: strict verifiers (Python 3.13's ssl, OpenSSL's X509_STRICT) refuse
        # a chain without them ("Missing Authority Key Identifier").
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if server_ips or server_dns:
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips or []]
        sans += [x509.DNSName(name) for name in server_dns or []]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    if client:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_pki(directory: Path, api_ips: tuple[str, ...] = ()) -> None:
    """Write ca.crt, apiserver.{crt,key}, admin.{crt,key}, sa.{key,pub} and the API server's
    client certificate for kubelets (kubelet-client.{crt,key}) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("sunk-dev-ca")
    _write_cert(directory / "ca.crt", _issue(ca_name, ca_key, ca_name, ca_key, ca=True))
    _write_key(directory / "ca.key", ca_key)

    server_key = _key()
    server = _issue(
        _name("kube-apiserver"),
        server_key,
        ca_name,
        ca_key,
        server_ips=["127.0.0.1", "10.96.0.1", *api_ips],
        server_dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
    )
    _write_cert(directory / "apiserver.crt", server)
    _write_key(directory / "apiserver.key", server_key)

    admin_key = _key()
    admin = _issue(_name("sunk-dev-admin", "system:masters"), admin_key, ca_name, ca_key, client=True)
    _write_cert(directory / "admin.crt", admin)
    _write_key(directory / "admin.key", admin_key)

    issue_client(directory, directory, "kubelet-client", "kube-apiserver-kubelet-client", "system:masters")

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(directory / "sa.key", sa_key)
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def make_ca(directory: Path, common: str) -> None:
    """directory/ca.{crt,key}: a CA of its own (the dev directory's, say), for `issue_serving`."""
    directory.mkdir(parents=True, exist_ok=True)
    key = _key()
    name = _name(common)
    _write_cert(directory / "ca.crt", _issue(name, key, name, key, ca=True))
    _write_key(directory / "ca.key", key)


def _load_ca(directory: Path) -> tuple[x509.Name, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError("the dev CA key is not an EC key")
    return cert.subject, key


def issue_client(ca_dir: Path, out: Path, stem: str, common: str, org: str | None = None) -> None:
    """out/stem.{crt,key}: a client certificate for user `common` in group `org`."""
    ca_name, ca_key = _load_ca(ca_dir)
    key = _key()
    _write_cert(out / f"{stem}.crt", _issue(_name(common, org), key, ca_name, ca_key, client=True))
    _write_key(out / f"{stem}.key", key)


def issue_serving(ca_dir: Path, out: Path, stem: str, common: str, ips: list[str], dns: list[str]) -> None:
    """out/stem.{crt,key}: a serving certificate for these addresses, signed by the dev CA."""
    ca_name, ca_key = _load_ca(ca_dir)
    key = _key()
    cert = _issue(_name(common), key, ca_name, ca_key, server_ips=ips, server_dns=dns)
    _write_cert(out / f"{stem}.crt", cert)
    _write_key(out / f"{stem}.key", key)
