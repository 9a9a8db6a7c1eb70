#!/usr/bin/env bash
# One suite of `make test`: runs it and notes how long it took, and whether it passed, in
# .suite-times, which `make test` prints at its end so a slow or failing suite is named last
# in CI's log.
set -uo pipefail
cd "$(dirname "$0")/.."
label=$1
shift
started=$(date +%s)
"$@"
rc=$?
if [ "$rc" = 0 ]; then outcome=passed; else outcome="FAILED (exit $rc)"; fi
printf '%-28s %4d min %02d s  %s\n' "$label" $((($(date +%s) - started) / 60)) $((($(date +%s) - started) % 60)) "$outcome" >>.suite-times
exit "$rc"
