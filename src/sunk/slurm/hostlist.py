"""Slurm's compressed host lists ("sn-[001-003,007],gpu5") expanded into node names.

Newer slurmrestd versions give a job's nodes only in this form; the scheduler needs the
names one by one (a placeholder must hold exactly one node).
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in (part.strip() for part in parts) if p]


def _expand_one(item: str) -> list[str]:
    match = re.match(r"^(.*?)\[([^\]]*)\](.*)$", item)
    if match is None:
        return [item]
    prefix, ranges, rest = match.groups()
    names = []
    for spec in ranges.split(","):
        found = _RANGE.match(spec.strip())
        if found is None:
            raise ValueError(f"not a Slurm host list: {item!r}")
        first, last = found.group(1), found.group(2) or found.group(1)
        width = len(first)
        for number in range(int(first), int(last) + 1):
            names.append(f"{prefix}{number:0{width}d}")
    # A suffix may hold another bracket group ("rack[1-2]-n[1-2]").
    return [name + tail for name in names for tail in _expand_one(rest)] if rest else names


def expand(hostlist: str) -> tuple[str, ...]:
    """All node names of a host list, in order; "" and "(null)" give none."""
    if not hostlist or hostlist in ("(null)", "None"):
        return ()
    return tuple(name for item in _split_top_level(hostlist) for name in _expand_one(item))
