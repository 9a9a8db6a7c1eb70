"""Slurm's state as metrics, made from the Slurm poller's listings, never from a scrape:
census (the jobs counted once per listing), episodes (drain and down episodes, pure),
slurm_families (Slurm's own metric names) and slurm_metrics (the Collector serving them)."""
