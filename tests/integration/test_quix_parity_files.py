"""Quix parity for the file family: the same awkward Kafka messages through Quix Streams'
``FileSink`` (json, parquet) and ``CSVSink`` (their ``add()``/``flush()`` called directly, no
Kafka) and through our ``file`` and ``csvfile`` sinks (a Kafka-shaped DataFrame), the
outputs compared record by record. Only the differences listed in docs/sinks/file.md and
docs/sinks/csvfile.md ("Migrating from Quix Streams") are normalised, each by a named
helper below. Then the continuation: our sinks writing into the CSV file and the
directory Quix's sinks started.

Quix Streams 3.28.1 is a pinned test dependency (the ``dev`` extra).
"""

from __future__ import annotations

import csv
import json
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tests.quix_streams import import_quix

BASE_MS = 1714521600000
TOPIC = "events"

#: (key, value) as a producer wrote them: one key holding ints and floats, keys missing
#: from some messages, key order differing, 1e-9, "ü" raw and escaped, a repeated key,
#: nested values, a null key, a key that is not UTF-8, a tombstone
MESSAGES: list[tuple[bytes | None, bytes | None]] = [
    (b"sensor-1", b'{"id": 0, "temp": 21, "site": "a"}'),
    (b"sensor-1", b'{"temp": 21.5, "id": 1, "site": "\\u00fc"}'),
    (b"sensor-2", b'{"id": 2, "temp": -34, "note": "\xc3\xbc"}'),
    (b"sensor-2", b'{"id": 3,"tiny":1e-9,  "temp": 0.5}'),
    (b"sensor-3", b'{"id": 4, "dup": 1, "dup": 2, "temp": 7}'),
    (None, b'{"id": 5, "temp": 1.25, "site": "b"}'),
    (b"\xff\xfe", b'{"id": 6, "temp": 3}'),
    (b"caf\xc3\xa9", b'{"id": 7, "list": [1, 2.5], "obj": {"x": 1}, "temp": 8}'),
    (b"sensor-1", None),
]
NON_UTF8 = 6
TOMBSTONE = 8
NULL_KEY = 5


def offsets_without(*skipped: int) -> list[int]:
    return [i for i in range(len(MESSAGES)) if i not in skipped]


# ----------------------------------------------------------------------------- writers


def write_with_quix(sink: Any, offsets: list[int]) -> None:
    """The messages at ``offsets`` through a Quix sink, as its app would give them: the
    value deserialised by orjson (None for a tombstone), the key as bytes."""
    sink.setup()
    for offset in offsets:
        key, value = MESSAGES[offset]
        sink.add(
            value=None if value is None else orjson.loads(value),
            key=key,
            timestamp=BASE_MS + offset * 1000,
            headers=[],
            topic=TOPIC,
            partition=0,
            offset=offset,
        )
    sink.flush()


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Quix's FileSink takes only letters, digits, spaces, dots, underscores and slashes in
    its directory (no "-", which pytest's tmp_path holds): it gets one relative to here."""
    monkeypatch.chdir(tmp_path)


def quix_file_sink(directory: Path, fmt: str) -> Any:
    module = import_quix("quixstreams.sinks.community.file.local")
    return module.LocalFileSink(directory=str(directory.relative_to(Path.cwd())), format=fmt)


def quix_csv_sink(path: Path) -> Any:
    return import_quix("quixstreams.sinks.core.csv").CSVSink(path=str(path))


def kafka_frame(spark: Any, offsets: list[int]) -> Any:
    rows = [
        (
            MESSAGES[offset][0],
            MESSAGES[offset][1],
            TOPIC,
            0,
            offset,
            datetime.fromtimestamp((BASE_MS + offset * 1000) / 1000, UTC),
            0,
        )
        for offset in offsets
    ]
    schema = (
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int"
    )
    return spark.createDataFrame(rows, schema).coalesce(1)


def write_with_quixsinks(
    spark: Any, sink: str, path: Path, offsets: list[int], **options: str
) -> None:
    write_with_quixsinks_to(spark, str(path), offsets, sink=sink, **options)


def write_with_quixsinks_to(
    spark: Any, path: str, offsets: list[int], *, sink: str = "file", **options: str
) -> None:
    writer = kafka_frame(spark, offsets).write.format(sink).option("path", path)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


# ----------------------------------------------------------------------------- readers


def data_files(folder: Path, suffix: str) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob(f"*{suffix}")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(folder).parts)
    )


