"""The node health check runner (charts/slurm/files/health-check.sh), run by sh as slurmd
would run it, against a stand-in `scontrol` that answers `show node` from a fixture line
and records every `update`, with stand-in checks (scripts, cgroup files, devices).

What each test catches is said in its docstring: the runner's rules are that a failing
check drains with the reason `sunk-hc: <check>: <message>`, that only its own drains are
lifted and only after a clean run, and that nothing it waits on may outlast its bound."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "charts" / "slurm" / "files" / "health-check.sh"
NODE = "compute-255-001"

SCONTROL = r"""#!/bin/sh
# show node: the fixture line (or no answer); update: one line per call, arguments joined by |.
here=$(dirname "$0")
case "$1" in
show)
  [ -e "$here/hang" ] && exec sleep 100
  if [ -e "$here/unreachable" ]; then
    echo "slurm_load_node error: Unable to contact slurm controller (connect failure)" >&2
    exit 1
  fi
  if [ -e "$here/unknown" ]; then
    echo "Node $4 not found" >&2
    exit 1
  fi
  [ -e "$here/warn" ] && echo "scontrol: warning: Invalid environment variable" >&2
  cat "$here/node"
  ;;
update)
  shift
  line=""
  for a in "$@"; do line="$line${line:+|}$a"; done
  printf '%s\n' "$line" >>"$here/calls"
  ;;
