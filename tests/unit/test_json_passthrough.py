"""JSON values as the producer wrote them (value_json_texts), each message's own object for a
value_serializer (SinkBatch.messages, serialize_each), and strict JSON out."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quixsinks.core.arrow import serialize_each
from quixsinks.core.batch import SinkBatch, WriteContext
from quixsinks.core.errors import RecordError
from quixsinks.core.formats import value_json_texts
from quixsinks.core.records import RecordSchema, strict_json_texts

#: awkward Kafka values: ints and floats in one key, keys missing or in another order,
#: exponents, escapes and raw UTF-8, nesting, spacing, a tombstone
VALUES: list[bytes | None] = [
    b'{"t": 21.5, "n": -34, "s": "a"}',
    b'{"n": 2.5, "t": 1e-9}',
    b'{"s": "\\u00fc", "o": {"x": [5]}}',
    '{"s": "ü€ 𝄞", "o": {"x": [5.5]}}'.encode(),
    b'  {"t"  :\t0 ,"empty": {}}  ',
    None,
    b"null",
]


def kafka_batch(values: list[bytes | None]) -> SinkBatch:
    table = pa.table(
        {
            "key": pa.array([b"k"] * len(values), pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": ["t"] * len(values),
            "partition": pa.array([0] * len(values), pa.int32()),
            "offset": pa.array(range(len(values)), pa.int64()),
            "timestamp": pa.array([0] * len(values), pa.timestamp("ms", "UTC")),
            "timestampType": pa.array([0] * len(values), pa.int32()),
        }
    )
    return SinkBatch(table, RecordSchema.resolve(table.schema), WriteContext("s", 0))


def test_a_json_value_is_written_as_the_producer_wrote_it() -> None:
    batch = kafka_batch(VALUES)
    assert batch.passthrough
    texts = value_json_texts(batch).to_pylist()
    assert texts == [v if v is not None else b"null" for v in VALUES]


def test_each_message_is_its_own_object() -> None:
    messages = kafka_batch(VALUES).messages()
    assert messages[0] == {"t": 21.5, "n": -34, "s": "a"}
    assert isinstance(messages[0]["n"], int)  # not widened by the float in row 1
    assert list(messages[1]) == ["n", "t"]  # its own key order
    assert messages[2]["o"]["x"] == [5]
    assert messages[5] is None  # a tombstone
    assert messages[6] is None


def test_json_dumps_as_a_serializer_gives_quixs_bytes_exactly() -> None:
    orjson = pytest.importorskip(
        "orjson", reason="Quix's deserialiser (orjson) is a dev dependency, via quixstreams"
    )
    batch = kafka_batch(VALUES)
    ours = serialize_each(
        json.dumps, batch.messages(), sink="test", option="value_serializer"
    ).to_pylist()
    quix = [json.dumps(None if v is None else orjson.loads(v)).encode() for v in VALUES]
    assert ours == quix


def test_a_serializer_that_fails_names_the_row() -> None:
    def picky(value: object) -> str:
        if value is None:
            raise ValueError("no tombstones")
        return "x"

    with pytest.raises(RecordError, match=r"'value_serializer' failed on row 5: ValueError"):
        serialize_each(picky, kafka_batch(VALUES).messages(), sink="t", option="value_serializer")


def test_value_columns_are_encoded_when_the_value_is_not_json_text() -> None:
    table = pa.table({"key": ["k"], "a": [1], "b": ["x"]})
    batch = SinkBatch(table, RecordSchema.resolve(table.schema), WriteContext("s", 0))
    assert not batch.passthrough
    assert value_json_texts(batch).to_pylist() == [b'{"a":1,"b":"x"}']
    assert batch.messages() == [{"a": 1, "b": "x"}]


def test_nan_and_infinities_become_null_and_nothing_else_changes() -> None:
    texts = pa.array(
        [
            b'{"a": NaN, "b": "\\u00fc"}',
            b'{"a": [1, -Infinity], "s": "x: NaN"}',
            b'{"s": "x: NaN, [Infinity"}',
            b'{"a": 1}',
            None,
        ],
        pa.binary(),
    )
    assert strict_json_texts(texts).to_pylist() == [
        b'{"a": null, "b": "\\u00fc"}',
        b'{"a": [1, null], "s": "x: NaN"}',
        b'{"s": "x: NaN, [Infinity"}',
        b'{"a": 1}',
        None,
    ]


def test_a_row_with_nan_keeps_every_other_byte() -> None:
    """Only the tokens change: a number's digits past a double's and a repeated key stay
    as the producer wrote them (the row used to be re-encoded by Python's json)."""
    raw = b'{"a":NaN,"b":0.1000000000000000055511,"c":1e400,"d":1,"d":2,"e":"\\"NaN"}'
    expected = b'{"a":null,"b":0.1000000000000000055511,"c":1e400,"d":1,"d":2,"e":"\\"NaN"}'
    assert strict_json_texts(pa.array([raw], pa.binary())).to_pylist() == [expected]


#: one type per key (a batch's keys keep one type: docs/index.md, the record model)
OBJECTS = st.fixed_dictionaries(
    {},
    optional={
        "i": st.integers(-(2**63), 2**63 - 1),
        "f": st.floats(allow_nan=False, allow_infinity=False),
        "s": st.text(max_size=8),
        'ü \\ "': st.booleans(),
        "n": st.none(),
        "o": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 9), max_size=2),
    },
)


@settings(max_examples=60, deadline=None)
@given(st.lists(OBJECTS, min_size=1, max_size=6), st.booleans())
def test_any_json_object_passes_through_byte_for_byte(
    objects: list[dict[str, object]], ascii_only: bool
) -> None:
    values: list[bytes | None] = [json.dumps(o, ensure_ascii=ascii_only).encode() for o in objects]
    batch = kafka_batch(values)
    batch.values()  # the glue's parse, which validates
    assert value_json_texts(batch).to_pylist() == values
    assert batch.messages() == objects


# --------------------------------------------------------------- the check before a write

MIXED = [b'{"id": 1}', b'{"id": "a-7"}', b"not json", None, b"[1]", b'{"id": 2.5}']


def checked_batch(on_error: str) -> SinkBatch:
    from tests.unit.test_dead_letters import batch_of, kafka_table

    return batch_of(kafka_table(MIXED), on_error)


def test_a_sink_writing_json_text_keeps_keys_whose_type_differs_between_messages() -> None:
    from quixsinks.core.deadletters import without_unparseable

    batch = checked_batch("skip")
    kept = without_unparseable(batch, typed=False)
    assert kept is not None
    assert kept.table.column("offset").to_pylist() == [100, 101, 103, 105]
    assert batch.counters == {"skipped": 2}  # "not json" and the array
    assert value_json_texts(kept).to_pylist() == [
        b'{"id": 1}',
        b'{"id": "a-7"}',
        b"null",
        b'{"id": 2.5}',
    ]


def test_under_fail_the_text_check_names_the_first_bad_row() -> None:
    from quixsinks.core.deadletters import without_unparseable

    with pytest.raises(RecordError, match=r"orders.*partition 3.*offset 102.*not valid JSON"):
        without_unparseable(checked_batch("fail"), typed=False)
