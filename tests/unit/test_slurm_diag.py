"""slurmctld's statistics (/diag) read from answers recorded on Slurm 24.11 and 26.05."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sunk.slurm.client import SlurmClient, make_dialect
from sunk.slurm.diag import SlurmDiag, parse_diag
from sunk.slurm.tokens import TokenSource

SAMPLES = Path(__file__).parent / "samples"
RECORDED = sorted(SAMPLES.glob("slurm-*/v*/diag.json"))
IDS = [f"{p.parent.parent.name}/{p.parent.name}" for p in RECORDED]


def recorded(path: Path) -> dict[str, object]:
    body: dict[str, object] = json.loads(path.read_text())["body"]
    return body


def test_diag_answers_are_recorded_for_24_11_and_26_05() -> None:
    assert {p.parent.parent.name for p in RECORDED} >= {"slurm-24.11.5-4", "slurm-26.05.5-1"}


@pytest.mark.parametrize("path", RECORDED, ids=IDS)
def test_a_recorded_diag_reads_slurms_own_numbers(path: Path) -> None:
    """Catches a field read under the wrong name (it would read 0, not Slurm's value)."""
    stats = recorded(path)["statistics"]
    assert isinstance(stats, dict)
    diag = parse_diag(recorded(path))
    assert diag.server_thread_count == stats["server_thread_count"] >= 1
    assert diag.schedule_cycle_last == stats["schedule_cycle_last"] > 0
    assert diag.schedule_cycle_max == stats["schedule_cycle_max"]
    assert diag.schedule_cycle_mean == stats["schedule_cycle_mean"]
    assert diag.dbd_agent_queue_size == stats["dbd_agent_queue_size"]
    assert diag.bf_active is False


def test_wrapped_numbers_are_unwrapped() -> None:
    """Catches bf_when_last_cycle read as the {set, infinite, number} dict (or 0) on 0.0.40+."""
    wrapped = {"statistics": {"bf_when_last_cycle": {"set": True, "infinite": False, "number": 1795319000}}}
    assert parse_diag(wrapped).bf_when_last_cycle == 1795319000


def test_fields_a_version_leaves_out_read_as_zero() -> None:
    """Catches a KeyError (or AttributeError) on an older or odd slurmrestd's answer."""
    assert parse_diag({"statistics": {"agent_queue_size": 3}}) == SlurmDiag(agent_queue_size=3)
    assert parse_diag({}) == SlurmDiag()
    assert parse_diag({"statistics": []}) == SlurmDiag()


async def test_the_client_asks_diag_in_its_rest_version_and_reads_the_answer() -> None:
    """Catches /diag asked outside the client's version (a 404 on every listing)."""
    path = SAMPLES / "slurm-24.11.5-4" / "v0.0.42" / "diag.json"
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(200, json=recorded(path))

    client = SlurmClient("http://slurmrestd", TokenSource("t"), dialect=make_dialect("v0.0.42"))
    client._http = httpx.AsyncClient(base_url="http://slurmrestd", transport=httpx.MockTransport(answer))
    try:
        diag = await client.diag()
    finally:
        await client.aclose()
    assert asked == ["/slurm/v0.0.42/diag"]
    assert diag == parse_diag(recorded(path))
