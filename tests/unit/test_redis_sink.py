"""The redis sink without a server: options, key templates, RESP bytes, secrets."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.errors import OptionError, RecordError
from quixsinks.core.sink import Task
from quixsinks.sinks.redis import RedisOptions, RedisSink
from quixsinks.sinks.redis import client as redis_client
from quixsinks.sinks.redis import wire as redis_wire
from quixsinks.sinks.redis.ledger import StagedHash, staged_totals
from quixsinks.sinks.redis.options import template_fields


def options(**extra: str) -> RedisOptions:
    return RedisOptions.from_options({"password": "s3cret-pw", **extra})


def test_key_templates_parse_into_literals_and_columns() -> None:
    assert template_fields("sensor:{city}:{id}") == [("sensor:", "city"), (":", "id")]
    assert template_fields("events") == [("events", None)]
    for bad in ("x:{id:>3}", "x:{}", "x:{a.b}", "x:{"):
        with pytest.raises(OptionError, match="key_template"):
            template_fields(bad)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"data_type": "zset"}, "score_column"),
        ({"score_column": "s"}, "zset only"),
        ({"ttl_seconds": "5", "ttl_column": "t"}, "exclude each other"),
        ({"hash_replace": "true"}, "hash only"),
        ({"data_type": "hash", "value_column": "v"}, "one field per value column"),
        ({"data_type": "stream", "value_column": "v"}, "one field per value column"),
        ({"data_type": "list", "ttl_seconds": "5"}, "TTLs apply"),
        ({"stream_maxlen": "5"}, "stream only"),
        ({"url": "http://x"}, "redis://"),
        ({"value_serializer": "nodots"}, "import path"),
    ],
)
def test_conflicting_options_are_refused(extra: dict[str, str], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        options(**extra)


def test_secrets_stay_out_of_reprs_and_errors_but_pickle_by_value() -> None:
    opts = options(url="redis://:url-secret@h:1/0")
    sink = RedisSink(opts)
    assert "s3cret-pw" not in repr(opts) + repr(sink)
    assert "url-secret" not in repr(opts) + repr(sink)
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_string_commands_are_exact_resp() -> None:
    sink = RedisSink(options(key_prefix="p:", ttl_seconds="9"))
    table = pa.table({"key": ["a", "bé"], "v": [1, None]})
    sink.prepare(table.schema)
    assert sink.records is not None
    commands, skipped = sink.encoder.commands(SinkBatch(table, sink.records, WriteContext("s", 0)))
    assert skipped == 0
    assert commands.data.to_pylist() == [
        b'*5\r\n$3\r\nSET\r\n$3\r\np:a\r\n$7\r\n{"v":1}\r\n$2\r\nEX\r\n$1\r\n9\r\n',
        b'*5\r\n$3\r\nSET\r\n$5\r\np:b\xc3\xa9\r\n$10\r\n{"v":null}\r\n$2\r\nEX\r\n$1\r\n9\r\n',
    ]


def test_strings_without_a_ttl_go_as_one_mset_per_pipeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = RedisSink(options(key_prefix="p:"))
    table = pa.table({"key": ["a", "bé", "c"], "v": [1, None, 3]})
    sink.prepare(table.schema)
    assert sink.records is not None
    commands, _ = sink.encoder.commands(SinkBatch(table, sink.records, WriteContext("s", 0)))
    assert commands.mset
    windows = redis_wire.windows(commands.data, commands.counts, 2, mset=True)
    assert [(w.replies, w.row0, w.mset) for w in windows] == [(1, 0, True), (1, 2, True)]
    assert windows[0].head + windows[0].body.to_pybytes() == (
        b'*5\r\n$4\r\nMSET\r\n$3\r\np:a\r\n$7\r\n{"v":1}\r\n'
        b'$5\r\np:b\xc3\xa9\r\n$10\r\n{"v":null}\r\n'
    )
    # an MSET stays under MSET_MAX_BYTES of arguments; a larger row goes alone
    monkeypatch.setattr(redis_wire, "MSET_MAX_BYTES", 40)
    windows = redis_wire.windows(commands.data, commands.counts, 1000, mset=True)
    assert [(w.row0, len(w.counts)) for w in windows] == [(0, 1), (1, 1), (2, 1)]
    monkeypatch.setattr(redis_wire, "MSET_MAX_BYTES", 60)
    windows = redis_wire.windows(commands.data, commands.counts, 1000, mset=True)
    assert [(w.row0, len(w.counts)) for w in windows] == [(0, 2), (2, 1)]
    # in a cluster the keys of one MSET would span slots: one SET per row
    clustered = RedisSink(options(cluster="true"))
    clustered.prepare(table.schema)
    assert clustered.records is not None
    commands, _ = clustered.encoder.commands(
        SinkBatch(table, clustered.records, WriteContext("s", 0))
    )
    assert not commands.mset
    assert commands.data[0].as_py().startswith(b"*3\r\n$3\r\nSET\r\n")


def test_hash_rows_leave_null_fields_out() -> None:
    sink = RedisSink(options(data_type="hash"))
    table = pa.table({"key": ["a", "b", "c"], "x": [1, None, None], "y": ["q", "r", None]})
    sink.prepare(table.schema)
    assert sink.records is not None
    commands, _ = sink.encoder.commands(SinkBatch(table, sink.records, WriteContext("s", 0)))
    assert commands.counts.to_pylist() == [1, 1, 0]  # row c has no field: no command
    assert commands.data[1].as_py() == b"*4\r\n$4\r\nHSET\r\n$1\r\nb\r\n$1\r\ny\r\n$1\r\nr\r\n"


def test_staged_stream_entries_are_numbered_without_gaps_across_a_tasks_batches() -> None:
    sink = RedisSink(options(data_type="stream"))
    table = pa.table({"key": ["a", "b", "c", "d"], "x": [1, None, 3, 4]})
    sink.prepare(table.schema)
    assert sink.records is not None
    task = Task(WriteContext("s", 0))
    seqs = []
    for _ in range(2):  # two SinkBatches of one task share its staging hash
        batch = SinkBatch(table, sink.records, WriteContext("s", 0), task=task)
        commands, _ = sink.encoder.staged_commands(batch, "stage")
        assert commands.counts.to_pylist() == [1, 0, 1, 1]  # row b has no field: no HSET
        seqs += [row.split(b"\r\n")[6] for row in commands.data.to_pylist() if row]
    assert seqs == [b"0", b"1", b"2", b"3", b"4", b"5"]  # the commit expects fields 0..n-1


def test_the_commit_expects_each_staging_hash_once_with_its_writes_summed() -> None:
    staged = [StagedHash("p0", 3), StagedHash("p0", 2), StagedHash("p1", 0), StagedHash("p2", 4)]
    assert staged_totals(staged) == {"p0": 5, "p1": 0, "p2": 4}
    assert list(staged_totals(staged)) == ["p0", "p1", "p2"]  # partition order kept
    assert pickle.loads(pickle.dumps(staged[0])) == staged[0]  # it rides in a receipt


def test_a_value_over_512_mb_is_a_record_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_wire, "MAX_VALUE_BYTES", 4)
    sink = RedisSink(options(value_column="v"))
    table = pa.table({"key": ["a", "b"], "v": ["abc", "abcdef"]})
    sink.prepare(table.schema)
    assert sink.records is not None
    with pytest.raises(RecordError, match="row 1 is 6 bytes"):
        sink.encoder.commands(SinkBatch(table, sink.records, WriteContext("s", 0)))


def test_a_stream_entry_with_more_fields_than_the_commit_can_append_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The commit script passes an entry's fields to XADD through Lua's unpack (about
    8,000 values): a larger entry would fail the script after earlier entries were
    appended. It is refused at staging, naming the row (the others are staged)."""
    monkeypatch.setattr(redis_wire, "MAX_STREAM_FIELDS", 2)
    sink = RedisSink(options(data_type="stream"))
    table = pa.table({"key": ["a", "b"], "x": [1, 2], "y": [None, 3], "z": [5, 6]})
    sink.prepare(table.schema)
    assert sink.records is not None
    with pytest.raises(RecordError, match="row 1 has 3 fields"):
        sink.encoder.staged_commands(SinkBatch(table, sink.records, WriteContext("s", 0)), "st")


