"""What to do next, decided without I/O (R4, R5, R8.2, R9).

The controllers gather what the caches know (the Pod, the jobs that claim it, what this
process did lately) and ask these modules; they then carry the answer out. Keeping the
decisions here, as plain functions of their inputs, is what lets every branch be tested
with a table of cases (tests/unit/test_decide.py and one test file per planner). Each
module answers one question:

- `pod_state`: what does a Pod's own object say (finished, refused for good, its job ID)?
- `claims`: a job names this Pod key; may it live (`for_claim`)?
- `steps`: the Pod exists; what is its next step (`for_pod`)?
- `problems`: why may a Pod not go somewhere (no Slurm node can host it, Slurm rules the
  node out, the job's allocation cannot hold it)?
- `packing`: --placement=pack; which nodes should a new job leave out?
- `drains`: when must a node be drained (KillWait, a cordon), and what Event explains a
  drained or down node, on which object?
- `claim_plan`, `pod_plan`, `pod_actions`, `group_plan` (with `group_bind`: may a gang's
  members all be bound?), `slurm_node`: the planners, which turn those answers into the
  typed actions of `actions`, in the order they must happen;
- `submission`: is a Pod's job one this scheduler may submit, and how?
"""
