#!/bin/bash
# Placeholder job submitted by sunk for one Kubernetes Pod (named in the job's name).
# It holds the Pod's resources in Slurm for as long as the Pod may still be running.
#
# Environment (set by the scheduler at submission):
#   SUNK_POD, SUNK_POD_UID   the Pod this job stands for
#   SUNK_MARK_FIELD          the job field that carries the started mark: `extra` on
#                            Slurm 23.02 and later, `comment` on 22.05 (no `extra` there)
#   SUNK_MARK_BASE           what that field held at submission
#   SUNK_HOOK_URL            the scheduler's hooks API
#   SUNK_HOOK_TOKEN          this Pod's token for hook calls (R5.5)
#   SUNK_HOOK_KEY            this Pod's key: the scheduler's answers are signed with it
#   SUNK_KILL_WAIT           Slurm's KillWait in seconds
#   SUNK_HOOK_CA             the CA (PEM) that signed the hooks API's certificate; absent
#                            when the scheduler serves plain HTTP (a local dev cluster)
set -u
export LC_ALL=C   # a "." in $EPOCHREALTIME, whatever the node's locale

# The CA goes to a file for curl: it is public, so only its lifetime needs care.
TLS=()
if [ -n "${SUNK_HOOK_CA:-}" ]; then
  HOOK_CA=$(mktemp) && printf '%s\n' "$SUNK_HOOK_CA" > "$HOOK_CA" && TLS=(--cacert "$HOOK_CA")
  trap 'rm -f "$HOOK_CA"' EXIT
fi

# The token goes to curl on its standard input (`curl -K -` reads options there), never on
# a command line, where every user of the node could read it in /proc. A scheduler older
# than tokens refuses such a call (401): from then on, calls are signed with the key too.
HOOK_AUTH="header = \"X-Sunk-Token: ${SUNK_HOOK_TOKEN:-}\""
SIGN_CALLS=""
[ -n "${SUNK_HOOK_TOKEN:-}" ] || SIGN_CALLS=1