def joined_key(key: object, value: dict[str, object]) -> str:
    return f"{key}/{value['v']}"


def test_key_serializer_gets_the_key_and_the_value_like_quix() -> None:
    sink = RedisSink(options(key_serializer=f"{__name__}:joined_key"))
    table = pa.table({"key": ["a"], "v": [7]})
    sink.prepare(table.schema)
    assert sink.records is not None
    commands, _ = sink.encoder.commands(SinkBatch(table, sink.records, WriteContext("s", 0)))
    assert commands.keys.to_pylist() == [b"a/7"]


class _ScriptedSocket:
    """A server that answers each pipeline with canned reply bytes once it is sent, handed
    out in chunks of the given sizes (cut anywhere, as TCP may)."""

    def __init__(self, replies: list[bytes], cuts: list[int]) -> None:
        self.replies = list(replies)  # per pipeline, in the order they are sent
        self.cuts = list(cuts)
        self.available = b""
        self.sent: list[bytes] = []

    def sendall(self, body: Any) -> None:
        self.sent.append(bytes(body))
        self.available += self.replies.pop(0)

    def recv(self, size: int) -> bytes:
        cut = self.cuts.pop(0) if self.cuts else len(self.available)
        chunk, self.available = self.available[:cut], self.available[cut:]
        return chunk  # empty: nothing was sent that awaits a reply (a real client would hang)


class _Conn:
    def __init__(self, sock: _ScriptedSocket) -> None:
        self._sock = sock


