"""`sunk scheduler`: Pods placed by Slurm through placeholder jobs. Everything only the
scheduler uses lives here: its controllers and what feeds them, its decisions (`decide`),
the Pod → job translation (`translate`), the placeholder script and the hooks API it calls
(`hooks`), the trust policy, its settings, and `sunk explain`."""
