"""Distribution of runs over workers, as pure decisions the stores and the worker apply.

- :mod:`~cronbus.distribution.routing`: which worker a run goes to (strategies, eligibility,
  rendezvous hashing, the targets a store writes when it inserts runs);
- :mod:`~cronbus.distribution.limits`: concurrency limits and rate windows a claim honours;
- :mod:`~cronbus.distribution.fanout`: a parent run's children (broadcast, shards, map), its
  reduce run, and when the parent is done.

Nothing here reads a clock, a store or the network: every input is an argument, so both stores
take the same decisions and the tests can try every case.
"""
