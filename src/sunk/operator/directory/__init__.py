"""The cluster's people from the directory: people (the passwd, group and SSH key files
every login and slurmd Pod reads, made without I/O) and people_sync (the one reader that
keeps their ConfigMap equal to the directory)."""
