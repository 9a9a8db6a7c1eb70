#!/bin/sh
# sunk's node health check, run by slurmd as HealthCheckProgram (slurm.healthChecks).
#
# Slurm acts on none of its exit codes: whatever happens to the node is done here, with
# scontrol. The rules, so that no one else's decision is ever undone:
#   - every drain this program sets has the reason "sunk-hc: <check>: <message>";
#   - the first failing check drains the node, unless it is drained or down for another
#     owner (an administrator, the operator's "sunk:" drains, Slurm's own), whose reason
#     stays; if an earlier check of ours drained it, the reason names the new check;
#   - a run in which every check ran and passed lifts the drain only when its reason is
#     ours and names a check that just passed (or "verify": the operator's hand-over of a
#     node it wants back, which waits for one clean run), and never on a DOWN node;
#   - when slurmctld cannot be asked, or does not know the node yet (slurmd runs this once
#     before it registers), nothing is done: that says nothing about the node.
#
# Every scontrol call and every check is bounded with timeout(1); a check that does not
# finish in time has failed. The whole run stays well inside the 60 s after which slurmd
# kills it. A custom script that is not executable, or whose interpreter is missing (exit
# 126 or 127), is a configuration problem, never a node fault: it drains nothing and is
# reported with the prefix "sunk-hc-config:". Output lines reach slurmd's log only when
# the exit status is not 0 ("health_check failed: rc:1 output:..."), so the runner exits 1
# whenever it has something to say there.
#
# Settings are shell assignments in the file `settings` beside this script (written by the
# chart); SUNK_HC_SETTINGS names another file.

# slurmd runs this with SLURMD_NODENAME as its only environment.
PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LC_ALL=C
export PATH LC_ALL

self=$0
# Defaults; the settings file overrides them.
checks="cpus memory"      # built-in checks, in the order they run
timeout_s=10              # each check's limit
budget_s=36               # all checks together (plus at most 6 s for each scontrol call)
scontrol_s=5              # each scontrol call's limit
mounts=""                 # paths the mounts check writes to, space-separated
spool_dir=/var/spool/slurmd
spool_min_mib=1024
scripts_dir=""            # the custom scripts' directory (a ConfigMap), run in name order
scripts_configmap=""      # that ConfigMap's name, for messages
cgroup_root=/sys/fs/cgroup
meminfo=/proc/meminfo
dev_dir=/dev
nvidia_smi=auto           # the nvidia check without nvidia-smi: auto (skipped) or required (fails)
dcgm_level=1              # the dcgm check's `dcgmi diag -r` level
settings=${SUNK_HC_SETTINGS:-$(dirname "$self")/settings}
# shellcheck disable=SC1090 # the chart writes it
[ -r "$settings" ] && . "$settings"

OWN="sunk-hc: "
VERIFY=verify # the check named by the operator's hand-over drain
MESSAGE_MAX=160

say() { printf '%s\n' "$*"; }
now() { date +%s; }

# One printable line of at most MESSAGE_MAX characters: no quotes, brackets or newlines,
# which Slurm would show cut or escaped.
clean() {
  printf '%s' "$1" | head -n 1 | tr -c 'A-Za-z0-9 ._:/,+%@()=-' ' ' | tr -s ' ' |
    sed 's/^ //; s/ $//' | cut -c "1-$MESSAGE_MAX"
}

# A field of `scontrol show node -o` (one line, KEY=VALUE separated by spaces).
field() { # line key
  l=" $1"
  case "$l" in
  *" $2="*) v=${l#*" $2="} && printf '%s' "${v%% *}" ;;
  esac
}

# ---- Built-in checks: each prints its message and returns non-zero when it fails. -----

