#!/bin/bash
# Placeholder job submitted by sunk for one Kubernetes Pod (named in the job's name).
# It holds the Pod's resources in Slurm for as long as the job lives.
#
# 1. Mark the job started. Slurm 22.05 jobs have no `extra` field, so the mark is appended
#    to the job's comment (the Pod's comment annotation stays readable in `squeue -o %k`).
#    The scheduler binds the Pod only once it sees the mark: RUNNING alone can still mean
#    "prolog running".
# 2. Wait until Slurm ends the job (cancel, preemption, time limit).
set -u
if ! scontrol update jobid="$SLURM_JOB_ID" comment="${SUNK_COMMENT:-}: started"; then
  echo "sunk placeholder: could not mark job $SLURM_JOB_ID started" >&2
  exit 1
fi
trap 'exit 0' TERM
sleep infinity &
wait $!
