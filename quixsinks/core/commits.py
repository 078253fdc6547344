"""Commit records: what each committed micro-batch wrote, kept where a user can query it.

Python writers cannot report metrics to Spark's UI (``lastProgress.sink.metrics`` stays
empty), so every commit makes a :class:`CommitRecord`:

* one structured log line (logger ``quixsinks.commits``, a JSON object) per commit, which
  Spark's ``python_worker_logs`` collects when Python worker logging is on;
* stored with the ledger entry where the sink keeps one (the sink's commit calls
  :meth:`~quixsinks.core.sink.CommitContext.commit_record` just before it writes its
  entry), and read back by :func:`quixsinks.commit_records` /
  ``python -m quixsinks history``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from .sink import Receipt

__all__ = ["COMMIT_RECORD_SCHEMA", "SKIPPED", "CommitRecord", "records_table"]

logger = logging.getLogger("quixsinks.commits")

#: A sink's counter named with this prefix counts rows it left out by its own rule (not an
#: error): they count as ``skipped`` in the commit record, not as ``rows_written``.
SKIPPED = "skipped_"


@dataclass(frozen=True)
class CommitRecord:
    """One committed micro-batch (or keyed batch write).

    Attributes:
        sink: the sink's format name.
        sink_id, batch_id, query_id: which write.
        rows: rows the tasks handed to the sink.
        rows_written: rows less those dead-lettered or skipped.
        nbytes: Arrow bytes the tasks handed to the sink.
        partitions: task receipts the commit saw.
        dead_lettered: rows refused into dead letters (``on_error``).
        skipped: rows left out: refused under ``on_error=skip``, and skipped by the sink's
            own rules (every counter named ``skipped_*``: redis ``null_keys=skip``, a
            point without a field...).
        retries: retries the tasks' RetryPolicy made.
        write_seconds: time spent in the sink's write calls, summed over tasks.
        commit_seconds: time from the start of the driver's commit to the record (stored
            records: to the ledger write; the log line: to the end of the commit).
        committed_at: UTC time of the record, ISO 8601.
        counters: the sink's own counts (files, chunks, skipped keys...).
    """

    sink: str
    sink_id: str
    batch_id: int
    query_id: str
    rows: int
    rows_written: int
    nbytes: int
    partitions: int
    dead_lettered: int
    skipped: int
    retries: int
    write_seconds: float
    commit_seconds: float
    committed_at: str
    counters: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        *,
        sink: str,
        sink_id: str,
        batch_id: int,
        query_id: str,
        receipts: Sequence[Receipt[Any]],
        commit_seconds: float,
    ) -> CommitRecord:
        counters: dict[str, int] = {}
        for receipt in receipts:
            for name, value in receipt.counters.items():
                counters[name] = counters.get(name, 0) + value
        rows = sum(r.rows for r in receipts)
        skipped = sum(v for k, v in counters.items() if k == "skipped" or k.startswith(SKIPPED))
        refused = counters.get("dead_lettered", 0) + skipped
        return cls(
            sink=sink,
            sink_id=sink_id,
            batch_id=batch_id,
            query_id=query_id,
            rows=rows,
            rows_written=max(0, rows - refused),
            nbytes=sum(r.nbytes for r in receipts),
            partitions=len(receipts),
            dead_lettered=counters.get("dead_lettered", 0),
            skipped=skipped,
            retries=sum(r.retries for r in receipts),
            write_seconds=round(sum(r.seconds for r in receipts), 6),
            commit_seconds=round(commit_seconds, 6),
            committed_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            counters=dict(sorted(counters.items())),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """Compact JSON, the form stored in ledgers and logged."""
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommitRecord:
        """A record read back from a ledger; unknown keys (a newer version's) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values.setdefault("counters", {})
        for name in names - values.keys():
            values[name] = "" if name in ("sink", "sink_id", "query_id", "committed_at") else 0
        return cls(**values)

    @classmethod
    def from_json(cls, text: str | bytes) -> CommitRecord:
        return cls.from_dict(json.loads(text))

    def log(self) -> None:
        """The structured log line of this commit (logger ``quixsinks.commits``)."""
        logger.info("%s", self.to_json())


#: The columns of :func:`records_table`.
COMMIT_RECORD_SCHEMA = pa.schema(
    [
        ("sink", pa.string()),
        ("sink_id", pa.string()),
        ("batch_id", pa.int64()),
        ("query_id", pa.string()),
        ("rows", pa.int64()),
        ("rows_written", pa.int64()),
        ("nbytes", pa.int64()),
        ("partitions", pa.int64()),
        ("dead_lettered", pa.int64()),
        ("skipped", pa.int64()),
        ("retries", pa.int64()),
        ("write_seconds", pa.float64()),
        ("commit_seconds", pa.float64()),
        ("committed_at", pa.string()),
        ("counters", pa.map_(pa.string(), pa.int64())),
    ]
)


def records_table(records: Iterable[CommitRecord]) -> pa.Table:
    """Commit records as a pyarrow Table, ordered by sink id and batch id."""
    ordered = sorted(records, key=lambda r: (r.sink_id, r.batch_id, r.committed_at))
    rows = []
    for record in ordered:
        row = record.to_dict()
        row["counters"] = list(row["counters"].items())
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=COMMIT_RECORD_SCHEMA)
