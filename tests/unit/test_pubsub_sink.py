"""The pubsub sink without a server: options, messages, dedupe ids, sizes, secrets."""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence

import pyarrow as pa
import pytest

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.delivery import DedupeIds
from quixsinks.core.errors import DestinationNotFoundError, OptionError, RecordError
from quixsinks.core.sink import CommonOptions
from quixsinks.sinks.pubsub import PubSubOptions, PubSubSink, PubSubTopicNotFoundError
from quixsinks.sinks.pubsub.wire import Frame, Message, message_size
from quixsinks.spark.datasource import SinkArrowWriter


def options(**extra: str) -> PubSubOptions:
    return PubSubOptions.from_options({"project_id": "p", "topic_id": "events", **extra})


def sink_for(table: pa.Table, **extra: str) -> PubSubSink:
    sink = PubSubSink(options(**extra))
    sink.prepare(table.schema)
    return sink


def batch_of(sink: PubSubSink, table: pa.Table, batch_id: int = 3) -> SinkBatch:
    assert sink.records is not None
    return SinkBatch(table, sink.records, WriteContext("sink", batch_id, partition_id=1))


def kafka_table() -> pa.Table:
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.table(
        {
            "key": pa.array([b"k1", None], pa.binary()),
            "value": pa.array([b'{"a": 1}', b'{"a": 2}'], pa.binary()),
            "topic": ["t", "t"],
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([41, 42], pa.int64()),
            "timestamp": pa.array([1000, 2000], pa.timestamp("ms")),
            "timestampType": pa.array([0, 0], pa.int32()),
            "headers": pa.array([[{"key": "trace", "value": b"abc"}], []], headers),
        }
    )


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"topic_id": "projects/p/topics/t"}, "option 'topic_id' has value"),
        ({"topic_id": "goog-x"}, "option 'topic_id' has value"),
        ({"max_messages": "1001"}, "'max_messages' has value '1001', expected a number <= 1000"),
        ({"max_bytes": "20000000"}, "'max_bytes' has value '20000000'"),
        ({"data_column": "d", "value_serializer": "json:dumps"}, "exclude each other"),
        ({"value_serializer": "dumps"}, "import path"),
        ({"flush_timeout": "0"}, "flush_timeout"),
    ],
)
def test_bad_options_are_refused_naming_the_option(extra: dict[str, str], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        options(**extra)


def test_a_kafka_record_gets_quix_attributes_and_json_data() -> None:
    table = kafka_table()
    sink = sink_for(table)
    messages = sink.messages(batch_of(sink, table), DedupeIds("sink", 3, 1))
    first, second = messages
    assert first.data == b'{"a": 1}'  # the producer's bytes, as written
    assert {k: v for k, v in first.attributes.items() if k != "qs_dedupe_id"} == {
        "_key": "k1",
        "_timestamp": "1000",
        "_offset": "41",
        "trace": "abc",
    }
    assert "_key" not in second.attributes  # a null key sets no attribute
    assert len(first.attributes["qs_dedupe_id"]) == 32


def kafka_values(values: list[bytes | None], keys: list[bytes | None]) -> pa.Table:
    table = kafka_table()
    n = len(values)
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": ["t"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([1000] * n, pa.timestamp("ms")),
            "timestampType": pa.array([0] * n, pa.int32()),
            "headers": pa.array([[]] * n, table.schema.field("headers").type),
        }
    )


AWKWARD = [b'{"t": -34, "u": "\\u00fc"}', b' { "t": 1e-9, "x": "\xc3\xbc" }', None]


@pytest.mark.parametrize("build", ["messages", "frames"])
def test_a_kafka_json_value_is_sent_as_the_producer_wrote_it(build: str) -> None:
    table = kafka_values(AWKWARD, [b"a", b"b", b"c"])
    sink = sink_for(table)
    found = getattr(sink, build)(batch_of(sink, table), DedupeIds("sink", 3, 1))
    if build == "frames":
        from google.pubsub_v1.types import PubsubMessage

        found = [PubsubMessage.deserialize(wire[1 + len(_varint_of(wire)) :]) for _, wire in found]
    assert [m.data for m in found] == [*AWKWARD[:2], b"null"]  # a tombstone is null


def _varint_of(wire: bytes) -> bytes:
    """The length varint after a frame's tag byte."""
    out = bytearray()
    for byte in wire[1:]:
        out.append(byte)
        if byte < 0x80:
            return bytes(out)
    raise AssertionError("no varint")


def test_value_serializer_json_dumps_gives_quix_bytes() -> None:
    table = kafka_values(AWKWARD, [b"a", b"b", b"c"])
    sink = sink_for(table, value_serializer="json:dumps")
    found = sink.messages(batch_of(sink, table), DedupeIds("sink", 3, 1))
    quix = [json.dumps(None if v is None else json.loads(v)).encode() for v in AWKWARD]
    assert [m.data for m in found] == quix
    assert found[0].data == b'{"t": -34, "u": "\\u00fc"}'  # -34 stays an int