# pads: sets IPAD and OPAD to $SUNK_HOOK_KEY (hex) padded to SHA-256's 64-byte block and
# XORed with HMAC's two constants, as printf %b escapes. Once per job, when first needed.
pads() {
  local key=$SUNK_HOOK_KEY i byte ipad="" opad=""
  while (( ${#key} < 128 )); do key+=0; done
  for (( i = 0; i < 64; i++ )); do
    byte=$(( 16#${key:i*2:2} ))
    printf -v ipad '%s\\x%02x' "$ipad" $(( byte ^ 0x36 ))
    printf -v opad '%s\\x%02x' "$opad" $(( byte ^ 0x5c ))
  done
  IPAD=$ipad OPAD=$opad   # both at once: never half built, whatever interrupts this
}

# hmac MESSAGE: sets SIG to HMAC-SHA256 of MESSAGE under $SUNK_HOOK_KEY (hex). Built from
# two plain SHA-256 runs fed on stdin, so the key never appears on a command line; printf
# is a bash builtin, not a process. Each run costs a fork of sha256sum, so hashing is kept
# for what needs it: checking the answer that lets this job end (once per job).
hmac() {
  local inner="" i
  [ -n "${IPAD:-}" ] || pads
  digest '%b%s' "$IPAD" "$1"
  for (( i = 0; i < 64; i += 2 )); do inner+="\\x${SIG:i:2}"; done
  digest '%b%b' "$OPAD" "$inner"
}

# digest FORMAT ARGS...: sets SIG to the SHA-256 (hex) of what `printf FORMAT ARGS...`
# writes. Slurm signals every process of the job, so its SIGTERM (or the scheduler's
# SIGUSR1) also reaches the hashing subshell and sha256sum, and killed them: the digest
# came out empty and a genuine answer read as forged (issue #39, in about 1 run in 200).
# The hashing ignores both signals (sha256sum inherits that); one landing before the
# subshell can say so still kills it, so a digest that is not 64 hex digits is made again
# (a few times at most: a wrong one only makes the answer read as forged, and the call is
# retried).
digest() {
  local tries=0
  SIG=""
  until [[ $SIG =~ ^[0-9a-f]{64} ]] || (( ++tries > 5 )); do
    SIG=$(trap '' TERM USR1; printf "$@" | sha256sum)
  done
  SIG=${SIG:0:64}
}

# call EVENT MAX_SECONDS: sets CALL to the curl arguments of a POST to the hooks API (curl
# prints the HTTP status, 000 when the scheduler cannot be reached, and the answer's
# signature). The nonce is this call's own: the answer must be signed over it. A thousand
# jobs may start or end at once on a busy node, so processes are counted: a call is one
# curl, run as a plain command (two sha256sum more when it must be signed).
call() {
  CALL_PATH="/v1/pods/${SUNK_POD_UID}/jobs/${SLURM_JOB_ID}/$1"
  CALL_NONCE="${SRANDOM}${SRANDOM}${SRANDOM}${SRANDOM}"
  CALL=("${TLS[@]}" -s -o /dev/null -w '%{http_code} %header{x-sunk-answer}' -X POST --max-time "$2"
    -H "X-Sunk-Nonce: $CALL_NONCE")
  if [ -n "$SIGN_CALLS" ]; then
    local ts=$EPOCHREALTIME
    hmac "POST
$CALL_PATH
$ts
$CALL_NONCE
"
    CALL+=(-H "X-Sunk-Timestamp: $ts" -H "X-Sunk-Signature: $SIG")
  fi
  CALL+=("${SUNK_HOOK_URL}${CALL_PATH}")
}

# ask: makes the call set up by `call` and sets CODE to its status, or to "forged" when the
# answer is one that would end this job (200: the Pod is gone; 403: the job is no Pod's)
# but the scheduler did not sign it for this very call: such an answer is ignored, so no
# one on the path can free these resources while the Pod still runs. The answer is read
# from a pipe, not taken from `$(...)`: bash runs a signal's trap while `read` waits, but
# only after a `$(...)` ends, and a SIGTERM during a long poll must start the count to
# KillWait when it comes, not up to 10 s later.
ask() {
  local answer
  read -r CODE answer < <(curl -K - "${CALL[@]}" <<<"$HOOK_AUTH")
  if [ "$CODE" = 401 ]; then SIGN_CALLS=1; fi
  if [ "$CODE" = 200 ] || [ "$CODE" = 403 ]; then
    hmac "ANSWER
$CALL_PATH
$CALL_NONCE
$CODE
"
    if [ "$answer" != "$SIG" ]; then
      echo "sunk placeholder: ignored an unsigned $CODE answer to $CALL_PATH" >&2
      CODE=forged
    fi
  fi
}

# pause SECONDS (or infinity): sleeps in the background under `wait`. Bash runs a signal's
# handler only between commands, or while `wait` waits on a child or `read` on a pipe; a
# foreground `sleep` would hold the handler back for as long as it runs. Slurm signals a
# job's processes one at a time, so its SIGTERM can end the `sleep` before it reaches
# this script: the pause then ends early, with the handler run as soon as it arrives.
pause() {
  sleep "$1" &
  wait $!
}

# Hold these resources until the Pod is gone, then end. Either signal starts the hold, once:
# - SIGUSR1: the scheduler says the Pod is being deleted. Slurm is not ending the job, so
#   there is no deadline and nothing to drain (R5.1).
# - SIGTERM: Slurm is ending the job (cancel, preemption, time limit) and kills it at
#   KillWait. The call asks the scheduler to delete the Pod; if the Pod is still there
#   shortly before KillWait ends, the node is drained so that Slurm never hands these
#   resources to another job under a running Pod (only root may drain; otherwise the
#   scheduler does).
# Once holding, a SIGTERM only notes the time. Slurm's cancel usually follows the
# scheduler's SIGUSR1 just as the "Pod gone" answer comes back, and a second handler run
# inside the first would break off the answer's check half way: every genuine answer then
# read as forged, and the node was drained at KillWait (issue #39).
ENDING_AT=""   # $SECONDS when Slurm's SIGTERM came: KillWait counts from there
hold() {
  trap '[ -n "$ENDING_AT" ] || ENDING_AT=$SECONDS' TERM
  trap '' USR1
  local deadline=$(( ${SUNK_KILL_WAIT:-30} - 3 )) drained="" left=10 step=0
  local -a backoff=(0.5 1 2 4)   # when a thousand jobs end at once, retries must not pile up
  while :; do
    [ -z "$ENDING_AT" ] || left=$(( deadline - (SECONDS - ENDING_AT) ))
    call terminating $(( left > 10 ? 10 : (left < 1 ? 1 : left) ))
    ask
    case "$CODE" in
      200|403) exit 0 ;;  # the Pod is gone, or the scheduler knows this job as no Pod's
                          # (a replaced or reused job): nothing to hold these resources for
    esac
    if [ -n "$ENDING_AT" ] && [ -z "$drained" ] && (( SECONDS - ENDING_AT >= deadline )) && (( EUID == 0 )); then
      scontrol update nodename="$SLURMD_NODENAME" state=drain \
        reason="sunk: Pod ${SUNK_POD} still running at KillWait (job $SLURM_JOB_ID)"
      drained=1
    fi
    case "$CODE" in
      202) step=0 ;;     # long poll ended, the Pod is still terminating: ask again
      *)                 # scheduler unreachable, busy or refusing: retry, backing off
        [ -n "$ENDING_AT" ] && (( left <= 5 )) && step=0
        pause "${backoff[step]}"
        step=$(( step < 3 ? step + 1 : 3 )) ;;
    esac
  done
}
trap 'ENDING_AT=$SECONDS; hold' TERM
trap hold USR1

# Mark the job started; the scheduler binds the Pod only once it sees the mark (RUNNING
# alone may still mean "prolog running"). No Pod annotation maps to `extra`, so on current
# Slurm nothing a Pod author writes can fake it. Only now: a bound Pod may be deleted at
# once, and the scheduler's SIGUSR1 must find its trap (untrapped, it kills the script).
if ! scontrol update jobid="$SLURM_JOB_ID" "${SUNK_MARK_FIELD:-extra}=${SUNK_MARK_BASE:-}: started"; then
  echo "sunk placeholder: could not mark job $SLURM_JOB_ID started" >&2
  exit 1
fi

call started 2
curl -K - "${CALL[@]}" <<<"$HOOK_AUTH" >/dev/null &   # the scheduler binds without waiting for its next poll
# Wait for a signal; its handler ends the script. A pause ended by a signal that has not
# reached this script yet starts another at once.
while :; do pause infinity; done
