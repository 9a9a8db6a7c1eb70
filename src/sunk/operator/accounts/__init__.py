"""Slurm accounts kept from the directory's groups: mapping (the chart's values), plan
(pure), actions (typed) and sync (gather, plan, execute)."""