def json_file_bytes(folder: Path) -> bytes:
    [file] = data_files(folder, ".jsonl")
    return file.read_bytes()


def parquet_table(folder: Path) -> pa.Table:
    [file] = data_files(folder, ".parquet")
    return pq.read_table(file)


def csv_records(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------- the listed
# differences, one normaliser each

QUIX_REPR_KEY = re.compile(
    rb'"_key":"<quixstreams\.sinks\.base\.item\.SinkItem object at 0x[0-9a-f]+>"'
)


def quix_null_key_as_null(data: bytes) -> bytes:
    """Difference: Quix's FileSink writes the repr of its record object as the ``_key`` of a
    message without a key (a bug); we write null."""
    return QUIX_REPR_KEY.sub(b'"_key":null', data)


def parsed_json_lines(data: bytes) -> list[Any]:
    """Difference (default mode): our JSON value is the producer's text (``1e-9``,
    ``"\\u00fc"``, both repeated keys, its spacing), Quix's its re-encoding: compared
    parsed (both parsers keep the last of a repeated key)."""
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def replaced_key(key: bytes | None) -> str | None:
    """Difference (default mode): a key that is not UTF-8 is decoded with replacement
    characters (Quix fails the whole batch on it)."""
    return None if key is None else key.decode("utf-8", "replace")


def sorted_columns(table: pa.Table) -> pa.Table:
    """Difference: Quix orders Parquet value columns by a Python set (a different order
    in each process); ours are in first-seen order. Readers select by name."""
    return table.select(sorted(table.column_names))


def rows_by_id(table: pa.Table) -> dict[Any, dict[str, Any]]:
    return {row["id"]: row for row in table.to_pylist()}


# ============================================================================= file json


def test_file_json_quix_compat_writes_quix_filesinks_bytes(spark: Any, tmp_path: Path) -> None:
    # Quix cannot write the non-UTF-8 key (UnicodeDecodeError: the whole batch is lost)
    offsets = offsets_without(NON_UTF8)
    write_with_quix(quix_file_sink(tmp_path / "quix", "json"), offsets)
    write_with_quixsinks(spark, "file", tmp_path / "ours", offsets, quix_compat="true")
    quix = quix_null_key_as_null(json_file_bytes(tmp_path / "quix"))
    assert json_file_bytes(tmp_path / "ours") == quix


def test_file_json_default_writes_the_same_records(spark: Any, tmp_path: Path) -> None:
    offsets = offsets_without(NON_UTF8)
    write_with_quix(quix_file_sink(tmp_path / "quix", "json"), offsets)
    write_with_quixsinks(spark, "file", tmp_path / "ours", offsets)
    ours = json_file_bytes(tmp_path / "ours")
    quix = parsed_json_lines(quix_null_key_as_null(json_file_bytes(tmp_path / "quix")))
    assert parsed_json_lines(ours) == quix
    # the producer's own text, not a re-encoding
    assert b'"_value":{"id": 3,"tiny":1e-9,  "temp": 0.5}' in ours
    assert b'"_value":{"id": 4, "dup": 1, "dup": 2, "temp": 7}' in ours


def test_file_json_default_decodes_a_non_utf8_key_with_replacement(
    spark: Any, tmp_path: Path
) -> None:
    write_with_quixsinks(spark, "file", tmp_path, [NON_UTF8])
    [line] = parsed_json_lines(json_file_bytes(tmp_path))
    assert line["_key"] == replaced_key(MESSAGES[NON_UTF8][0]) == "\ufffd\ufffd"


def test_file_quix_compat_refuses_a_non_utf8_key_naming_the_row(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"offset 6 was refused.*not UTF-8 text"):
        write_with_quixsinks(spark, "file", tmp_path, list(range(8)), quix_compat="true")
    assert data_files(tmp_path, ".jsonl") == []


def test_file_quix_compat_skips_a_non_utf8_key_under_on_error(spark: Any, tmp_path: Path) -> None:
    write_with_quixsinks(
        spark, "file", tmp_path, list(range(8)), quix_compat="true", on_error="skip"
    )
    lines = parsed_json_lines(json_file_bytes(tmp_path))
    assert [line["_value"]["id"] for line in lines] == [0, 1, 2, 3, 4, 5, 7]


# ============================================================================= file parquet


def quix_parquet_offsets() -> list[int]:
    # Quix's ParquetFormat fails the whole batch on a tombstone (None has no keys()) and
    # on the non-UTF-8 key
    return offsets_without(NON_UTF8, TOMBSTONE)


def test_file_parquet_quix_compat_matches_quix_filesink(spark: Any, tmp_path: Path) -> None:
    write_with_quix(quix_file_sink(tmp_path / "quix", "parquet"), quix_parquet_offsets())
    write_with_quixsinks(
        spark,
        "file",
        tmp_path / "ours",
        quix_parquet_offsets(),
        format="parquet",
        quix_compat="true",
    )
    quix = sorted_columns(parquet_table(tmp_path / "quix"))
    ours = sorted_columns(parquet_table(tmp_path / "ours"))
    assert ours.schema == quix.schema  # _key string, temp double, list<double>, struct
    quix_rows, our_rows = rows_by_id(quix), rows_by_id(ours)
    quix_rows[NULL_KEY]["_key"] = None  # Quix: its record object's repr (see the JSON test)
    assert our_rows == quix_rows


def test_file_parquet_default_keeps_the_key_binary(spark: Any, tmp_path: Path) -> None:
    write_with_quix(quix_file_sink(tmp_path / "quix", "parquet"), quix_parquet_offsets())
    write_with_quixsinks(spark, "file", tmp_path / "ours", quix_parquet_offsets(), format="parquet")
    quix = sorted_columns(parquet_table(tmp_path / "quix"))
    ours = sorted_columns(parquet_table(tmp_path / "ours"))
    # Difference (default mode): _key is the key's bytes, binary; Quix's is text
    assert ours.column("_key").to_pylist() == [MESSAGES[i][0] for i in quix_parquet_offsets()]
    assert ours.schema.field("_key").type == pa.binary()
    assert quix.schema.field("_key").type == pa.string()
    assert ours.drop_columns(["_key"]) == quix.drop_columns(["_key"])


def test_file_parquet_writes_a_tombstone_as_a_row_of_nulls(spark: Any, tmp_path: Path) -> None:
    # Quix's ParquetFormat raises on a tombstone; ours keeps the record, its value null
    write_with_quixsinks(
        spark, "file", tmp_path, [0, TOMBSTONE], format="parquet", quix_compat="true"
    )
    rows = parquet_table(tmp_path).to_pylist()
    assert rows[1] == {
        "_timestamp": BASE_MS + TOMBSTONE * 1000,
        "_key": "sensor-1",
        "id": None,
        "temp": None,
        "site": None,
    }


# ============================================================================= csv


def test_csvfile_quix_compat_writes_quix_csvsinks_bytes(spark: Any, tmp_path: Path) -> None:
    offsets = list(range(len(MESSAGES)))
    write_with_quix(quix_csv_sink(tmp_path / "quix.csv"), offsets)
    write_with_quixsinks(spark, "csvfile", tmp_path / "ours.csv", offsets, quix_compat="true")
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "quix.csv").read_bytes()


