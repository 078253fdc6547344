"""Row-level errors of the bigquery and pubsub sinks, without a server: the mapping of
AppendRows ``row_errors`` to rows (the BigQuery emulator never sends them), the per-row
refusals around appends, and the Pub/Sub isolation of messages it cannot publish."""

from __future__ import annotations

import pickle
from collections.abc import Sequence

import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.deadletters import Refusals
from quixsinks.core.delivery import DedupeIds
from quixsinks.core.errors import DestinationError, RecordError
from quixsinks.core.records import RecordSchema
from quixsinks.core.sink import Task

pytest.importorskip("google.cloud.bigquery_storage_v1")

from google.cloud.bigquery_storage_v1 import types

from quixsinks.sinks.bigquery.wire import RowsRefused, check_append
from quixsinks.sinks.bigquery.writing import chunked, refused
from quixsinks.sinks.pubsub import PubSubSink
from quixsinks.sinks.pubsub.options import PubSubOptions
from quixsinks.sinks.pubsub.refusals import deliver_isolating, encodable_rows


def batch_of(ids: Sequence[int], on_error: str = "skip", text: Sequence[str] = ()) -> SinkBatch:
    table = pa.table({"id": list(ids), "text": list(text) or ["t"] * len(ids)})
    context = WriteContext("s", 0)
    task = Task(context, refusals=Refusals("bigquery", on_error))  # type: ignore[arg-type]
    records = RecordSchema(key=None, timestamp=None, values=("id", "text"))
    return SinkBatch(table, records, context, task.counters, task=task)


def ids_of(batch: SinkBatch) -> list[int]:
    return batch.table.column("id").to_pylist()  # type: ignore[no-any-return]


def response(*errors: tuple[int, str], code: int = 3) -> types.AppendRowsResponse:
    out = types.AppendRowsResponse()
    out.error.code = code
    out.error.message = "rows refused"
    for index, message in errors:
        out.row_errors.append(types.RowError(index=index, message=message))
    return out


# ---------------------------------------------------------------------------- bigquery


def test_row_errors_name_rows_of_the_appended_table_from_the_requests_offset() -> None:
    with pytest.raises(RowsRefused) as caught:
        check_append(response((1, "bad a"), (4, "bad b")), "bigquery table t", offset=10)
    assert caught.value.refused == [(11, "bad a"), (14, "bad b")]
    assert caught.value.row == 11
    assert isinstance(caught.value, RecordError)
    again = pickle.loads(pickle.dumps(caught.value))
    assert again.refused == [(11, "bad a"), (14, "bad b")]


def test_an_append_refused_without_row_errors_is_not_a_row_level_error() -> None:
    with pytest.raises(DestinationError) as caught:
        check_append(response(), "bigquery table t")
    assert not isinstance(caught.value, RecordError)


def test_an_already_existing_offset_is_no_error() -> None:
    check_append(response(code=6), "bigquery table t")


def test_the_rows_row_errors_name_are_refused_and_the_others_kept() -> None:
    batch = batch_of(range(5))
    data = batch.table.append_column("token", pa.array(["x"] * 5))
    error = RowsRefused("refused", [(1, "no"), (3, "no")])
    batch, data = refused(batch, data, error)
    assert ids_of(batch) == [0, 2, 4]
    assert data.column("id").to_pylist() == [0, 2, 4]
    assert batch.counters == {"skipped": 2}


def test_row_errors_outside_the_append_fail_the_batch() -> None:
    batch = batch_of(range(2))
    with pytest.raises(DestinationError):
        refused(batch, batch.table, RowsRefused("refused", [(7, "no")]))


def test_under_fail_a_row_error_names_the_row() -> None:
    batch = batch_of(range(3), on_error="fail")
    with pytest.raises(RecordError, match=r"row 2 .* refused: bigquery: BigQuery refused the row"):
        refused(batch, batch.table, RowsRefused("refused", [(2, "bad value")]))


def test_a_row_too_large_for_one_append_request_is_refused_alone() -> None:
    batch = batch_of(range(4), text=["a", "b" * 5000, "c", "d"])
    batch, _data, records = chunked(batch, batch.table, 2048)
    assert ids_of(batch) == [0, 2, 3]
    assert sum(r.num_rows for r in records) == 3
    assert batch.counters == {"skipped": 1}


# ---------------------------------------------------------------------------- pubsub


def failing_build(bad: set[int], *, name_row: bool) -> object:
    def build(piece: SinkBatch, first: int) -> None:
        for i, row in enumerate(piece.table.column("id").to_pylist()):
            if row in bad:
                raise RecordError("too big", row=first + i if name_row else None)

    return build


@pytest.mark.parametrize("name_row", [True, False])
def test_rows_that_cannot_be_messages_are_found_with_or_without_the_row(name_row: bool) -> None:
    batch = batch_of(range(10))
    refused_rows: list[int] = []
    good = encodable_rows(
        batch,
        100,
        failing_build({2, 3, 9}, name_row=name_row),  # type: ignore[arg-type]
        lambda row, error: refused_rows.append(row),
    )
    assert good == [0, 1, 4, 5, 6, 7, 8]
    assert refused_rows == [2, 3, 9]


def test_a_publish_refused_for_one_message_is_narrowed_to_it() -> None:
    sent: list[list[int]] = []

    def deliver(items: Sequence[int]) -> None:
        if 5 in items:
            raise RecordError("invalid argument")
        sent.append(list(items))

    refusals = deliver_isolating(list(range(8)), deliver)
    assert [item for item, _ in refusals] == [5]
    assert sorted(i for chunk in sent for i in chunk) == [0, 1, 2, 3, 4, 6, 7]


def test_a_round_refused_whole_is_not_a_row_level_error() -> None:
    sink = PubSubSink(PubSubOptions.from_options({"project_id": "p", "topic_id": "events"}))
    batch = batch_of(range(3))

    def deliver(items: Sequence[int]) -> None:
        raise RecordError("invalid argument")

    with pytest.raises(DestinationError, match="refused every message"):
        sink.publish(batch, [0, 1, 2], None, 0, deliver, lambda i: i)  # type: ignore[type-var]
    assert batch.counters == {}


def test_a_refused_message_refuses_its_batch_row() -> None:
    sink = PubSubSink(PubSubOptions.from_options({"project_id": "p", "topic_id": "events"}))
    batch = batch_of([10, 11, 12, 13])

    def deliver(items: Sequence[int]) -> None:
        if 51 in items:
            raise RecordError("invalid argument")

    # messages numbered from row0=50, built from batch rows 0, 2, 3 (row 1 refused before)
    published = sink.publish(batch, [50, 51, 52], [0, 2, 3], 50, deliver, lambda i: i)  # type: ignore[type-var]
    assert published == 2
    assert batch.counters == {"skipped": 1}


def test_a_dedupe_ids_copy_goes_on_from_where_it_was_made() -> None:
    ids = DedupeIds("s", 1, 0)
    ids.ids([b"a"], [("t", 0, 5)])
    twin = ids.copy()
    first = ids.ids([b"b"], [("t", 0, 6)])
    # had the copy shared the offsets seen, offset 6 would now get a position id
    assert twin.ids([b"b"], [("t", 0, 6)]) == first
    assert ids.ids([b"c"]) == twin.ids([b"c"])
