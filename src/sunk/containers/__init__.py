"""Job steps in container images: the program slurmstepd runs for `srun --container=IMAGE`.

This package runs inside the slurmd image, not the sunk image: Debian's python3 runs it with
nothing but the standard library, and it imports nothing else of sunk (a unit test checks).
The chart's oci.conf names it as Slurm's OCI runtime (`RunTimeRun`, with
`IgnoreFileConfigJson`), so Slurm hands it the string the user gave to `--container`, the
step's environment and its command, in the job's cgroup and already as the job's user. It
fetches the image into a per-user cache on the node (skopeo, umoci), writes an OCI runtime
spec and runs the command with crun in a user namespace of the job's own user. See
docs/platform.md, "Containers in jobs", and docs/architecture.md for why this shape.
"""