esac
"""


def node_line(
    state: str = "IDLE", reason: str = "", cpus: int = 1, memory_mib: int = 1, gres: str = "(null)"
) -> str:
    """A `scontrol show node -o` line as Slurm 24.11 prints it (Reason last, with who and when)."""
    line = (
        f"NodeName={NODE} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv={cpus} CPUTot={cpus} "
        f"CPULoad=0.01 AvailableFeatures=part_main ActiveFeatures=part_main Gres={gres} "
        f"NodeAddr=10.0.255.1 NodeHostName={NODE} Version=24.11.5 OS=Linux 6.1.0-28-amd64 #1 SMP "
        f"RealMemory={memory_mib} AllocMem=0 FreeMem=900 Sockets={cpus} Boards=1 "
        f"State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
        "Partitions=main BootTime=2026-11-29T05:00:00 SlurmdStartTime=2026-11-29T05:01:00 "
        "LastBusyTime=2026-11-29T05:02:00 ResumeAfterTime=None CfgTRES=cpu=1,mem=1M,billing=1 "
        "AllocTRES= CurrentWatts=0 AveWatts=0"
    )
    if reason:
        line += f" Reason={reason} [root@2026-11-29T05:03:00]"
    return line


@dataclass
class Run:
    code: int
    output: str
    calls: list[str]
    seconds: float


class Node:
    """One member's world: its Slurm record, its checks and the runner's settings."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        scontrol = self.bin / "scontrol"
        scontrol.write_text(SCONTROL)
        scontrol.chmod(0o755)
        self.scripts = tmp_path / "scripts"
        self.scripts.mkdir()
        self.cgroup = tmp_path / "cgroup"
        self.cgroup.mkdir()
        self.dev = tmp_path / "dev"
        self.dev.mkdir()
        self.meminfo = tmp_path / "meminfo"
        self.meminfo.write_text("MemTotal:       16384000 kB\nMemFree:         1000 kB\n")
        self.record(node_line())
        self.settings: dict[str, str] = {
            "checks": "",
            "timeout_s": "5",
            "budget_s": "20",
            "scontrol_s": "2",
            "scripts_dir": str(self.scripts),
            "scripts_configmap": "site-checks",
            "cgroup_root": str(self.cgroup),
            "meminfo": str(self.meminfo),
            "dev_dir": str(self.dev),
            "spool_dir": str(tmp_path),
        }

    def record(self, line: str) -> None:
        (self.bin / "node").write_text(line + "\n")

    def script(self, name: str, body: str, mode: int = 0o755) -> None:
        path = self.scripts / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(mode)

    def flag(self, name: str) -> None:
        (self.bin / name).touch()

    def run(self, timeout: float = 60) -> Run:
        settings = self.root / "settings"
        settings.write_text("".join(f"{k}='{v}'\n" for k, v in self.settings.items()))
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "SLURMD_NODENAME": NODE,
            "SUNK_HC_SETTINGS": str(settings),
        }
        began = time.monotonic()
        done = subprocess.run(
            ["sh", str(RUNNER)], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        calls_file = self.bin / "calls"
        calls = calls_file.read_text().splitlines() if calls_file.exists() else []
        return Run(done.returncode, done.stdout + done.stderr, calls, time.monotonic() - began)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def drain(reason: str) -> str:
    return f"nodename={NODE}|state=drain|reason={reason}"


CLEARED = f"nodename={NODE}|comment="


def says_no_scripts(call: str) -> bool:
    """The comment update naming the missing ConfigMap (the path in it is the test's own)."""
    return call.startswith(f"{CLEARED}sunk-hc-config: no check scripts in ") and call.endswith(
        "(ConfigMap site-checks missing or empty)"
    )


RESUME = f"nodename={NODE}|state=resume"


# ---- Draining ------------------------------------------------------------------------


def test_a_failing_check_drains_its_node_with_the_owned_prefix_and_its_first_line(node: Node) -> None:
    """Catches: a drain without the `sunk-hc:` prefix (never lifted again) or without the
    check's own words."""
    node.script("10-gpu", 'echo "GPU 3 fell off the bus"; echo "more detail"; exit 1')
    run = node.run()
    assert run.calls == [drain("sunk-hc: 10-gpu: GPU 3 fell off the bus")]
    assert run.code == 1  # so slurmd logs what was said


def test_a_hanging_check_is_killed_and_counts_as_failed(node: Node) -> None:
    """Catches: a hang read as healthy, or a runner that waits for it until slurmd's kill."""
    node.settings["timeout_s"] = "1"
    node.script("10-hang", "sleep 100")
    run = node.run()
    assert run.calls == [drain("sunk-hc: 10-hang: timed out after 1s")]
    assert run.seconds < 6


def test_a_check_that_ignores_sigterm_is_still_bounded(node: Node) -> None:
    """Catches: a check trapping TERM (or stuck below it) holding the runner past its bound."""
    node.settings["timeout_s"] = "1"
    node.script("10-stubborn", "trap '' TERM; while :; do sleep 1; done")
    run = node.run()
    assert run.calls == [drain("sunk-hc: 10-stubborn: timed out after 1s")]
    assert run.seconds < 8


def test_the_reason_is_one_clean_line_of_bounded_length(node: Node) -> None:
    """Catches: quotes, brackets or a second line in the reason, which Slurm shows cut."""
    node.script(
        "20-noisy", 'printf \'%s\\n\' "bad \\"disk\\" [sda] $(printf "x%.0s" $(seq 300))" second; exit 2'
    )
    run = node.run()
    (call,) = run.calls
    reason = call.split("|reason=", 1)[1]
    assert reason.startswith("sunk-hc: 20-noisy: bad disk sda xxxx")
    assert len(reason) <= len("sunk-hc: 20-noisy: ") + 160
    assert not set(reason) & set("\"'[]\n")


def test_checks_run_in_name_order_and_the_first_failure_names_the_drain(node: Node) -> None:
    """Catches: scripts run in directory order, or a later failure overwriting the first."""
    node.script("20-second", "echo second; exit 1")
    node.script("10-first", "echo first; exit 1")
    assert node.run().calls == [drain("sunk-hc: 10-first: first")]


def test_a_different_failing_check_replaces_our_own_reason(node: Node) -> None:
    """Catches: a node kept under a stale reason after the first fault was fixed and
    another appeared."""
    node.record(node_line("IDLE+DRAIN", "sunk-hc: 10-gpu: GPU 3 fell off the bus"))
    node.script("10-gpu", "exit 0")
    node.script("20-ib", "echo ib0 down; exit 1")
    assert node.run().calls == [drain("sunk-hc: 20-ib: ib0 down")]


def test_the_same_failing_check_leaves_its_drain_as_it_is(node: Node) -> None:
    """Catches: rewriting the reason every interval, which resets Slurm's drain time."""
    node.record(node_line("IDLE+DRAIN", "sunk-hc: 10-gpu: GPU 3 fell off the bus"))
    node.script("10-gpu", "echo GPU 3 fell off the bus; exit 1")
    assert node.run().calls == []


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("IDLE+DRAIN", "bad DIMM, ticket 42"),
        ("MIXED+DRAIN", "sunk: NodeSet gpu scales in"),
        ("IDLE+DRAIN", "sunk: Pod compute-255-001 is being deleted"),
        ("DOWN+NOT_RESPONDING", "Not responding"),
        ("DOWN+DRAIN", "Kill task failed"),
    ],
)
def test_a_failing_check_never_rewrites_another_owners_drain_or_down(
    node: Node, state: str, reason: str
) -> None:
    """Catches: an admin's, the operator's or Slurm's reason replaced by ours (and then
    lifted by our next clean run)."""
    node.record(node_line(state, reason))
    node.script("10-gpu", "echo GPU gone; exit 1")
    run = node.run()
    assert run.calls == []
    assert "another owner's reason" in run.output


