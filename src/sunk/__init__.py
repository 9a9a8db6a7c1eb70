"""sunk: Kubernetes Pods placed by Slurm through placeholder jobs."""

__version__ = "0.1.0"