def test_a_key_that_is_not_utf8_is_refused_naming_its_row() -> None:
    table = kafka_values([b"{}", b"{}"], [b"ok", b"\xff\xfe"])
    sink = sink_for(table)
    with pytest.raises(RecordError, match=r"key of row 1 .*not UTF-8.*key_serializer") as info:
        sink.messages(batch_of(sink, table), DedupeIds("sink", 3, 1))
    assert info.value.row == 1


def test_dedupe_ids_are_the_same_on_a_replay_and_differ_between_batches() -> None:
    table = pa.table({"id": [1, 1, 2], "v": ["a", "a", "b"]})
    sink = sink_for(table)

    def ids(batch_id: int) -> list[str]:
        batch = batch_of(sink, table, batch_id)
        found = sink.messages(batch, DedupeIds("sink", batch_id, 1))
        return [m.attributes["qs_dedupe_id"] for m in found]

    first = ids(3)
    assert first == ids(3)
    assert len(set(first)) == 3  # identical rows still get distinct ids
    assert set(first).isdisjoint(ids(4))


def test_kafka_records_get_the_same_ids_in_any_spark_partition() -> None:
    table = kafka_table()
    sink = sink_for(table)
    assert sink.records is not None
    found = []
    for partition in (0, 5):  # a replay that partitions differently
        batch = SinkBatch(table, sink.records, WriteContext("sink", 3, partition_id=partition))
        messages = sink.messages(batch, DedupeIds("sink", 3, partition))
        found.append([m.attributes["qs_dedupe_id"] for m in messages])
    assert found[0] == found[1]
    assert len(set(found[0])) == 2


def test_a_message_over_10_mb_is_a_record_error_naming_its_row() -> None:
    table = pa.table({"d": pa.array([b"x", b"y" * 10_000_001], pa.binary())})
    sink = sink_for(table, data_column="d")
    with pytest.raises(RecordError, match="row 1 is 10000001 bytes") as failure:
        sink.messages(batch_of(sink, table), DedupeIds("s", 0, 0))
    assert failure.value.row == 1
    big = Message(0, b"x" * 9_999_990, {"attribute": "y" * 20})
    assert message_size(big) > 10_000_000


def test_ordering_keys_and_named_attribute_columns() -> None:
    table = pa.table({"dev": ["a", None], "n": [1, 2], "flag": [True, False]})
    sink = sink_for(table, ordering_key_column="dev", attributes_columns="n,flag")
    first, second = sink.messages(batch_of(sink, table), DedupeIds("s", 0, 0))
    assert (first.ordering_key, second.ordering_key) == ("a", "")
    assert first.attributes["n"] == "1"
    assert second.attributes["flag"] == "false"


def test_sink_options_and_errors_pickle_and_hide_the_key() -> None:
    opts = options(service_account_json='{"private_key": "TOPSECRET"}')
    assert "TOPSECRET" not in repr(opts)
    sink = PubSubSink(opts)
    assert "TOPSECRET" not in repr(sink)
    again = pickle.loads(pickle.dumps(sink))
    assert again.options == opts
    error = pickle.loads(pickle.dumps(PubSubTopicNotFoundError("gone", location="t")))
    assert isinstance(error, DestinationNotFoundError)
    assert error.location == "t"


def test_a_bad_service_account_json_is_an_option_error_without_its_text() -> None:
    from quixsinks.core.vendors.google import credentials

    with pytest.raises(OptionError, match="service_account_json") as failure:
        credentials('{"private_key": "TOPSECRET"')
    assert "TOPSECRET" not in str(failure.value)


def test_messages_and_requests_are_valid_protobuf() -> None:
    from google.pubsub_v1.types import PublishRequest, PubsubMessage

    from quixsinks.sinks.pubsub.wire import encode_message, publish_request

    long_value = "\u2603" * 200  # lengths over 127 bytes: two-byte varints
    wire = encode_message(b"x" * 300, {"a": "1", "k\u00e9y": long_value}, "ord")
    message = PubsubMessage.deserialize(wire)
    assert message.data == b"x" * 300
    assert dict(message.attributes) == {"a": "1", "k\u00e9y": long_value}
    assert message.ordering_key == "ord"
    request = PublishRequest.deserialize(publish_request("projects/p/topics/t", [wire, b""]))
    assert request.topic == "projects/p/topics/t"
    assert len(request.messages) == 2