# ---- Lifting ---------------------------------------------------------------------------


def test_a_clean_run_lifts_the_drain_its_own_check_set(node: Node) -> None:
    """Catches: a node our check drained never coming back once the fault is fixed."""
    node.record(node_line("IDLE+DRAIN", "sunk-hc: 10-gpu: GPU 3 fell off the bus"))
    node.script("10-gpu", "exit 0")
    assert node.run().calls == [RESUME]


def test_a_clean_run_lifts_a_busy_nodes_drain_too(node: Node) -> None:
    """Catches: a drain left on a node whose jobs kept it MIXED+DRAIN meanwhile."""
    node.record(node_line("MIXED+DRAIN", "sunk-hc: 10-gpu: GPU 3 fell off the bus"))
    node.script("10-gpu", "exit 0")
    assert node.run().calls == [RESUME]


def test_a_clean_run_returns_a_node_the_operator_handed_over(node: Node) -> None:
    """Catches: the operator's hand-over drain (`sunk-hc: verify:`) never being lifted."""
    node.record(node_line("IDLE+DRAIN", "sunk-hc: verify: NodeSet gpu wants it back"))
    node.script("10-gpu", "exit 0")
    assert node.run().calls == [RESUME]


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("IDLE+DRAIN", "bad DIMM, ticket 42"),
        ("IDLE+DRAIN", "sunk: NodeSet gpu scales in"),
        ("IDLE+DRAIN", "NHC: check_fs_mount: /scratch not mounted"),
        ("DOWN+NOT_RESPONDING", "Not responding"),
        ("DOWN+DRAIN", "sunk-hc: 10-gpu: GPU 3 fell off the bus"),
        ("IDLE+DRAIN+FAIL", "sunk-hc: 10-gpu: GPU 3 fell off the bus"),
    ],
)
def test_a_clean_run_never_lifts_another_owners_drain_or_a_down_node(
    node: Node, state: str, reason: str
) -> None:
    """Catches: an admin's (or the operator's, or Slurm's) drain undone by a passing check,
    or a DOWN node resumed."""
    node.record(node_line(state, reason))
    node.script("10-gpu", "exit 0")
    assert node.run().calls == []


def test_a_clean_run_does_not_lift_a_drain_named_after_a_check_no_longer_run(node: Node) -> None:
    """Catches: a node returned without the check that drained it ever passing again."""
    node.record(node_line("IDLE+DRAIN", "sunk-hc: 30-removed: disk gone"))
    node.script("10-gpu", "exit 0")
    run = node.run()
    assert run.calls == []
    assert "no longer run" in run.output


def test_a_healthy_undrained_node_is_left_alone_and_the_run_is_quiet(node: Node) -> None:
    """Catches: a resume (or any update) sent on every clean run."""
    node.script("10-gpu", "exit 0")
    run = node.run()
    assert run.calls == [] and run.code == 0


# ---- When Slurm cannot be asked -------------------------------------------------------------


def test_slurmctld_unreachable_does_nothing_and_exits_0(node: Node) -> None:
    """Catches: a node drained (or its checks run for nothing) because slurmctld was away."""
    node.flag("unreachable")
    node.script("10-gpu", f"touch {node.root}/ran; exit 1")
    run = node.run()
    assert run.code == 0 and run.calls == []
    assert not (node.root / "ran").exists()
    assert "cannot reach slurmctld" in run.output


