"""Why a Pod may not go somewhere (R4.3): no Slurm node can host it (`placement_problem`,
before a submit), Slurm's own view rules the node out (`slurm_node_problem`, at bind
time), or the job's allocation cannot hold the Pod (`allocation_problem`). Each answers
in words, said on the Pod."""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet

from sunk.slurm.models import SlurmJob, SlurmNode, gres_counts


def placement_problem(
    required: tuple[str, ...],
    excluded: dict[str, str],
    avoid: tuple[str, ...],
    slurm_nodes: AbstractSet[str],
    largest: str | None = None,
) -> str | None:
    """Why no job should be submitted for the Pod now (R4.3), or None. `excluded` maps the
    Slurm nodes the Pod's own constraints rule out to the reason; `avoid` lists nodes where
    a placement was rejected before; `required` are the nodes the Pod insists on;
    `largest`, the Slurm node on the Node with the most allocatable: when no node can host
    the Pod, its reason comes first, so a Pod too big for every Node hears what the largest
    lacks."""
    ruled_out = set(excluded) | set(avoid)
    unusable_required = sorted(set(required) & ruled_out)
    if unusable_required:
        why = "; ".join(
            f"{n}: {excluded.get(n, 'a placement there was rejected before')}" for n in unusable_required
        )
        return f"required Slurm node(s) cannot host this Pod ({why})"
    if slurm_nodes and not slurm_nodes - ruled_out:
        reasons = sorted({excluded.get(n, f"a placement on {n} was rejected before") for n in slurm_nodes})
        if largest in excluded:
            lead = excluded[largest]
            reasons = [f"{lead} (the largest Node)"] + [r for r in reasons if r != lead]
        return "no Slurm node can host this Pod: " + "; ".join(reasons[:5])
    return None


def slurm_node_problem(name: str, state: SlurmNode | None) -> str | None:
    """Why Slurm's own view rules node `name` out for a binding (unknown, down, draining),
    or None (R4.3)."""
    if state is None:
        return f"Slurm does not know node {name}"
    if state.draining:
        flags = "+".join((state.state, *state.flags))
        return f"Slurm node {name} is {flags} ({state.reason or 'no reason given'})"
    return None


_MIB_PER = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


def allocation_problem(
    job: SlurmJob, cpus: int, memory_mib: int, gres: tuple[tuple[str, int], ...]
) -> str | None:
    """Why the job's allocation cannot hold the Pod (R4.3, issue #12), or None: fewer CPUs,
    less memory or fewer GRES than the Pod asks for (say, its owner shrank the pending job
    with `scontrol update`). Slurm may give more (whole cores); that is fine. What Slurm
    does not report is not judged."""
    tres = dict(part.split("=", 1) for part in job.allocated.split(",") if "=" in part)
    short = []
    if tres.get("cpu", "").isdigit() and int(tres["cpu"]) < cpus:
        short.append(f"{tres['cpu']} CPUs for {cpus}")
    memory = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)", tres.get("mem", ""))
    if memory:
        mib = float(memory[1]) * _MIB_PER[memory[2] or "M"]
        if mib < memory_mib:
            short.append(f"{tres['mem']} of memory for {memory_mib} MiB")
    held: dict[str, int] = {}
    for key, value in tres.items():  # "gres/gpu=2", "gres/gpu:a100=2" when Slurm tracks GRES as TRES
        if key.startswith("gres/") and value.isdigit():
            held[key[5:]] = max(held.get(key[5:], 0), int(value))
    from_detail: dict[str, int] = {}
    for name, count in (pair for detail in job.gres_detail for pair in gres_counts(detail)):
        base = name.split(":", 1)[0]
        from_detail[name] = from_detail.get(name, 0) + count
        if base != name:
            from_detail[base] = from_detail.get(base, 0) + count  # a typed GPU is also a GPU
    for name, count in from_detail.items():
        held[name] = max(held.get(name, 0), count)
    if held:  # Slurm reports the job's GRES: judge them
        for name, count in gres:
            if held.get(name, 0) < count:
                short.append(f"{held.get(name, 0)} {name} for {count}")
    if not short:
        return None
    given = ", ".join(short)
    return (
        f"Slurm job {job.job_id} was given {given} the Pod requests (was the job changed after submission?)"
    )
