"""R5.5: only the placeholder job of a Pod can speak for that Pod."""

from __future__ import annotations

import subprocess
import time

from sunk.hooks import placeholder_script
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


def test_r5_5_the_placeholder_script_signs_as_the_verifier_expects() -> None:
    """The script's `call` (bash + openssl) and the verifier agree on the signed message."""
    script = placeholder_script()
    function = script[script.index("call() {") : script.index("\n}\n", script.index("call() {")) + 3]
    key = pod_key(SECRET, "uid-1")
    env = {"PATH": "/usr/bin:/bin", "SUNK_POD_UID": "uid-1", "SLURM_JOB_ID": "7", "SUNK_HOOK_KEY": key}
    out = subprocess.run(
        ["bash", "-c", function + 'call terminating 10; printf "%s\\n" "${CALL[@]}"'],
        env={**env, "SUNK_HOOK_URL": "http://hooks"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    headers = dict(line.split(": ", 1) for line in out if line.startswith("X-Sunk-"))
    assert out[-1] == "http://hooks" + PATH
    assert (
        Verifier(SECRET).check(
            "uid-1",
            "POST",
            PATH,
            headers["X-Sunk-Timestamp"],
            headers["X-Sunk-Nonce"],
            headers["X-Sunk-Signature"],
        )
        is None
    )
