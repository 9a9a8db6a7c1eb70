"""R5.5: only the placeholder job of a Pod can speak for that Pod."""

from __future__ import annotations

import time

from sunk.hooks.auth import Verifier, pod_key, signature

SECRET = b"0123456789abcdef0123456789abcdef"
PATH = "/v1/pods/uid-1/jobs/7/terminating"


def signed(
    uid: str = "uid-1", path: str = PATH, nonce: str = "n1", at: float | None = None
) -> tuple[str, ...]:
    ts = str(at if at is not None else time.time())
    return ts, nonce, signature(pod_key(SECRET, uid), "POST", path, ts, nonce)


def test_r5_5_a_correctly_signed_call_is_accepted() -> None:
    assert Verifier(SECRET).check("uid-1", "POST", PATH, *signed()) is None


def test_r5_5_an_unsigned_call_is_refused() -> None:
    assert Verifier(SECRET).check("uid-1", "POST", PATH, "", "", "") is not None


def test_r5_5_a_forged_signature_is_refused() -> None:
    ts, nonce, _ = signed()
    assert Verifier(SECRET).check("uid-1", "POST", PATH, ts, nonce, "00" * 32) == "bad signature"


def test_r5_5_one_pods_key_cannot_speak_for_another_pod() -> None:
    ts, nonce, sig = signed(uid="uid-2")
    assert Verifier(SECRET).check("uid-1", "POST", PATH, ts, nonce, sig) == "bad signature"


def test_r5_5_a_replayed_call_is_refused() -> None:
    verifier = Verifier(SECRET)
    call = signed()
    assert verifier.check("uid-1", "POST", PATH, *call) is None
    assert verifier.check("uid-1", "POST", PATH, *call) == "replayed nonce"


def test_r5_5_an_old_call_is_refused() -> None:
    call = signed(at=time.time() - 3600)
    assert Verifier(SECRET).check("uid-1", "POST", PATH, *call) == "timestamp outside the accepted window"


def test_r5_5_a_signature_for_another_path_is_refused() -> None:
    ts, nonce, sig = signed(path="/v1/pods/uid-1/jobs/7/started")
    assert Verifier(SECRET).check("uid-1", "POST", PATH, ts, nonce, sig) == "bad signature"
