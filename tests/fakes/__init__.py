"""In-memory fakes of the runtime's ports, for unit tests of controllers.

They keep just enough state to behave like the real thing for one controller pass and
the next: the Kubernetes fake applies its writes to its own cache (as an informer would
show them a moment later), and the Slurm fake speaks a real dialect, so jobs carry the
Pod's identity exactly as slurmrestd would return it. Any call can be made to fail.
"""
