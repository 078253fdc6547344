"""The fault matrix: every sink under every fault, rows lost and duplicated counted.

One workload (input files of rows with unique ids, several micro-batches, two partitions,
a streaming query with ``trigger(availableNow=True)``) runs into one sink while a fault
is injected; then the query is restarted from its checkpoint, without the fault, until it
completes; then the destination is read back and every id counted. The outcome is held
against the guarantee the sink's docs claim (:mod:`tests.chaos.cells`).

* ``targets.py``: the sinks (how to reach a fresh destination, how to read it back);
* ``faults.py``: the faults (driver kill, Python worker kill, server crash, lost
  acknowledgement, hung server, disk full) and :func:`~tests.chaos.faults.run_cell`;
* ``workload.py``: the streaming job run as its own process (for the driver kill);
* ``report.py``: docs/reliability.md from a run's results;
* ``__main__.py``: ``make chaos``, the whole matrix (``python -m tests.chaos``).

``tests/integration/test_chaos.py`` runs the quick cells (one fault of each kind per
sink family) in ``make test``, so CI guards them.
"""
