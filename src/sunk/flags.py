"""Values both components take from flags in the reference scheduler's spelling: Go-style
durations and listen addresses. Each raises argparse's own error, so a bad flag is told as
argparse tells any other."""

from __future__ import annotations

import argparse
import re


def parse_duration(text: str) -> float:
    """Go-style durations as the reference flags use them: "30s", "1m30s", "500ms", "45"."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f'"{text}" is not a duration (examples: "30s", "1m")')
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * scale[u] for n, u in parts)


def parse_bind(text: str) -> tuple[str, int]:
    """ ":8000" → ("0.0.0.0", 8000); "127.0.0.1:0" → any free port on loopback."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f'"{text}" is not an address (examples: ":8000", "127.0.0.1:8000")')
    return host or "0.0.0.0", int(port)


def true_or_false(args: argparse.Namespace, name: str) -> bool:
    """The boolean flag `--name` ("true" or "false", any case); anything else is a start-up
    error naming the flag (ValueError, as the components' other flag checks raise)."""
    value = str(getattr(args, name.replace("-", "_"))).lower()
    if value not in ("true", "false"):
        raise ValueError(f"--{name} must be true or false, not {value!r}")
    return value == "true"