# CPUs the member may use: its affinity, and its cgroup quota when it has one.
check_cpus() {
  want=$(field "$(cat "$NODE_FILE")" CPUTot)
  seen=$(nproc)
  quota=""
  if [ -r "$cgroup_root/cpu.max" ]; then
    read -r q p <"$cgroup_root/cpu.max"
    [ "$q" != max ] && quota=$((q / p))
  elif [ -r "$cgroup_root/cpu/cpu.cfs_quota_us" ]; then
    q=$(cat "$cgroup_root/cpu/cpu.cfs_quota_us")
    p=$(cat "$cgroup_root/cpu/cpu.cfs_period_us")
    [ "$q" -gt 0 ] && quota=$((q / p))
  fi
  [ -n "$quota" ] && [ "$quota" -lt "$seen" ] && seen=$quota
  [ -n "$want" ] || { say "Slurm lists no CPUTot for this node"; return 1; }
  [ "$seen" -ge "$want" ] && return 0
  say "sees $seen CPUs, registered with $want"
  return 1
}

# Memory the member may use: its cgroup limit, and what the machine has.
check_memory() {
  want=$(field "$(cat "$NODE_FILE")" RealMemory)
  total_kib=$(sed -n 's/^MemTotal: *\([0-9]*\) kB$/\1/p' "$meminfo")
  seen=$((total_kib / 1024))
  limit=""
  if [ -r "$cgroup_root/memory.max" ]; then
    limit=$(cat "$cgroup_root/memory.max")
  elif [ -r "$cgroup_root/memory/memory.limit_in_bytes" ]; then
    limit=$(cat "$cgroup_root/memory/memory.limit_in_bytes")
  fi
  case "$limit" in
  '' | max) ;;
  *) [ $((limit / 1048576)) -lt "$seen" ] && seen=$((limit / 1048576)) ;;
  esac
  [ -n "$want" ] || { say "Slurm lists no RealMemory for this node"; return 1; }
  [ "$seen" -ge "$want" ] && return 0
  say "sees $seen MiB of memory, registered with $want MiB"
  return 1
}

# GPUs the node registered with: the sum of its gpu GRES counts (gpu:8, gpu:h100:8(S:0-1), ...).
gpus_registered() {
  gres=$(field "$(cat "$NODE_FILE")" Gres)
  want=0
  for item in $(printf '%s' "$gres" | tr ',' ' '); do
    case "$item" in
    gpu:*)
      n=${item%%(*}
      n=${n##*:}
      case "$n" in '' | *[!0-9]*) ;; *) want=$((want + n)) ;; esac
      ;;
    esac
  done
  printf '%s' "$want"
}

# GPU devices present against the node's gpu GRES count.
check_gpus() {
  want=$(gpus_registered)
  [ "$want" -eq 0 ] && return 0 # no GPUs registered: nothing to compare
  seen=0
  for dev in "$dev_dir"/nvidia[0-9]*; do
    [ -e "$dev" ] && seen=$((seen + 1))
  done
  [ "$seen" -ge "$want" ] && return 0
  say "sees $seen of $want GPUs ($dev_dir/nvidiaN devices)"
  return 1
}

trim() { printf '%s' "$1" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//'; }
yes_() { case "$(trim "$1")" in Yes | yes | YES | 1 | True | true) return 0 ;; esac; return 1; }

# The first line of a file that says a GPU, or the driver, cannot be used.
gpu_error() { # file
  grep -m 1 -i -e 'unable to determine the device handle' -e 'gpu is lost' -e 'fallen off the bus' \
    -e 'communicate with the nvidia driver' -e 'failed to initialize nvml' "$1"
}

# "GPU 3 (0000:3B:00.0)": nvidia-smi's index and its bus id as lspci writes it.
gpu_name() { # index bus-id
  printf 'GPU %s (%s)' "$(trim "$1")" "$(trim "$2" | sed 's/^0000\([0-9A-Fa-f]\{4\}:\)/\1/')"
}

