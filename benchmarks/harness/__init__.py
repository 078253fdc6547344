"""The one harness of quixsinks' benchmarks; a ``bench_<name>.py`` is a page on top of it.

One module per job:

* ``cli``: the arguments every benchmark takes (``--quick``, ``--rows``, ``--runs``,
  ``--out``, ``--cases``, ...);
* ``session``: the Spark session (shared by the quick runner), the cached input, the
  floor (``noop-arrow``) and the registration of the sinks;
* ``servers``: the throwaway servers from ``tests/services`` (the only module importing
  it), shared between pages in the quick run;
* ``timing``: cases, warm-up and interleaved runs, ratios against the baseline of the
  same run, targets;
* ``cpu``: the CPU seconds each run costs the driver, Spark's JVM, its Python workers and
  the servers, from ``/proc``;
* ``results``: ``<out>/<name>.json`` and ``.md``, the machine's facts;
* ``page``: :class:`Page`, :class:`Bench` and :func:`run`, the ``main`` of every page;
* ``plot``: one chart per result (``make bench`` runs it).
"""

from .page import Bench, Page, log, run, write_measured
from .results import command_output, machine_info
from .session import FLOOR, MIXED_COLUMNS, cached
from .timing import Case, Destination, count_output_rows, run_name

__all__ = [
    "FLOOR",
    "MIXED_COLUMNS",
    "Bench",
    "Case",
    "Destination",
    "Page",
    "cached",
    "command_output",
    "count_output_rows",
    "log",
    "machine_info",
    "run",
    "run_name",
    "write_measured",
]
