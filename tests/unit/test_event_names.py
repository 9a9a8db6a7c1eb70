"""Events recorded once under a chosen name: the name must be one the API server accepts,
or the Event is refused (422) and never shown."""

from __future__ import annotations

import re

import pytest

from sunk.kube.events import event_name

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@pytest.mark.parametrize(
    "wanted",
    [
        "compute-255-001.gres.gpu:h100:8.none",
        "features.feature fast is asked for by pending jobs 12, 13",
        "Compute.Invalid.3",
        "x" * 300,
    ],
)
def test_an_event_name_is_always_valid_and_two_wishes_never_share_one(wanted: str) -> None:
    name = event_name(wanted)
    assert DNS_SUBDOMAIN.match(name) and len(name) <= 253
    assert event_name(wanted) == name
    assert event_name(wanted + "!") != name


def test_a_valid_name_is_kept_as_it_is() -> None:
    assert event_name("compute.held.real-1.other") == "compute.held.real-1.other"
