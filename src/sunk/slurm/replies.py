"""Decoding slurmrestd's job answers down to the fields a dialect reads.

On current Slurm one job is 5 to 20 KiB of JSON, nearly all of it fields sunk never looks
at. Decoded in full, a listing of 3000 jobs briefly holds about 100 MiB of Python objects
and takes 0.3 s of CPU; decoded into a shape that names only the fields the dialect reads,
msgspec skips the rest without building them (about 9 MiB and 0.08 s). The jobs come out
as plain dicts holding just those fields, so every dialect parses them as before.
"""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec
import orjson


def job_reply_decoder(fields: frozenset[str]) -> msgspec.json.Decoder[Any]:
    """A decoder of /jobs and /job/{id} answers that keeps `fields` of each job and the
    answer's own errors, warnings and meta."""
    # Built at run time from the dialect's fields, so in the functional form (a class body
    # could not name them, and msgspec could not resolve a local class's annotations).
    job = TypedDict("job", {name: Any for name in sorted(fields)}, total=False)  # type: ignore[misc]
    shape = {"jobs": list[job], "errors": Any, "warnings": Any, "meta": Any}
    reply = TypedDict("reply", shape, total=False)  # type: ignore[misc]
    return msgspec.json.Decoder(reply)


def decode(content: bytes, decoder: msgspec.json.Decoder[Any] | None) -> Any:
    """The answer as Python objects, through `decoder` when given; None when it is not
    JSON. An answer of another shape (an error reply without a job list, say) is decoded
    in full, so its words still reach the user."""
    if decoder is not None:
        try:
            return decoder.decode(content)
        except msgspec.ValidationError:
            pass
        except msgspec.DecodeError:
            return None
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
