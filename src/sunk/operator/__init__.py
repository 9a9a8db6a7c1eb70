"""`sunk operator`: Slurm's compute nodes as slurmd Pods from NodeSets, and the chart's helpers."""
