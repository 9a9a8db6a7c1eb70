"""The controller runtime every sunk component runs on.

A controller here is small: sources (watches, pollers, hook calls) record what they learn
and enqueue a key; a worker takes the key from the queue and calls the controller's
`reconcile(key)`, which gathers a snapshot, decides with pure functions and carries the
decision out; the `Outcome` says when to look at the key again. This package holds the
parts that do not know what a Pod or a Slurm job is: the work queue, the worker loop,
supervised background tasks, what a controller waits to see in its cache, and the shape
of a cache as controllers read it (`sunk.runtime.ports`). The ports through which a
component writes are its own.
"""