@settings(deadline=None)  # the first example imports hiredis
@given(
    kinds=st.lists(
        st.sampled_from(["+OK", ":1", ":-3", "-WRONGTYPE bad", "$2\r\nab"]), min_size=1, max_size=40
    ),
    cuts=st.lists(st.integers(1, 9), max_size=80),
    per_window=st.integers(1, 7),
    simple=st.booleans(),
)
def test_replies_are_counted_or_parsed_alike_however_they_arrive(
    kinds: list[str], cuts: list[int], per_window: int, simple: bool
) -> None:
    """Counting one-line replies in the received bytes finds the same errors, at the same
    (pipeline, reply) places, as parsing every reply, wherever the chunks are cut."""
    windows = [
        redis_wire.Window(pa.py_buffer(b"x"), len(kinds[i : i + per_window]), i, pa.array([1]))
        for i in range(0, len(kinds), per_window)
    ]
    replies = [
        b"".join(k.encode() + b"\r\n" for k in kinds[i : i + per_window])
        for i in range(0, len(kinds), per_window)
    ]
    sock = _ScriptedSocket(replies, cuts)
    errors = redis_client.exchange(windows, _Conn(sock), simple=simple)
    expected = [
        (i // per_window, i % per_window, "WRONGTYPE bad")
        for i, k in enumerate(kinds)
        if k.startswith("-")
    ]
    assert errors == expected
    assert len(sock.sent) == len(windows)


#: Kafka JSON values as producers write them: an int where another message holds a float,
#: keys absent from one message, keys in another order, 1e-9, a \u00fc escape, raw UTF-8,
#: and a tombstone
KAFKA_VALUES = [
    b'{"t":-34,"n":[5],"s":"\\u00fc","x":1e-9}',
    b'{"x":2.5,"t":0.5,"s":"\xc3\xbc"}',
    None,
]


def kafka_batch(sink: RedisSink) -> SinkBatch:
    table = pa.table(
        {
            "key": pa.array([b"k0", b"k1", b"k2"]),
            "value": pa.array(KAFKA_VALUES, pa.binary()),
            "topic": ["in"] * 3,
            "partition": pa.array([0] * 3, pa.int32()),
            "offset": pa.array([0, 1, 2], pa.int64()),
            "timestamp": pa.array([0] * 3, pa.timestamp("ms")),
            "timestampType": pa.array([0] * 3, pa.int32()),
        }
    )
    sink.prepare(table.schema)
    assert sink.records is not None
    return SinkBatch(table, sink.records, WriteContext("s", 0))


def mset_values(commands: redis_wire.Commands) -> list[bytes]:
    """The values of MSET arguments ``$n key $m value`` per row."""
    return [row.split(b"\r\n", 3)[3][:-2] for row in commands.data.to_pylist()]


def test_a_kafka_json_value_is_written_as_the_producer_wrote_it() -> None:
    sink = RedisSink(options())
    batch = kafka_batch(sink)
    commands, _ = sink.encoder.commands(batch)
    assert commands.mset
    assert mset_values(commands) == [KAFKA_VALUES[0], KAFKA_VALUES[1], b"null"]


def test_value_serializer_json_dumps_gives_quixs_bytes_per_message() -> None:
    sink = RedisSink(options(value_serializer="json:dumps"))
    batch = kafka_batch(sink)
    commands, _ = sink.encoder.commands(batch)
    import json

    quix = [json.dumps(None if v is None else json.loads(v)).encode() for v in KAFKA_VALUES]
    assert mset_values(commands) == quix
    assert quix[0] == b'{"t": -34, "n": [5], "s": "\\u00fc", "x": 1e-09}'


def test_a_list_entry_of_a_kafka_json_value_is_the_producers_text() -> None:
    sink = RedisSink(options(data_type="list"))
    batch = kafka_batch(sink)
    assert sink.encoder._value(batch).to_pylist() == [
        KAFKA_VALUES[0],
        KAFKA_VALUES[1],
        b"null",
    ]


def none_value(value: object) -> None:
    return None


def test_a_value_serializer_returning_none_is_refused_by_its_row() -> None:
    sink = RedisSink(options(value_serializer=f"{__name__}:none_value"))
    batch = kafka_batch(sink)
    with pytest.raises(RecordError, match="'value_serializer' returned NoneType for row 0"):
        sink.encoder.commands(batch)


def quix_key(key: bytes, value: object) -> str:
    """A Quix key_serializer: the Kafka key's bytes and the message's own object."""
    return f"{key.decode()}:{'none' if value is None else sorted(value)}"  # type: ignore[arg-type]


def test_a_quix_key_serializer_gets_the_key_bytes_and_the_messages_object() -> None:
    sink = RedisSink(options(key_serializer=f"{__name__}:quix_key"))
    batch = kafka_batch(sink)
    commands, _ = sink.encoder.commands(batch)
    assert commands.keys.to_pylist() == [
        b"k0:['n', 's', 't', 'x']",
        b"k1:['s', 't', 'x']",
        b"k2:none",
    ]