# What the driver says of each GPU (nvidia-smi): every registered GPU answers, none has had
# an uncorrected ECC error since the driver loaded, none waits for a reset to retire pages
# or remap rows, and none has failed to remap a row. A hang is the runner's timeout.
check_nvidia() {
  want=$(gpus_registered)
  [ "$want" -eq 0 ] && return 0 # no GPUs registered: nothing to ask
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    [ "$nvidia_smi" = required ] || return 0
    say "nvidia-smi is not installed on this member ($want GPUs registered)"
    return 1
  fi
  gpus=$NODE_FILE.gpus
  nvidia-smi --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending \
    --format=csv,noheader,nounits >"$gpus" 2>&1
  rc=$?
  if said=$(gpu_error "$gpus"); then
    say "nvidia-smi: $said"
    return 1
  fi
  if [ "$rc" -ne 0 ]; then
    say "nvidia-smi exited with status $rc: $(head -n 1 "$gpus")"
    return 1
  fi
  seen=$(grep -c '^[0-9]' "$gpus")
  if [ "$seen" -lt "$want" ]; then
    say "nvidia-smi sees $seen of $want GPUs"
    return 1
  fi
  # index, bus id, uncorrected ECC errors (volatile), retired pages pending; [N/A] where a
  # GPU does not count them.
  while IFS=, read -r index bus ecc pages; do
    case "$index" in [0-9]*) ;; *) continue ;; esac
    ecc=$(trim "$ecc")
    case "$ecc" in '' | *[!0-9]* | 0) ;; *)
      say "$(gpu_name "$index" "$bus") has $ecc uncorrected ECC errors"
      return 1
      ;;
    esac
    if yes_ "$pages"; then
      say "$(gpu_name "$index" "$bus") has retired pages pending a reset"
      return 1
    fi
  done <"$gpus"
  # Row remapping (A100 and later; other GPUs answer [N/A] or nothing).
  rows=$NODE_FILE.rows
  nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure \
    --format=csv,noheader >"$rows" 2>&1
  if said=$(gpu_error "$rows"); then
    say "nvidia-smi: $said"
    return 1
  fi
  while IFS=, read -r bus pending failure; do
    bus=$(trim "$bus")
    case "$bus" in [0-9A-Fa-f]*:*) ;; *) continue ;; esac
    index=$(grep -m 1 -F ", $bus," "$gpus" | cut -d , -f 1)
    if yes_ "$failure"; then
      say "$(gpu_name "${index:-?}" "$bus") failed to remap a row"
      return 1
    fi
    if yes_ "$pending"; then
      say "$(gpu_name "${index:-?}" "$bus") has a row remap pending a reset"
      return 1
    fi
  done <"$rows"
  return 0
}

# DCGM's diagnostic (`dcgmi diag -r LEVEL`, through the node's nv-hostengine): no test in
# its table failed. Level 1 takes seconds; the check's timeout bounds it.
check_dcgm() {
  want=$(gpus_registered)
  [ "$want" -eq 0 ] && return 0 # no GPUs registered: nothing to ask
  if ! command -v dcgmi >/dev/null 2>&1; then
    say "dcgmi is not installed on this member ($want GPUs registered)"
    return 1
  fi
  out=$NODE_FILE.dcgm
  dcgmi diag -r "$dcgm_level" >"$out" 2>&1
  rc=$?
  # Rows are "| <test> | <result> |"; a failed test's row may be followed by rows of its
  # own, with no test named (a GPU's result, "GPU3: Fail"), and by its "| Warning | ..."
  # (or Error) row, which says why.
  test="" detail=""
  while IFS='|' read -r _ name result _; do
    name=$(trim "$name") result=$(trim "$result")
    if [ -z "$test" ]; then
      case "$result" in *Fail* | *FAIL*) test=$name ;; esac
      continue
    fi
    case "$name" in
    Warning* | Error*)
      detail=$result
      break
      ;;
    '') case "$result" in *Fail* | *FAIL*) detail=${detail:-$result} ;; esac ;;
    *) break ;;
    esac
  done <"$out"
  if [ -n "$test" ]; then
    say "dcgmi diag -r $dcgm_level: $test failed${detail:+: $detail}"
    return 1
  fi
  if said=$(gpu_error "$out"); then
    say "dcgmi: $said"
    return 1
  fi
  [ "$rc" -eq 0 ] && return 0
  say "dcgmi diag -r $dcgm_level exited with status $rc: $(grep -m 1 . "$out")"
  return 1
}

# Each path is there and takes a file: a stale network mount hangs here (the timeout
# catches it) or refuses the write.
check_mounts() {
  for path in $mounts; do
    [ -d "$path" ] || { say "$path is missing"; return 1; }
    probe="$path/.sunk-hc.$$"
    if ! err=$({ : >"$probe"; } 2>&1); then
      say "$path is not writable (${err##*: })"
      return 1
    fi
    rm -f "$probe"
  done
  return 0
}

