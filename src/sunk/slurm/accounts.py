"""Slurm's accounts, users and associations as slurmdbd keeps them, read and written
through slurmrestd's slurmdb endpoints (the same slurmrestd, the same token).

Only the REST versions whose answers were recorded (tests/unit/samples/.../slurmdb-*.json)
are spoken: v0.0.40 to v0.0.42 (Slurm 24.11) and v0.0.42 to v0.0.45 (Slurm 26.05). Every
request and every field read here has the same shape in all of them, so one dialect serves
them. v0.0.38 (Slurm 22.05) is not spoken: it has neither /accounts_association/ nor
/users_association/, and its POST /associations/ refuses an association without a user
("Missing required field 'user'"), so an account cannot be put under its parent.
`unsupported` says so in a sentence instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")


@dataclass(frozen=True)
class Account:
    name: str
    description: str
    organization: str
    parent: str = ""  # from the account's own association (the cluster's tree); "" unknown


@dataclass(frozen=True)
class Association:
    """A user's association with an account on one cluster (partition-wide only)."""

    user: str
    account: str
    qos: tuple[str, ...]  # sorted
    default_qos: str
    is_default: bool  # the user's default account


@dataclass(frozen=True)
class AccountsSnapshot:
    accounts: dict[str, Account]
    associations: tuple[Association, ...]
    users: frozenset[str]
    qos: frozenset[str]


class SlurmDbPort(Protocol):
    async def slurmdb(self, method: str, path: str, what: str, **kw: Any) -> dict[str, Any]: ...


def parse_accounts(reply: dict[str, Any]) -> list[Account]:
    return [
        Account(str(a["name"]), str(a.get("description") or ""), str(a.get("organization") or ""))
        for a in reply.get("accounts") or []
        if a.get("name")
    ]


def parse_associations(reply: dict[str, Any]) -> tuple[list[Association], dict[str, str]]:
    """Users' associations (partition-wide), and each account's parent from the accounts'
    own associations (those without a user)."""
    found: list[Association] = []
    parents: dict[str, str] = {}
    for raw in reply.get("associations") or []:
        account, user = str(raw.get("account") or ""), str(raw.get("user") or "")
        if not user:
            parents[account] = str(raw.get("parent_account") or "")
            continue
        if raw.get("partition"):
            continue  # partition-specific associations are an administrator's, never sunk's
        qos = tuple(sorted(str(q) for q in raw.get("qos") or ()))
        default = str((raw.get("default") or {}).get("qos") or "")
        found.append(Association(user, account, qos, default, bool(raw.get("is_default"))))
    return found, parents


def parse_names(reply: dict[str, Any], key: str) -> frozenset[str]:
    return frozenset(str(item["name"]) for item in reply.get(key) or [] if item.get("name"))


def account_body(name: str, cluster: str, parent: str, description: str, organization: str) -> dict[str, Any]:
    """POST /accounts_association/: the account and its association on `cluster` in one call."""
    return {
        "association_condition": {
            "accounts": [name],
            "clusters": [cluster],
            "association": {"parent": parent},
        },
        "account": {"description": description, "organization": organization},
    }


def user_association_body(
    user: str, account: str, cluster: str, qos: tuple[str, ...], default_qos: str, *, new_user: bool
) -> dict[str, Any]:
    """POST /users_association/. The default account is given only for a user Slurm does not
    know yet: given for a known one, slurmdbd would move that user's default. The `user`
    part must be there even when empty (slurmrestd refuses the request without it)."""
    association: dict[str, Any] = {"qoslevel": list(qos)}
    if default_qos:
        association["defaultqos"] = default_qos
    body: dict[str, Any] = {
        "association_condition": {
            "users": [user],
            "accounts": [account],
            "clusters": [cluster],
            "association": association,
        }
    }
    body["user"] = {"defaultaccount": account} if new_user else {}
    return body


def qos_update_body(association: Association, cluster: str) -> dict[str, Any]:
    """POST /associations/: an existing association's QoS and default QoS."""
    return {
        "associations": [
            {
                "account": association.account,
                "cluster": cluster,
                "user": association.user,
                "partition": "",
                "qos": list(association.qos),
                "default": {"qos": association.default_qos},
            }
        ]
    }


def default_account_body(user: str, account: str) -> dict[str, Any]:
    """POST /users/: move a user's default account."""
    return {"users": [{"name": user, "default": {"account": account}}]}


class SlurmAccounts:
    """The accounts adapter over a SlurmClient (anything with `slurmdb`)."""

    def __init__(self, client: SlurmDbPort, cluster: str) -> None:
        self.client = client
        self.cluster = cluster

    async def snapshot(self) -> AccountsSnapshot:
        accounts = parse_accounts(await self.client.slurmdb("GET", "/accounts/", "list accounts"))
        reply = await self.client.slurmdb(
            "GET", "/associations/", "list associations", params={"cluster": self.cluster}
        )
        associations, parents = parse_associations(reply)
        users = parse_names(await self.client.slurmdb("GET", "/users/", "list users"), "users")
        qos = parse_names(await self.client.slurmdb("GET", "/qos/", "list QoS"), "qos")
        by_name = {
            a.name: Account(a.name, a.description, a.organization, parents.get(a.name, "")) for a in accounts
        }
        return AccountsSnapshot(by_name, tuple(associations), users, qos)

    async def add_account(self, name: str, parent: str, description: str, organization: str) -> None:
        body = account_body(name, self.cluster, parent, description, organization)
        await self.client.slurmdb("POST", "/accounts_association/", f"add account {name}", json=body)

    async def add_association(
        self, user: str, account: str, qos: tuple[str, ...], default_qos: str, *, new_user: bool
    ) -> None:
        body = user_association_body(user, account, self.cluster, qos, default_qos, new_user=new_user)
        await self.client.slurmdb(
            "POST", "/users_association/", f"associate user {user} with account {account}", json=body
        )

    async def set_qos(self, association: Association) -> None:
        await self.client.slurmdb(
            "POST",
            "/associations/",
            f"set the QoS of user {association.user} in account {association.account}",
            json=qos_update_body(association, self.cluster),
        )

    async def set_default_account(self, user: str, account: str) -> None:
        await self.client.slurmdb(
            "POST",
            "/users/",
            f"make {account} the default account of {user}",
            json=default_account_body(user, account),
        )

    async def remove_association(self, user: str, account: str) -> None:
        await self.client.slurmdb(
            "DELETE",
            "/association/",
            f"remove user {user} from account {account}",
            params={"user": user, "account": account, "cluster": self.cluster},
        )

    async def remove_user(self, user: str) -> None:
        await self.client.slurmdb(
            "DELETE", f"/user/{quote(user)}", f"remove user {user}", endpoint="/user/{name}"
        )

    async def remove_account(self, name: str) -> None:
        await self.client.slurmdb(
            "DELETE", f"/account/{quote(name)}", f"remove account {name}", endpoint="/account/{name}"
        )


def unsupported(version: str) -> str | None:
    """Why accounts cannot be kept over this REST version, or None when they can."""
    if version in VERSIONS:
        return None
    return (
        f"slurmrestd speaks REST {version} here, and sunk keeps accounts over "
        f"{', '.join(VERSIONS)} (Slurm 24.11 and 26.05) only"
    )
