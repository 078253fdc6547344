"""The ``iceberg`` sink's ledger store: the table layer's snapshot-summary ledger
(:mod:`quixsinks.core.tables.ledger`), which ``tsdatalake``'s catalog registration shares.
Each micro-batch's snapshot summary carries its fenced entry, atomic with the data."""

from quixsinks.core.tables.ledger import SnapshotLedgerStore, summary_properties

__all__ = ["SnapshotLedgerStore", "summary_properties"]
