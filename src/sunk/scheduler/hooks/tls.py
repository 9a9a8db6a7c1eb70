"""Where placeholder jobs reach the hooks API, and its TLS certificate, from the scheduler's
configuration."""

from __future__ import annotations

import os
import socket
import ssl

from sunk.scheduler.config import Config


def hooks_url(config: Config, port: int) -> str:
    if config.hooks_url:
        return config.hooks_url.rstrip("/")
    host = config.hooks_bind[0]
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    return f"{'https' if config.hooks_tls_cert else 'http'}://{host}:{port}"


class HooksTLS:
    """The hooks API's certificate, and the CA placeholders check it with, from files."""

    def __init__(self, config: Config) -> None:
        assert config.hooks_tls_cert and config.hooks_tls_key and config.hooks_tls_ca
        self._files = (config.hooks_tls_cert, config.hooks_tls_key, config.hooks_tls_ca)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple[float, ...] = ()
        self.ca_pem = ""
        self.reload()

    def reload(self) -> bool:
        """Load the files if they changed since the last load; True if they did."""
        stamp = tuple(os.stat(f).st_mtime for f in self._files)
        if stamp == self._stamp:
            return False
        cert, key, ca = self._files
        self.context.load_cert_chain(cert, key)
        self.ca_pem = ca.read_text()
        self._stamp = stamp
        return True
