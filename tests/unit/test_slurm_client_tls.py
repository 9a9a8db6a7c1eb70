"""The Slurm client over TLS (issue #38 point 6): it trusts slurmrestd's own CA when given
one, and says in words why a certificate it cannot verify is refused.

The TLS listener here is a socket on 127.0.0.1 answering one recorded OpenAPI reply; what
is under test is the client's certificate handling, not slurmrestd."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sunk.kube.secret import self_signed
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.tokens import TokenSource

OPENAPI = json.dumps({"paths": {"/slurm/v0.0.42/ping/": {}}}).encode()


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """(https URL, CA file) of a listener whose certificate only that CA vouches for."""
    cert, key = self_signed(["127.0.0.1"], name="slurmrestd")
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            head = (
                f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(OPENAPI)}\r\n\r\n"
            )
            writer.write(head.encode() + OPENAPI)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass  # the client that refused the certificate hangs up mid-handshake
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"https://127.0.0.1:{port}", tmp_path / "tls.crt"


async def test_issue38_the_client_verifies_slurmrestd_with_the_ca_it_is_given(
    tls_server: tuple[str, Path],
) -> None:
    url, ca = tls_server
    client = await SlurmClient.connect(url, TokenSource(token="t"), ca_file=str(ca))
    try:
        assert client.version == "v0.0.42"
    finally:
        await client.aclose()


async def test_issue38_a_certificate_the_client_cannot_verify_is_refused_in_words(
    tls_server: tuple[str, Path],
) -> None:
    """Catches a client that skips verification (the token would go to anyone answering)
    or that reports only `ConnectError`, which sends an operator looking at the network."""
    url, _ = tls_server
    with pytest.raises(SlurmUnavailable) as refused:
        await SlurmClient.connect(url, TokenSource(token="t"))
    said = str(refused.value)
    assert "its TLS certificate does not verify (self-signed certificate)" in said
    assert "--slurm-ca-file" in said


async def test_issue38_a_slurmrestd_without_tls_is_named_as_such() -> None:
    """An upgrade from a chart before restapi.tls meets the old, plain slurmrestd first
    (the pre-upgrade check): the words must say so, not just `ConnectError`."""

    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(plain, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        with pytest.raises(SlurmUnavailable, match="it answered in plain HTTP, not TLS"):
            await SlurmClient.connect(f"https://127.0.0.1:{port}", TokenSource(token="t"))