def test_a_node_not_registered_yet_does_nothing(node: Node) -> None:
    """Catches: slurmd's first run, before it registers, taken for a failure."""
    node.flag("unknown")
    node.script("10-gpu", "exit 1")
    run = node.run()
    assert run.code == 0 and run.calls == []
    assert "not registered yet" in run.output


def test_a_warning_before_the_record_is_not_taken_for_it(node: Node) -> None:
    """Catches: a warning scontrol prints first read as the node's record (no state, no
    reason: an own drain never lifted, or another owner's drain taken for none)."""
    node.flag("warn")
    node.record(node_line("IDLE+DRAIN", "bad DIMM, ticket 42"))
    node.script("10-gpu", "echo GPU gone; exit 1")
    assert node.run().calls == []


def test_a_hanging_scontrol_is_bounded_and_does_nothing(node: Node) -> None:
    """Catches: the runner waiting on scontrol until slurmd kills it (the start-up case)."""
    node.flag("hang")
    node.script("10-gpu", "exit 1")
    run = node.run()
    assert run.code == 0 and run.calls == []
    assert run.seconds < 7


# ---- Configuration problems ---------------------------------------------------------------


def test_no_scripts_where_the_configmap_should_be_drains_nothing_and_says_so(node: Node) -> None:
    """Catches: a missing ConfigMap taken for a node fault (a whole NodeSet drained)."""
    node.record(node_line("IDLE+DRAIN", "sunk-hc: verify: NodeSet gpu wants it back"))
    run = node.run()
    assert len(run.calls) == 1 and says_no_scripts(run.calls[0])  # no drain lifted: not every check ran
    assert "sunk-hc-config: no check scripts" in run.output and "site-checks" in run.output
    assert run.code == 1  # so slurmd logs it


def test_a_script_that_is_not_executable_drains_nothing_and_says_so(node: Node) -> None:
    """Catches: a wrong file mode taken for a node fault."""
    node.script("10-gpu", "exit 1", mode=0o644)
    run = node.run()
    assert [c for c in run.calls if "state=" in c] == []
    assert "sunk-hc-config: check script 10-gpu" in run.output


def test_a_script_whose_interpreter_is_missing_drains_nothing_and_says_so(node: Node) -> None:
    """Catches: a script written for an interpreter the image lacks draining every node."""
    path = node.scripts / "10-python"
    path.write_text("#!/usr/bin/python9\nprint('hi')\n")
    path.chmod(0o755)
    run = node.run()
    assert [c for c in run.calls if "state=" in c] == []
    assert "sunk-hc-config: check script 10-python" in run.output and "127" in run.output


def test_a_configuration_problem_is_written_to_the_nodes_comment_once_and_cleared_once_fixed(
    node: Node,
) -> None:
    """Catches: a problem the operator cannot see (the NodeSet's HealthChecksConfigured
    condition reads the comment), scontrol called on every run though nothing changed, and
    a comment left once the scripts are back."""
    first = node.run().calls
    assert len(first) == 1 and says_no_scripts(first[0])
    assert node.run().calls == first  # unchanged: scontrol not called again
    node.script("10-ok", "exit 0")
    run = node.run()
    assert run.calls == [*first, CLEARED] and run.code == 0
    assert node.run().calls == [*first, CLEARED]


def test_a_failing_check_before_the_scripts_leaves_the_comment_as_it_was(node: Node) -> None:
    """Catches: a comment cleared by a run that never looked at the scripts."""
    node.run()  # no scripts: the comment says so
    node.settings["checks"] = "memory"
    node.record(node_line(memory_mib=999_999_999))
    run = node.run()
    assert CLEARED not in run.calls and any("state=drain" in c for c in run.calls), run.calls


# ---- The bound -----------------------------------------------------------------------------


def test_the_whole_run_stays_within_its_budget_and_lifts_nothing_when_it_runs_out(node: Node) -> None:
    """Catches: slow checks adding up past slurmd's 60 s kill (scaled down here: a 4 s
    budget), and a drain lifted on a run that did not check everything."""
    node.settings.update(timeout_s="3", budget_s="4")
    node.record(node_line("IDLE+DRAIN", "sunk-hc: 30-c: was failing"))
    for name in ("10-a", "20-b", "30-c"):
        node.script(name, "sleep 1.5")
    run = node.run()
    assert run.calls == []
    assert "out of time" in run.output
    assert run.seconds < 4 + 2 + 2  # budget, plus the scontrol call's bound, plus slack