# slurmd's spool (job scripts, private /tmp) has room.
check_spool() {
  free_kib=$(df -Pk "$spool_dir" | sed -n '2p' | tr -s ' ' | cut -d ' ' -f 4)
  case "$free_kib" in '' | *[!0-9]*)
    say "cannot read the free space of $spool_dir"
    return 1
    ;;
  esac
  [ $((free_kib / 1024)) -ge "$spool_min_mib" ] && return 0
  say "$spool_dir has $((free_kib / 1024)) MiB free, below $spool_min_mib MiB"
  return 1
}

# Called as `health-check.sh --check NAME`, under timeout(1), by run_bounded below.
if [ "${1:-}" = --check ]; then
  case "$2" in
  cpus | memory | gpus | nvidia | dcgm | mounts | spool) "check_$2" ;;
  *)
    say "unknown built-in check $2"
    exit 127
    ;;
  esac
  exit
fi

# ---- The run ---------------------------------------------------------------------------

node=${SLURMD_NODENAME:-$(uname -n)}
node=${node%%.*}
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
NODE_FILE=$work/node
export NODE_FILE
start=$(now)
deadline=$((start + budget_s))
problems=0

# Runs "$@" for at most $1 seconds with its output in $2; its status, or 124 when it did
# not finish. It runs in the background, detached from our output (slurmd reads that until
# it closes), so one stuck in the kernel (a dead NFS server) is left behind, not waited for.
run_bounded() { # seconds outfile command...
  secs=$1 out=$2
  shift 2
  rm -f "$out.rc"
  (
    timeout -k 1 "$secs" "$@" >"$out" 2>&1 </dev/null
    echo $? >"$out.rc.tmp" && mv "$out.rc.tmp" "$out.rc"
  ) </dev/null >/dev/null 2>&1 &
  give_up=$(($(now) + secs + 2))
  while [ ! -s "$out.rc" ]; do
    [ "$(now)" -ge "$give_up" ] && return 124
    sleep 0.1
  done
  return "$(cat "$out.rc")"
}

run_bounded "$scontrol_s" "$work/show" scontrol show node -o "$node"
rc=$?
line=""
[ "$rc" -eq 0 ] && line=$(grep -m 1 '^NodeName=' "$work/show")
if [ -z "$line" ]; then
  said=$(head -n 1 "$work/show" 2>/dev/null)
  case "$said" in
  *"not found"* | *"Invalid node name"*)
    say "sunk-hc: node $node is not registered yet; nothing checked this round" ;;
  *) say "sunk-hc: cannot reach slurmctld ($(clean "${said:-no answer}")); nothing checked this round" ;;
  esac
  exit 0
fi
printf '%s\n' "$line" >"$NODE_FILE"

state=$(field "$line" State)
reason=""
case "$line" in *" Reason="*) reason=${line#* Reason=} && reason=${reason%% \[*} ;; esac
drained=false
case "+$state+" in *+DRAIN+*) drained=true ;; esac
down=false # DOWN, or failed (FAIL, a flag): Slurm's or an administrator's to return
case "+$state+" in +DOWN* | *+FAIL+* | +FAIL*) down=true ;; esac
owned_by="" # the check our drain names, if the reason is ours
case "$reason" in "$OWN"*)
  owned_by=${reason#"$OWN"}
  owned_by=${owned_by%%:*}
  ;;
esac

failed="" message="" passed=" " complete=true runs=0 config_note=""
# A configuration problem: said in slurmd's log, counted, and the first one kept for the
# node's comment (below).
config() { # words
  say "sunk-hc-config: $1"
  problems=$((problems + 1))
  [ -n "$config_note" ] || config_note=$(clean "$1")
}
# Runs one check (a label and its command); records a pass, or the first failure.
check() { # name command...
  name=$1
  shift
  left=$((deadline - $(now) - 2))
  if [ "$left" -lt 1 ]; then
    say "sunk-hc: out of time before $name; nothing is lifted this round"
    complete=false
    return 1
  fi
  secs=$timeout_s
  [ "$left" -lt "$secs" ] && secs=$left
  # A file of its own: a check left behind must not answer for the next one.
  runs=$((runs + 1))
  out=$work/check.$runs
  run_bounded "$secs" "$out" "$@"
  rc=$?
  case "$rc" in
  0)
    passed="$passed$name "
    return 0
    ;;
  124 | 137)
    if [ "$secs" -lt "$timeout_s" ]; then # cut short by the budget: not the node's fault
      say "sunk-hc: out of time during $name; nothing is lifted this round"
      complete=false
      return 1
    fi
    text="timed out after ${secs}s"
    ;;
  *) text=$(clean "$(cat "$out")") && text=${text:-exited with status $rc} ;;
  esac
  failed=$name message=$text
  return 1
}

