"""R5.5: only the placeholder job of a Pod can speak for that Pod."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sunk.runtime.ports import SystemClock
from sunk.scheduler.hooks import placeholder_script
from sunk.scheduler.hooks.auth import Verifier, answer_signature, pod_key, pod_token, signature

SECRET = b"0123456789abcdef0123456789abcdef"
PATH = "/v1/pods/uid-1/jobs/7/terminating"


def signed(
    uid: str = "uid-1", path: str = PATH, nonce: str = "n1", at: float | None = None
) -> tuple[str, ...]:
    ts = str(at if at is not None else time.time())
    return ts, nonce, signature(pod_key(SECRET, uid), "POST", path, ts, nonce)


def test_r5_5_a_correctly_signed_call_is_accepted() -> None:
    assert Verifier(SECRET, SystemClock()).check("uid-1", "POST", PATH, *signed()) is None


def test_r5_5_an_unsigned_call_is_refused() -> None:
    assert Verifier(SECRET, SystemClock()).check("uid-1", "POST", PATH, "", "", "") is not None


def test_r5_5_a_forged_signature_is_refused() -> None:
    ts, nonce, _ = signed()
    assert (
        Verifier(SECRET, SystemClock()).check("uid-1", "POST", PATH, ts, nonce, "00" * 32) == "bad signature"
    )


def test_r5_5_one_pods_key_cannot_speak_for_another_pod() -> None:
    ts, nonce, sig = signed(uid="uid-2")
    assert Verifier(SECRET, SystemClock()).check("uid-1", "POST", PATH, ts, nonce, sig) == "bad signature"


def test_r5_5_a_pods_token_is_accepted_for_that_pod_only() -> None:
    verifier = Verifier(SECRET, SystemClock())
    assert verifier.check_token("uid-1", pod_token(SECRET, "uid-1")) is None
    assert verifier.check_token("uid-1", pod_token(SECRET, "uid-2")) == "bad token"
    assert verifier.check_token("uid-1", pod_key(SECRET, "uid-1")) == "bad token"  # the key is not a token
    assert verifier.check_token("uid-1", "") == "malformed token"


def test_r5_5_a_replayed_call_is_refused() -> None:
    verifier = Verifier(SECRET, SystemClock())
    call = signed()
    assert verifier.check("uid-1", "POST", PATH, *call) is None
    assert verifier.check("uid-1", "POST", PATH, *call) == "replayed nonce"


def test_r5_5_an_old_call_is_refused() -> None:
    call = signed(at=time.time() - 3600)
    assert (
        Verifier(SECRET, SystemClock()).check("uid-1", "POST", PATH, *call)
        == "timestamp outside the accepted window"
    )


def test_r5_5_a_signature_for_another_path_is_refused() -> None:
    ts, nonce, sig = signed(path="/v1/pods/uid-1/jobs/7/started")
    assert Verifier(SECRET, SystemClock()).check("uid-1", "POST", PATH, ts, nonce, sig) == "bad signature"


def script_functions(last: str) -> str:
    """The script's setup of hook calls, from the token's line to the end of `last`."""
    script = placeholder_script()
    start = script.index("HOOK_AUTH=")
    return script[start : script.index("\n}\n", script.index(f"{last}() {{")) + 3]


def run_call(key: str, path: str, token: str = "") -> list[str]:
    """Run the script's own `call`; return CALL, one word a line. With no token the
    script signs its call (as it does once a scheduler older than tokens refused one)."""
    env = {"PATH": path, "SUNK_POD_UID": "uid-1", "SLURM_JOB_ID": "7", "SUNK_HOOK_KEY": key}
    return subprocess.run(
        ["bash", "-c", script_functions("call") + 'call terminating 10; printf "%s\\n" "${CALL[@]}"'],
        env={**env, "SUNK_HOOK_URL": "http://hooks", **({"SUNK_HOOK_TOKEN": token} if token else {})},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()


def test_r12_2_the_hook_key_is_never_on_a_command_line(tmp_path: Path) -> None:
    """Every program the signing runs is recorded with its arguments (a shim in front of
    sha256sum): the key, which other users of the node could read in /proc, is in none."""
    log = tmp_path / "argv.log"
    shim = tmp_path / "sha256sum"
    shim.write_text(f'#!/bin/bash\nprintf "%s\\n" "$0 $*" >> {log}\nexec /usr/bin/sha256sum "$@"\n')
    shim.chmod(0o755)
    key = pod_key(SECRET, "uid-1")
    out = run_call(key, f"{tmp_path}:/usr/bin:/bin")
    recorded = log.read_text()
    assert recorded.count("sha256sum") == 2  # the shim saw the signing, twice
    assert key not in recorded and key not in " ".join(out)


def test_r5_5_a_call_with_a_token_is_not_signed() -> None:
    """Signing costs two processes per call; a call that carries the token needs none."""
    out = run_call(pod_key(SECRET, "uid-1"), "/usr/bin:/bin", token=pod_token(SECRET, "uid-1"))
    assert [line for line in out if line.startswith("X-Sunk-")] == [line for line in out if "Nonce" in line]
    assert out[-1] == "http://hooks" + PATH


@pytest.mark.parametrize("uid", ["uid-1", "uid-2", "b1f0c4de-0000-4000-8000-000000000036"])
def test_r5_5_the_scripts_hmac_equals_pythons_for_any_key(uid: str) -> None:
    """HMAC built from two SHA-256 runs in bash: the same bytes as Python's hmac module."""
    out = run_call(pod_key(SECRET, uid), "/usr/bin:/bin")
    headers = dict(line.split(": ", 1) for line in out if line.startswith("X-Sunk-"))
    expected = signature(
        pod_key(SECRET, uid), "POST", PATH, headers["X-Sunk-Timestamp"], headers["X-Sunk-Nonce"]
    )
    assert headers["X-Sunk-Signature"] == expected