# ---- Built-in checks ----------------------------------------------------------------------------


def test_cpus_fails_when_the_cgroup_quota_is_below_what_slurm_registered(node: Node) -> None:
    """Catches: a member limited to fewer CPUs than Slurm hands out."""
    node.settings.update(checks="cpus", scripts_dir="")
    (node.cgroup / "cpu.max").write_text("100000 100000\n")
    node.record(node_line(cpus=2))
    assert node.run().calls == [drain("sunk-hc: cpus: sees 1 CPUs, registered with 2")]


def test_cpus_passes_when_the_member_sees_what_slurm_registered(node: Node) -> None:
    """Catches: the quota misread (e.g. as microseconds) failing a healthy member."""
    node.settings.update(checks="cpus", scripts_dir="")
    (node.cgroup / "cpu.max").write_text("250000 100000\n")
    node.record(node_line(cpus=1))
    assert node.run().calls == []


def test_memory_fails_when_the_cgroup_limit_is_below_realmemory(node: Node) -> None:
    """Catches: memory that shrank (a DIMM lost, a smaller limit) going unnoticed."""
    node.settings.update(checks="memory", scripts_dir="")
    (node.cgroup / "memory.max").write_text(f"{1024 * 1048576}\n")
    node.record(node_line(memory_mib=2048))
    assert node.run().calls == [drain("sunk-hc: memory: sees 1024 MiB of memory, registered with 2048 MiB")]


def test_memory_reads_memtotal_when_the_cgroup_has_no_limit(node: Node) -> None:
    """Catches: `max` (no limit) read as zero."""
    node.settings.update(checks="memory", scripts_dir="")
    (node.cgroup / "memory.max").write_text("max\n")
    node.record(node_line(memory_mib=16000))  # MemTotal: 16000 MiB
    assert node.run().calls == []


def test_gpus_fails_when_fewer_devices_are_there_than_the_gres_says(node: Node) -> None:
    """Catches: a GPU fallen off the bus while the node keeps taking GPU jobs."""
    node.settings.update(checks="gpus", scripts_dir="")
    for dev in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl"):
        (node.dev / dev).touch()
    node.record(node_line(gres="gpu:h100:4(S:0-1)"))
    assert node.run().calls == [drain(f"sunk-hc: gpus: sees 3 of 4 GPUs ({node.dev}/nvidiaN devices)")]


def test_gpus_is_skipped_on_a_node_without_gpu_gres(node: Node) -> None:
    """Catches: every CPU-only node drained for having no /dev/nvidia*."""
    node.settings.update(checks="gpus", scripts_dir="")
    node.record(node_line(gres="(null)"))
    assert node.run().calls == []


def test_mounts_fails_on_a_missing_path_and_on_one_that_takes_no_file(node: Node, tmp_path: Path) -> None:
    """Catches: jobs sent to a node whose shared storage is gone or read-only."""
    node.settings.update(checks="mounts", scripts_dir="", mounts=f"{tmp_path} /nonexistent/data")
    assert node.run().calls == [drain("sunk-hc: mounts: /nonexistent/data is missing")]
    node.settings["mounts"] = "/proc"
    (node.bin / "calls").unlink()
    (call,) = node.run().calls
    assert call.startswith(drain("sunk-hc: mounts: /proc is not writable"))


def test_mounts_passes_and_leaves_no_probe_file_behind(node: Node, tmp_path: Path) -> None:
    """Catches: probe files piling up on shared storage."""
    data = tmp_path / "data"
    data.mkdir()
    node.settings.update(checks="mounts", scripts_dir="", mounts=str(data))
    assert node.run().calls == []
    assert list(data.iterdir()) == []


def test_spool_fails_below_its_free_space(node: Node, tmp_path: Path) -> None:
    """Catches: a full spool (job scripts, private /tmp) failing every job that lands."""
    node.settings.update(checks="spool", scripts_dir="", spool_dir=str(tmp_path), spool_min_mib="999999999")
    (call,) = node.run().calls
    assert call.startswith(drain(f"sunk-hc: spool: {tmp_path} has ")) and "below 999999999 MiB" in call