def test_frames_built_in_arrow_are_the_messages_built_per_row() -> None:
    from google.pubsub_v1.types import PublishRequest

    from quixsinks.sinks.pubsub.wire import _varints

    table = kafka_table()
    sink = sink_for(table)
    batch = batch_of(sink, table)
    messages = sink.messages(batch, DedupeIds("sink", 3, 1))
    frames = sink.frames(batch, DedupeIds("sink", 3, 1))
    request = PublishRequest.deserialize(b"".join(f[1] for f in frames))
    assert [m.row for m in messages] == [f[0] for f in frames]
    for message, parsed in zip(messages, request.messages, strict=True):
        assert parsed.data == message.data
        assert dict(parsed.attributes) == message.attributes
    lengths = [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**28 + 5]
    assert _varints(pa.array(lengths, pa.int64())).to_pylist() == [
        _encode_varint(n) for n in lengths
    ]


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


# ---------------------------------------------------------------- a task's SinkBatches


def task_writer(
    monkeypatch: pytest.MonkeyPatch, table: pa.Table, **extra: str
) -> tuple[SinkArrowWriter, list[list[Frame]], list[int]]:
    """A batch writer of the pubsub sink whose requests are kept, not sent: the frames of
    each PublishRequest, and the rows of each build (``frames`` call)."""
    import quixsinks.sinks.pubsub.sink as sink_module

    sent: list[list[Frame]] = []
    built: list[int] = []

    class Requests:
        def __init__(self, publisher: object, topic: str, timeout: float) -> None:
            pass

        def send(self, chunk: Sequence[Frame]) -> list[int]:
            sent.append(list(chunk))
            return []

    frames = PubSubSink.frames

    def counted(
        self: PubSubSink, batch: SinkBatch, dedupe: DedupeIds, row0: int = 0
    ) -> list[Frame]:
        built.append(batch.num_rows)
        return frames(self, batch, dedupe, row0)

    monkeypatch.setattr(sink_module, "publisher", lambda options: object())
    monkeypatch.setattr(sink_module, "RequestSender", Requests)
    monkeypatch.setattr(PubSubSink, "frames", counted)
    return SinkArrowWriter(sink_for(table, **extra)), sent, built


def wide_rows(rows: int) -> pa.Table:
    """``rows`` rows of about 1 KB of Arrow each."""
    return pa.table({"id": pa.array(range(rows), pa.int64()), "text": ["x" * 1000] * rows})


def test_a_task_builds_its_messages_a_bounded_slice_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue #31: a task's messages (about 1 KB of Python objects each) are built a
    SinkBatch at a time, so the SinkBatches are small for this sink (1 MiB of Arrow, not
    the 64 MiB of the others): 20 MB of rows, which one 64 MiB SinkBatch would build at
    once, go in several builds, each at most about max_batch_bytes, with the same
    messages, row order and dedupe ids as one build of the whole partition."""
    from google.pubsub_v1.types import PublishRequest

    table = wide_rows(20_000)
    arrow_batches = table.to_batches(max_chunksize=500)  # Spark hands over Arrow batches
    writer, sent, built = task_writer(monkeypatch, table)
    default = writer.sink.options
    receipt = writer.write(iter(arrow_batches)).receipt
    assert receipt.rows == 20_000
    assert receipt.counters["published"] == 20_000
    row_bytes = table.nbytes / table.num_rows
    most = (default.max_batch_bytes + arrow_batches[0].nbytes) / row_bytes
    assert len(built) >= 4
    assert max(built) <= most, built
    # the requests: every row once, in row order, each message as one build makes it
    frames = [frame for request in sent for frame in request]
    assert [row for row, _ in frames] == list(range(20_000))
    whole = sink_for(table).frames(
        batch_of(writer.sink, table, batch_id=0), DedupeIds(f"write-{writer.write_id}", 0, 0)
    )
    assert frames == whole
    request = PublishRequest.deserialize(b"".join(wire for _, wire in frames[-3:]))
    assert [json.loads(m.data)["id"] for m in request.messages] == [19_997, 19_998, 19_999]
    assert default.max_batch_bytes == 1024 * 1024 < CommonOptions().max_batch_bytes


def test_a_refused_row_of_a_later_sinkbatch_is_named_by_its_row_in_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Row numbers count from the task's first row, whichever SinkBatch holds the row."""
    table = wide_rows(12_000)
    keys = pa.array(["k"] * 12_000)
    keys = pa.concat_arrays([keys[:10_001], pa.array(["k" * 2000]), keys[10_002:]])
    table = table.append_column("key", keys)
    writer, sent, _ = task_writer(monkeypatch, table)
    with pytest.raises(RecordError, match="row 10001"):
        writer.write(iter(table.to_batches(max_chunksize=500)))
    # the row was in a later SinkBatch: the earlier ones went out whole, in row order
    rows = [row for request in sent for row, _ in request]
    assert 0 < len(rows) <= 10_001
    assert rows == list(range(len(rows)))