for name in $checks; do
  check "$name" sh "$self" --check "$name" || break
done
if [ -z "$failed" ] && [ "$complete" = true ] && [ -n "$scripts_dir" ]; then
  found=false
  for script in "$scripts_dir"/*; do
    [ -e "$script" ] || continue
    found=true
    base=${script##*/}
    if [ ! -f "$script" ] || [ ! -x "$script" ]; then
      config "check script $base (ConfigMap $scripts_configmap) is not an executable file; it was not run"
      continue
    fi
    if ! check "$base" "$script"; then
      [ -n "$failed" ] || break # out of time
      case "$rc" in 126 | 127)
        config "check script $base (ConfigMap $scripts_configmap) could not run (status $rc: $message); it is not counted against the node"
        failed="" message=""
        continue
        ;;
      esac
      break
    fi
  done
  if [ "$found" = false ]; then
    config "no check scripts in $scripts_dir (ConfigMap ${scripts_configmap:-?} missing or empty)"
  fi
fi

scontrol_update() { # what reason...
  if run_bounded "$scontrol_s" "$work/update" scontrol update nodename="$node" "$@"; then
    return 0
  fi
  say "sunk-hc: scontrol update $* on $node failed: $(clean "$(cat "$work/update")")"
  return 1
}

# The first configuration problem travels to the operator in the node's comment, which the
# NodeSet's HealthChecksConfigured condition reads; it is cleared by a run that went through
# every script without one. What was last written is kept in the spool, so scontrol is
# called only when it changes.
note_config() { # the comment wanted ("" clears it)
  have=$(cat "$spool_dir/.sunk-hc-config" 2>/dev/null)
  [ "$1" = "$have" ] && return 0
  scontrol_update comment="$1" && printf '%s' "$1" >"$spool_dir/.sunk-hc-config"
}
if [ -n "$config_note" ]; then
  note_config "sunk-hc-config: $config_note"
elif [ -z "$failed" ] && [ "$complete" = true ]; then
  note_config ""
fi

if [ -n "$failed" ]; then
  why="$OWN$failed: $message"
  say "sunk-hc: check $failed failed on $node: $message"
  if [ -n "$owned_by" ] && [ "$drained" = true ]; then
    if [ "$owned_by" = "$failed" ]; then
      say "sunk-hc: $node stays drained ($reason)"
    elif [ "$down" = true ]; then
      say "sunk-hc: $node is $state; left as it is"
    else
      scontrol_update state=drain reason="$why"
    fi
  elif [ "$drained" = true ] || [ "$down" = true ]; then
    say "sunk-hc: $node is $state with another owner's reason ($(clean "$reason")); left as it is"
  else
    scontrol_update state=drain reason="$why"
  fi
  exit 1
fi

if [ "$complete" = true ] && [ "$problems" -eq 0 ] && [ -n "$owned_by" ] &&
  [ "$drained" = true ] && [ "$down" = false ]; then
  case "$passed" in
  *" $owned_by "*) ;;
  *) [ "$owned_by" = "$VERIFY" ] || {
    say "sunk-hc: $node is drained by check $owned_by, which is no longer run; resume it by hand once it is fixed"
    exit 1
  } ;;
  esac
  scontrol_update state=resume && say "sunk-hc: every check passed on $node; its drain ($reason) is lifted"
  exit 1 # said something slurmd should log
fi
[ "$problems" -eq 0 ] && [ "$complete" = true ] && exit 0
exit 1