def test_built_in_checks_run_before_the_scripts(node: Node) -> None:
    """Catches: a script's failure hiding the built-in check that explains it."""
    node.settings["checks"] = "cpus"
    (node.cgroup / "cpu.max").write_text("100000 100000\n")
    node.record(node_line(cpus=2))
    node.script("10-gpu", "echo later; exit 1")
    assert node.run().calls == [drain("sunk-hc: cpus: sees 1 CPUs, registered with 2")]


# ---- GPU checks: nvidia-smi and dcgmi ------------------------------------------------------
# Stand-ins on PATH answer from tests/unit/samples/gpu (see its README: the documented
# formats, not recordings), and note the arguments they were called with.

GPU_SAMPLES = Path(__file__).parent / "samples" / "gpu"
GPU_TOOL = r"""#!/bin/sh
here=$(dirname "$0")
me=$(basename "$0")
printf '%s\n' "$*" >>"$here/$me.args"
[ -e "$here/$me.hang" ] && exec sleep 100
case "$1" in
--query-gpu=*) kind=query-gpu ;;
--query-remapped-rows=*) kind=remapped-rows ;;
diag) kind=diag ;;
*)
  echo "$me: unexpected arguments: $*" >&2
  exit 2
  ;;
esac
[ -e "$here/$me.$kind" ] && cat "$here/$me.$kind"
exit "$(cat "$here/$me.$kind.rc" 2>/dev/null || echo 0)"
"""
QUERY_GPU = (
    "--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending "
    "--format=csv,noheader,nounits"
)
QUERY_ROWS = (
    "--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure --format=csv,noheader"
)
H100X8 = "gpu:h100:8(S:0-1)"
HEALTHY = {
    "query-gpu": "nvidia-smi-query-gpu-8-healthy.csv",
    "remapped-rows": "nvidia-smi-remapped-rows-8-healthy.csv",
}
# The runner looks in the usual directories too: where the machine running these tests has
# the real tool there, a test of its absence cannot run.
REAL_NVIDIA_SMI = any(
    Path(d, "nvidia-smi").exists()
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
)
REAL_DCGMI = any(
    Path(d, "dcgmi").exists()
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
)


def gpu_tool(node: Node, tool: str, answers: dict[str, str], rc: dict[str, int] | None = None) -> None:
    """Put the stand-in `tool` on the member's PATH, answering each kind of call with a sample."""
    path = node.bin / tool
    path.write_text(GPU_TOOL)
    path.chmod(0o755)
    for kind, sample in answers.items():
        (node.bin / f"{tool}.{kind}").write_text((GPU_SAMPLES / sample).read_text())
    for kind, status in (rc or {}).items():
        (node.bin / f"{tool}.{kind}.rc").write_text(f"{status}\n")


def gpu_node(node: Node, checks: str, gres: str = H100X8) -> Node:
    node.settings.update(checks=checks, scripts_dir="")
    node.record(node_line(gres=gres))
    return node


def args_of(node: Node, tool: str) -> list[str]:
    path = node.bin / f"{tool}.args"
    return path.read_text().splitlines() if path.exists() else []


def test_nvidia_passes_eight_healthy_gpus_with_the_documented_queries(node: Node) -> None:
    """Catches: a healthy GPU node drained, or query fields nvidia-smi does not know (it
    would refuse the whole query on a real machine)."""
    gpu_tool(gpu_node(node, "nvidia"), "nvidia-smi", HEALTHY)
    run = node.run()
    assert run.calls == [] and run.code == 0, run.output
    assert args_of(node, "nvidia-smi") == [QUERY_GPU, QUERY_ROWS]


