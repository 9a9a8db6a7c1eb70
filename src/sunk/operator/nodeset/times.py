"""Times as the NodeSet controller writes and reads them: RFC 3339 to the second, in UTC
("2026-01-01T00:00:00Z"), the form of Kubernetes' own stamps. One home for the plan and its
parts (`removal`, `unhealthy`), which `plan` imports and so cannot be imported from."""

from __future__ import annotations

import datetime as dt

STAMP = "%Y-%m-%dT%H:%M:%SZ"


def parse(stamp: str) -> dt.datetime:
    """A stamp in exactly that form (the pass's time, one the operator wrote) as an aware UTC
    time; ValueError for anything else."""
    return dt.datetime.strptime(stamp, STAMP).replace(tzinfo=dt.UTC)


def epoch(stamp: str) -> int | None:
    """Any RFC 3339 time (one the API server wrote: fractions and offsets read too) in epoch
    seconds; None when it is not one."""
    try:
        return int(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


def stamp(epoch: int) -> str:
    """Epoch seconds as a stamp in that form."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime(STAMP)