def test_csvfile_default_writes_the_same_records(spark: Any, tmp_path: Path) -> None:
    offsets = list(range(len(MESSAGES)))
    write_with_quix(quix_csv_sink(tmp_path / "quix.csv"), offsets)
    write_with_quixsinks(spark, "csvfile", tmp_path / "ours.csv", offsets)
    quix = csv_records(tmp_path / "quix.csv")
    ours = csv_records(tmp_path / "ours.csv")
    assert len(ours) == len(quix) == len(MESSAGES)
    for offset, (mine, theirs) in enumerate(zip(ours, quix, strict=True)):
        key = MESSAGES[offset][0]
        # Difference: Quix's key_serializer=str writes b'...' and None; ours the key's
        # text (replacement characters for bytes that are not UTF-8), empty for null
        assert theirs.pop("key") == str(key)
        assert mine.pop("key") == (replaced_key(key) or "")
        # Difference: our value is the producer's text, Quix's json.dumps of it: the same
        # JSON (both parsers keep the last of a repeated key)
        assert json.loads(mine.pop("value")) == json.loads(theirs.pop("value"))
        assert mine == theirs  # timestamp, topic, partition, offset


def test_file_csv_quix_compat_rows_are_quix_csvsinks(spark: Any, tmp_path: Path) -> None:
    offsets = list(range(len(MESSAGES)))
    write_with_quix(quix_csv_sink(tmp_path / "quix.csv"), offsets)
    write_with_quixsinks(
        spark, "file", tmp_path / "ours", offsets, format="csv", quix_compat="true"
    )
    [file] = data_files(tmp_path / "ours", ".csv")
    assert file.read_bytes() == (tmp_path / "quix.csv").read_bytes()