def test_nvidia_passes_gpus_that_do_not_report_ecc_or_remapping(node: Node) -> None:
    """Catches: [N/A] (MIG on, a part that does not count) read as an error count."""
    gpu_tool(gpu_node(node, "nvidia"), "nvidia-smi", {"query-gpu": "nvidia-smi-query-gpu-8-not-reported.csv"})
    assert node.run().calls == []


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        ({"query-gpu": "nvidia-smi-query-gpu-7-of-8.csv"}, "nvidia-smi sees 7 of 8 GPUs"),
        (
            {**HEALTHY, "query-gpu": "nvidia-smi-query-gpu-ecc.csv"},
            "GPU 3 (0000:5D:00.0) has 2 uncorrected ECC errors",
        ),
        (
            {**HEALTHY, "query-gpu": "nvidia-smi-query-gpu-retired-pending.csv"},
            "GPU 6 (0000:BA:00.0) has retired pages pending a reset",
        ),
        (
            {**HEALTHY, "remapped-rows": "nvidia-smi-remapped-rows-pending.csv"},
            "GPU 4 (0000:9A:00.0) has a row remap pending a reset",
        ),
        (
            {**HEALTHY, "remapped-rows": "nvidia-smi-remapped-rows-failure.csv"},
            "GPU 1 (0000:2A:00.0) failed to remap a row",
        ),
    ],
    ids=["7-of-8", "ecc", "retired-pages", "remap-pending", "remap-failure"],
)
def test_nvidia_drains_a_gpu_fault_naming_the_gpu(node: Node, answers: dict[str, str], reason: str) -> None:
    """Catches: a GPU gone from the driver's list, one with uncorrected ECC errors, or one
    waiting for a reset to retire pages or remap rows (or failed to) left taking jobs, or a
    reason that does not say which GPU."""
    gpu_tool(gpu_node(node, "nvidia"), "nvidia-smi", answers)
    assert node.run().calls == [drain(f"sunk-hc: nvidia: {reason}")]


def test_nvidia_drains_when_nvidia_smi_cannot_reach_a_gpu(node: Node) -> None:
    """Catches: a lost GPU (nvidia-smi's "Unable to determine the device handle", status 15)
    passed over, or reported without nvidia-smi's own words."""
    gpu_tool(
        gpu_node(node, "nvidia"),
        "nvidia-smi",
        {"query-gpu": "nvidia-smi-query-gpu-lost.txt"},
        {"query-gpu": 15},
    )
    assert node.run().calls == [
        drain(
            "sunk-hc: nvidia: nvidia-smi: "
            "Unable to determine the device handle for GPU0000:5D:00.0: Unknown Error"
        )
    ]


def test_nvidia_drains_when_the_driver_does_not_answer(node: Node) -> None:
    """Catches: a member whose driver is gone (nvidia-smi status 9) counted healthy."""
    gpu_tool(
        gpu_node(node, "nvidia"), "nvidia-smi", {"query-gpu": "nvidia-smi-no-driver.txt"}, {"query-gpu": 9}
    )
    (call,) = node.run().calls
    assert call.startswith(
        drain("sunk-hc: nvidia: nvidia-smi: NVIDIA-SMI has failed because it couldn t communicate")
    )


def test_nvidia_drains_on_an_unexplained_error_status(node: Node) -> None:
    """Catches: a non-zero status without a known error line read as healthy."""
    gpu_tool(
        gpu_node(node, "nvidia"),
        "nvidia-smi",
        {"query-gpu": "nvidia-smi-query-gpu-8-healthy.csv"},
        {"query-gpu": 255},
    )
    assert node.run().calls == [
        drain("sunk-hc: nvidia: nvidia-smi exited with status 255: 0, 00000000:18:00.0, 0, No")
    ]


def test_a_hanging_nvidia_smi_is_killed_at_the_timeout_and_counts_as_failed(node: Node) -> None:
    """Catches: nvidia-smi stuck on a wedged GPU holding the runner until slurmd's kill, or
    read as healthy."""
    node.settings["timeout_s"] = "1"
    gpu_tool(gpu_node(node, "nvidia"), "nvidia-smi", HEALTHY)
    node.flag("nvidia-smi.hang")
    run = node.run()
    assert run.calls == [drain("sunk-hc: nvidia: timed out after 1s")]
    assert run.seconds < 6


def test_nvidia_and_dcgm_are_skipped_on_a_node_without_gpu_gres(node: Node) -> None:
    """Catches: a CPU-only node drained for having no GPUs to ask about (the tools are not
    even called)."""
    gpu_node(node, "nvidia dcgm", gres="(null)")
    gpu_tool(node, "nvidia-smi", {"query-gpu": "nvidia-smi-query-gpu-lost.txt"}, {"query-gpu": 15})
    gpu_tool(node, "dcgmi", {"diag": "dcgmi-diag-r1-fail.txt"}, {"diag": 226})
    assert node.run().calls == []
    assert args_of(node, "nvidia-smi") == [] and args_of(node, "dcgmi") == []


