#!/usr/bin/env bash
# One suite of `make test`: runs it, notes how long it took in .suite-times, and prints every
# suite's time so far when it fails or when it is the last one (--last), so a slow or failing
# suite is named at the end of CI's log.
set -uo pipefail
cd "$(dirname "$0")/.."
last=0
if [ "${1:-}" = --last ]; then last=1; shift; fi
label=$1
shift
started=$(date +%s)
"$@"
rc=$?
if [ "$rc" = 0 ]; then outcome=passed; else outcome="FAILED (exit $rc)"; fi
printf '%-28s %4d min %02d s  %s\n' "$label" $((($(date +%s) - started) / 60)) $((($(date +%s) - started) % 60)) "$outcome" >>.suite-times
if [ "$rc" != 0 ] || [ "$last" = 1 ]; then
  echo "time per suite:"
  cat .suite-times
fi
exit "$rc"
