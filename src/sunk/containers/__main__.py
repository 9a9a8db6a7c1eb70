"""`python3 -m sunk_containers ...` in the slurmd image (see images/slurmd/sunk-step-container)."""

from .runner import main

raise SystemExit(main())