def test_r5_5_the_placeholder_script_signs_as_the_verifier_expects() -> None:
    """The script's `call` (bash + sha256sum) and the verifier agree on the signed message."""
    out = run_call(pod_key(SECRET, "uid-1"), "/usr/bin:/bin")
    headers = dict(line.split(": ", 1) for line in out if line.startswith("X-Sunk-"))
    assert out[-1] == "http://hooks" + PATH
    assert (
        Verifier(SECRET, SystemClock()).check(
            "uid-1",
            "POST",
            PATH,
            headers["X-Sunk-Timestamp"],
            headers["X-Sunk-Nonce"],
            headers["X-Sunk-Signature"],
        )
        is None
    )


def script_asks(tmp_path: Path, status: int, answer: str | None, then: str = 'echo "$CODE"') -> str:
    """Run the script's `call` + `ask` against a curl shim that answers `status` with the
    header `answer`, or signed properly for the call when `answer` is None; then `then`,
    whose output is returned. The shim keeps its arguments in argv.log, its input in
    stdin.log."""
    key = pod_key(SECRET, "uid-1")
    shim = tmp_path / "curl"
    shim.write_text(
        "#!/bin/bash\n"
        f'printf "%s\\n" "$*" >> {tmp_path / "argv.log"}\n'
        f"cat >> {tmp_path / 'stdin.log'}\n"
        'for a in "$@"; do case "$a" in X-Sunk-Nonce:*) nonce=${a#X-Sunk-Nonce: } ;; esac; done\n'
        f'printf "%s" "{status} "\n'
        + (
            f'printf "%s" "{answer}"\n'
            if answer is not None
            else f'"$SIGNER" "{key}" "{PATH}" "$nonce" {status}\n'
        )
    )
    shim.chmod(0o755)
    signer = tmp_path / "signer"
    signer.write_text(
        f"#!{sys.executable}\nimport sys\nfrom sunk.scheduler.hooks.auth import answer_signature\n"
        "print(answer_signature(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])), end='')\n"
    )
    signer.chmod(0o755)
    env = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "SUNK_POD_UID": "uid-1",
        "SLURM_JOB_ID": "7",
        "SUNK_HOOK_KEY": key,
        "SUNK_HOOK_TOKEN": pod_token(SECRET, "uid-1"),
        "SUNK_HOOK_URL": "http://hooks",
        "SIGNER": str(signer),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    return subprocess.run(
        ["bash", "-c", script_functions("ask") + f"call terminating 10; ask; {then}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.mark.parametrize("status", [200, 403])
def test_r12_2_the_placeholder_takes_an_ending_answer_only_when_the_scheduler_signed_it(
    tmp_path: Path, status: int
) -> None:
    assert script_asks(tmp_path, status, None) == str(status)
    assert script_asks(tmp_path, status, "") == "forged"  # no signature: a forged answer
    forged = answer_signature("ab" * 32, PATH, "n", status)  # signed with a key that is not the Pod's
    assert script_asks(tmp_path, status, forged) == "forged"


def test_r12_2_the_hook_token_is_never_on_a_command_line(tmp_path: Path) -> None:
    """curl gets the token on its standard input: other users of the node, who can read
    every command line in /proc, cannot read it there."""
    token = pod_token(SECRET, "uid-1")
    assert script_asks(tmp_path, 200, None) == "200"
    assert token not in (tmp_path / "argv.log").read_text()
    assert f'header = "X-Sunk-Token: {token}"' in (tmp_path / "stdin.log").read_text()


def test_r5_5_after_a_refused_token_the_placeholder_signs_its_calls(tmp_path: Path) -> None:
    """A scheduler older than tokens (rolled back while jobs run) refuses them with 401:
    the next call is signed, so the job still reaches it and its node is not drained."""
    out = script_asks(tmp_path, 401, "", then='call terminating 10; printf "%s\\n" "${CALL[@]}"')
    assert any(line.startswith("X-Sunk-Signature: ") for line in out.splitlines())


def test_r12_2_a_wait_answer_needs_no_signature(tmp_path: Path) -> None:
    assert script_asks(tmp_path, 202, "") == "202"  # it only makes the script ask again


def test_r12_2_a_call_signed_before_the_scheduler_began_acting_is_refused() -> None:
    verifier = Verifier(SECRET, SystemClock())
    captured = signed(at=time.time() - 5)
    verifier.not_before = time.time()
    assert "before this scheduler began acting" in str(verifier.check("uid-1", "POST", PATH, *captured))
    assert verifier.check("uid-1", "POST", PATH, *signed(nonce="fresh")) is None


def test_r12_2_a_flood_of_unauthenticated_calls_logs_one_line_per_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from sunk.scheduler.hooks import server

    clock = [1000.0]
    refusals = server.RefusalLog(clock=lambda: clock[0])
    with caplog.at_level("WARNING", logger="sunk.scheduler.hooks.server"):
        for _ in range(500):
            refusals.note("/v1/pods/x/jobs/1/started from 10.0.0.9: bad signature")
        clock[0] += server.REFUSAL_LOG_EVERY_S
        refusals.note("/v1/pods/x/jobs/1/started from 10.0.0.9: bad signature")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "(499 more since the last such line)" in lines[1]
