"""The table-format layer: Apache Iceberg tables through pyiceberg, for every sink that
keeps one (``iceberg``, and ``tsdatalake`` with ``catalog_url``).

* :mod:`.catalog`: :class:`~.catalog.TableCatalog` (a catalog and its commit rules, built
  from a sink's options), catalogs and FileIOs loaded with timeouts and cached per
  process, the error boundary of catalog calls;
* :mod:`.commit`: one fenced snapshot per micro-batch, retried through core's
  :class:`~quixsinks.core.backpressure.RetryPolicy`;
* :mod:`.ledger`: the fenced ledger in the snapshot summaries;
* :mod:`.expiry`: snapshot expiry that keeps the ledger entries a restart needs;
* :mod:`.partitioning`: partition fields, the ``partition_by`` syntax, new tables' specs;
* :mod:`.pyiceberg_compat`: every use of pyiceberg's private API.

pyiceberg is imported lazily: importing this package needs only pyarrow.
"""

__all__: list[str] = []
