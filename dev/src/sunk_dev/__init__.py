"""The local real cluster used by the demo and the tests.

It runs a real etcd + kube-apiserver (+ the namespace/serviceaccount controllers), kwok
playing the kubelets, and a real Slurm (munged, slurmctld, one slurmd per node, slurmrestd
with JWT auth, optionally slurmdbd + MariaDB), all on 127.0.0.1.
"""

from sunk_dev import procs, topology
from sunk_dev.cluster import ClusterSpec, DevCluster
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout

__all__ = ["ClusterSpec", "DevCluster", "DevClusterError", "Layout", "procs", "topology"]
