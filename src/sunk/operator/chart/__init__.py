"""What the Slurm chart runs of sunk besides `sunk operator`: its hook commands, secrets
(made once), upgrade_check (before an upgrade) and uninstall (before a delete), and
config_apply, slurmctld's sidecar."""
