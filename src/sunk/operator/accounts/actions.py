"""What an accounts plan asks of slurmdbd, in the order it must happen: typed, so the plan
stays pure and the sync is the only place that talks to Slurm."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AddAccount:
    name: str
    parent: str
    description: str


@dataclass(frozen=True)
class AddAssociation:
    user: str
    account: str
    qos: tuple[str, ...]
    default_qos: str
    new_user: bool  # Slurm does not know the user yet: made with this as default account


@dataclass(frozen=True)
class SetQos:
    user: str
    account: str
    qos: tuple[str, ...]
    default_qos: str


@dataclass(frozen=True)
class SetDefaultAccount:
    """Before the user's default association goes, while they keep others."""

    user: str
    account: str


@dataclass(frozen=True)
class RemoveAssociation:
    user: str
    account: str


@dataclass(frozen=True)
class RemoveUser:
    """A user whose last association sunk just removed (all of them were in sunk's accounts)."""

    user: str


@dataclass(frozen=True)
class RemoveAccount:
    name: str


@dataclass(frozen=True)
class Problem:
    """Something in the mapping or the directory to tell (a Warning Event), never to act on."""

    reason: str
    note: str


Action = (
    AddAccount | AddAssociation | SetQos | SetDefaultAccount | RemoveAssociation | RemoveUser | RemoveAccount
)
