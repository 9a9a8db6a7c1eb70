"""The NodeSet controller and its parts: spec (a NodeSet read and checked), selection (which
Nodes it gets), members (the slurmd Pods), plan (pure, with the modules it asks: removal,
rollout, status, checks, demand, the health and fault rules), actions, controller (the one
executor) and view (Slurm as one pass sees it)."""
