"""The Pod controller and what it hands its steps to: the executor of every write on the
Pod path, the submission reader, the strict node check and room count, the PodGroup
steps, re-adoption, job IDs and what this process did lately."""