# ============================================================================= continuing


def test_csvfile_continues_a_file_quix_started(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "readings.csv"
    write_with_quix(quix_csv_sink(target), [0, 1, 2, 3])
    started = target.read_bytes()
    write_with_quixsinks(spark, "csvfile", target, [4, 5, 6, 7, 8], quix_compat="true")
    # one header, Quix's bytes kept, and the file as Quix would have written it whole
    write_with_quix(quix_csv_sink(tmp_path / "whole.csv"), list(range(len(MESSAGES))))
    assert target.read_bytes().startswith(started)
    assert target.read_bytes() == (tmp_path / "whole.csv").read_bytes()


def test_csvfile_default_continues_a_file_quix_started(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "readings.csv"
    write_with_quix(quix_csv_sink(target), [0, 1])
    started = target.read_bytes()
    write_with_quixsinks(spark, "csvfile", target, [2, 3])
    assert target.read_bytes().startswith(started)
    assert target.read_text(encoding="utf-8").count("key,value,timestamp") == 1
    assert [r["offset"] for r in csv_records(target)] == ["0", "1", "2", "3"]


def test_csvfile_refuses_a_file_with_another_header(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "readings.csv"
    write_with_quix(quix_csv_sink(target), [0])  # excel dialect
    started = target.read_bytes()
    with pytest.raises(Exception, match=r"does not start with the header"):
        write_with_quixsinks(spark, "csvfile", target, [1], dialect="unix")
    assert target.read_bytes() == started


def unified_dataset(folder: Path) -> ds.Dataset:
    """The directory as one dataset: Quix's files under <topic>/<partition>/ and ours at the
    top (pyarrow skips "_" and "." paths, our staging and ledger). Files differ in their
    columns (a key new in a later message): a reader unifies their schemas, as Spark's
    mergeSchema does; pyarrow's default takes the first file's."""
    files = data_files(folder, ".parquet")
    schema = pa.unify_schemas([pq.read_schema(f) for f in files])
    return ds.dataset(folder, format="parquet", schema=schema)


def test_file_parquet_continues_a_directory_quix_wrote(spark: Any, tmp_path: Path) -> None:
    # Quix: <dir>/<topic>/<partition>/<first offset, 19 digits>.parquet; ours at the top
    write_with_quix(quix_file_sink(tmp_path, "parquet"), [0, 1, 2, 3])
    write_with_quixsinks(spark, "file", tmp_path, [4, 5, 7], format="parquet", quix_compat="true")
    assert (tmp_path / TOPIC / "0" / "0000000000000000000.parquet").exists()
    table = unified_dataset(tmp_path).to_table()
    assert sorted(table.column("id").to_pylist()) == [0, 1, 2, 3, 4, 5, 7]
    assert table.schema.field("_key").type == pa.string()
    by_id = rows_by_id(table)
    assert (by_id[3]["tiny"], by_id[4]["dup"], by_id[7]["obj"]) == (1e-9, 2, {"x": 1})
    frame = (
        spark.read.option("recursiveFileLookup", "true")
        .option("mergeSchema", "true")
        .parquet(str(tmp_path))
    )
    got = sorted((r["id"], r["_key"], r["temp"]) for r in frame.collect())
    assert got == sorted((r["id"], r["_key"], r["temp"]) for r in table.to_pylist())


def spark_json_rows(spark: Any, folder: Path) -> list[tuple[Any, ...]]:
    frame = spark.read.option("recursiveFileLookup", "true").json(str(folder))
    rows = frame.select("_timestamp", "_key", "_value.id").collect()
    return sorted((r["_timestamp"], r["_key"], r["id"]) for r in rows)


def expected_json_rows(offsets: list[int]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            BASE_MS + i * 1000,
            None if MESSAGES[i][0] is None else MESSAGES[i][0].decode(),
            None if MESSAGES[i][1] is None else json.loads(MESSAGES[i][1])["id"],
        )
        for i in offsets
    )


def test_file_json_continues_a_directory_quix_wrote(spark: Any, tmp_path: Path) -> None:
    write_with_quix(quix_file_sink(tmp_path, "json"), [0, 1, 2, 3])
    write_with_quixsinks(spark, "file", tmp_path, [5, 7, 8])
    assert spark_json_rows(spark, tmp_path) == expected_json_rows([0, 1, 2, 3, 5, 7, 8])


def test_spark_refuses_a_json_value_with_a_repeated_key_unless_quix_compat(
    spark: Any, tmp_path: Path
) -> None:
    # Difference (default mode): the producer's text keeps a repeated key, which Spark's
    # JSON reader refuses for the whole directory; Quix (and quix_compat) keep the last
    write_with_quixsinks(spark, "file", tmp_path / "verbatim", [4])
    with pytest.raises(Exception, match="COLUMN_ALREADY_EXISTS"):
        spark_json_rows(spark, tmp_path / "verbatim")
    write_with_quixsinks(spark, "file", tmp_path / "compat", [4], quix_compat="true")
    assert spark_json_rows(spark, tmp_path / "compat") == expected_json_rows([4])


def test_file_parquet_takes_the_column_types_of_quix_files(spark: Any, tmp_path: Path) -> None:
    write_with_quix(quix_file_sink(tmp_path, "parquet"), [1, 3])  # temp: 21.5, 0.5: double
    write_with_quixsinks(spark, "file", tmp_path, [0, 4], format="parquet", quix_compat="true")
    [ours] = [f for f in data_files(tmp_path, ".parquet") if f.parent == tmp_path]
    # alone, temp 21 and 7 would make an int64 column: the directory's type is Quix's
    assert pq.read_schema(ours).field("temp").type == pa.float64()
    table = ds.dataset(tmp_path, format="parquet").to_table(columns=["id", "temp"])
    assert sorted(table.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 0, "temp": 21.0},
        {"id": 1, "temp": 21.5},
        {"id": 3, "temp": 0.5},
        {"id": 4, "temp": 7.0},
    ]


def test_file_parquet_refuses_a_binary_key_beside_quix_text_keys(
    spark: Any, tmp_path: Path
) -> None:
    write_with_quix(quix_file_sink(tmp_path, "parquet"), [0])
    with pytest.raises(Exception, match=r"_key as string.*set quix_compat=true"):
        write_with_quixsinks(spark, "file", tmp_path, [1], format="parquet")
    assert [f for f in data_files(tmp_path, ".parquet") if f.parent == tmp_path] == []


def test_file_parquet_continues_an_s3_prefix_quix_wrote(
    spark: Any, s3_server: Any, tmp_path: Path
) -> None:
    bucket = f"quix-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    s3 = s3_server.options()
    # Quix's S3FileSink needs quixstreams[s3] (mypy_boto3_s3), not in the dev extra: it puts
    # format.serialize(batch) at <directory>/<topic>/<partition>/<offset>.parquet, which is
    # what LocalFileSink writes under its directory; those bytes are uploaded at that key
    write_with_quix(quix_file_sink(tmp_path / "readings", "parquet"), [1, 3])  # temp: double
    client = s3_server.client()
    for file in data_files(tmp_path / "readings", ".parquet"):
        key = f"readings/{file.relative_to(tmp_path / 'readings').as_posix()}"
        client.put_object(Bucket=bucket, Key=key, Body=file.read_bytes())
    write_with_quixsinks_to(
        spark, f"s3://{bucket}/readings", [0, 4], format="parquet", quix_compat="true", **s3
    )
    listed = client.list_objects_v2(Bucket=bucket, Prefix="readings/")["Contents"]
    keys = sorted(o["Key"] for o in listed if "/_" not in o["Key"])
    assert f"readings/{TOPIC}/0/0000000000000000001.parquet" in keys
    tables = [
        pq.read_table(pa.BufferReader(client.get_object(Bucket=bucket, Key=k)["Body"].read()))
        for k in keys
    ]
    # one schema for Quix's file and ours: _key text, temp double (ours alone: int64)
    assert len({t.select(["_timestamp", "_key", "id", "temp"]).schema for t in tables}) == 1
    rows = sorted((r["id"], r["_key"], r["temp"]) for t in tables for r in t.to_pylist())
    assert rows == [
        (0, "sensor-1", 21.0),
        (1, "sensor-1", 21.5),
        (3, "sensor-2", 0.5),
        (4, "sensor-3", 7.0),
    ]