@pytest.mark.skipif(REAL_NVIDIA_SMI, reason="this machine has nvidia-smi where the runner looks")
def test_nvidia_without_nvidia_smi_is_skipped_on_auto_and_fails_when_required(node: Node) -> None:
    """Catches: every GPU member drained where the image has no nvidia-smi although the
    values only asked to use it where present (auto), and the opposite: a member without it
    passing when the values require it."""
    gpu_node(node, "nvidia")
    assert node.run().calls == []
    node.settings["nvidia_smi"] = "required"
    assert node.run().calls == [
        drain("sunk-hc: nvidia: nvidia-smi is not installed on this member (8 GPUs registered)")
    ]


def test_dcgm_passes_a_clean_level_1_diagnostic(node: Node) -> None:
    """Catches: a passing diagnostic read as failed (the table's Pass rows, its metadata)."""
    gpu_tool(gpu_node(node, "dcgm"), "dcgmi", {"diag": "dcgmi-diag-r1-pass.txt"})
    run = node.run()
    assert run.calls == [] and run.code == 0, run.output
    assert args_of(node, "dcgmi") == ["diag -r 1"]


def test_dcgm_drains_with_the_failed_test_and_its_warning(node: Node) -> None:
    """Catches: a failed DCGM test taken for a pass, or a reason that does not say which
    test failed and why."""
    gpu_tool(gpu_node(node, "dcgm"), "dcgmi", {"diag": "dcgmi-diag-r1-fail.txt"}, {"diag": 226})
    assert node.run().calls == [
        drain(
            "sunk-hc: dcgm: dcgmi diag -r 1: Page Retirement/Row Remap failed: "
            "GPU 3 There is a pending row remap on GPU 3."
        )
    ]


def test_dcgm_drains_when_dcgmi_cannot_run_the_diagnostic(node: Node) -> None:
    """Catches: a diagnostic that never ran (no nv-hostengine) counted as passed."""
    gpu_tool(gpu_node(node, "dcgm"), "dcgmi", {"diag": "dcgmi-diag-no-hostengine.txt"}, {"diag": 255})
    assert node.run().calls == [
        drain(
            "sunk-hc: dcgm: dcgmi diag -r 1 exited with status 255: "
            "Error: unable to establish a connection to the specified host: localhost"
        )
    ]


@pytest.mark.skipif(REAL_DCGMI, reason="this machine has dcgmi where the runner looks")
def test_dcgm_without_dcgmi_fails_on_a_gpu_node(node: Node) -> None:
    """Catches: a diagnostic the values turned on silently not run."""
    gpu_node(node, "dcgm")
    assert node.run().calls == [
        drain("sunk-hc: dcgm: dcgmi is not installed on this member (8 GPUs registered)")
    ]


def test_a_hanging_dcgmi_is_killed_at_the_timeout_and_counts_as_failed(node: Node) -> None:
    """Catches: a diagnostic that never ends holding the runner past its bound."""
    node.settings["timeout_s"] = "1"
    gpu_tool(gpu_node(node, "dcgm"), "dcgmi", {"diag": "dcgmi-diag-r1-pass.txt"})
    node.flag("dcgmi.hang")
    run = node.run()
    assert run.calls == [drain("sunk-hc: dcgm: timed out after 1s")]
    assert run.seconds < 6


def test_a_clean_gpu_run_lifts_the_drain_the_nvidia_check_set(node: Node) -> None:
    """Catches: a node the GPU check drained never returned once the GPU is fixed (reset)."""
    gpu_node(node, "gpus nvidia")
    node.record(
        node_line(
            "IDLE+DRAIN", "sunk-hc: nvidia: GPU 4 (0000:9A:00.0) has a row remap pending a reset", gres=H100X8
        )
    )
    for n in range(8):
        (node.dev / f"nvidia{n}").touch()
    gpu_tool(node, "nvidia-smi", HEALTHY)
    assert node.run().calls == [RESUME]
