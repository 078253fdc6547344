"""The `kinesis` sink through Spark against kinesalite (and a fault proxy in front of it).

Every test reads the stream back with GetRecords and checks each input row: there at least
once always, exactly once when no fault was injected, and exactly once after dropping the
records whose dedupe id was seen before.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.sinks.kinesis import KinesisSink
from quixsinks.testing import faulty
from tests.services.kinesis_faults import KinesisFaultProxy

from .streams import run_available_now, write_input_files

SECRET = "kinesis-secret-never-shown-1234"


def write(df: Any, kinesis_sink: dict[str, Any], fmt: str = "kinesis", **options: str) -> None:
    writer = df.write.format(fmt).mode("append")
    for key, value in {**kinesis_sink["options"], **options}.items():
        writer = writer.option(key, value)
    writer.save()


def records(kinesis_sink: dict[str, Any]) -> list[dict[str, Any]]:
    return list(kinesis_sink["server"].read_all(kinesis_sink["stream"]))


def values(kinesis_sink: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(r["Data"]) for r in records(kinesis_sink)]


def deduplicated(found: list[dict[str, Any]], field: str = "_dedupe_id") -> list[dict[str, Any]]:
    """The consumer-side recipe of docs/sinks/kinesis.md: keep the first record of each id."""
    seen: set[str] = set()
    out = []
    for value in found:
        if value[field] not in seen:
            seen.add(value[field])
            out.append(value)
    return out


@pytest.fixture
def readings(spark: Any) -> Any:
    return spark.sql(
        """
        SELECT concat('s', cast(id % 10 AS string)) AS key, id, cast(id AS double) / 4 AS temp,
               concat('say "', cast(id AS string), '"') AS note
        FROM range(30)
        """
    )


def test_values_are_json_with_a_dedupe_id_and_the_key_as_partition_key(
    readings: Any, kinesis_sink: dict[str, Any]
) -> None:
    write(readings, kinesis_sink)
    found = records(kinesis_sink)
    assert len(found) == 30
    by_id = {json.loads(r["Data"])["id"]: r for r in found}
    assert sorted(by_id) == list(range(30))
    first = json.loads(by_id[7]["Data"])
    assert next(iter(first)) == "_dedupe_id"
    assert len(first.pop("_dedupe_id")) == 32
    assert first == {"id": 7, "temp": 1.75, "note": 'say "7"'}
    assert by_id[7]["PartitionKey"] == "s7"
    assert len({json.loads(r["Data"])["_dedupe_id"] for r in found}) == 30


def test_a_data_column_goes_as_is_with_a_prefixed_id_and_an_explicit_hash_key(
    spark: Any, kinesis_sink: dict[str, Any]
) -> None:
    df = spark.sql(
        "SELECT cast(id AS string) AS pk, '0' AS hk, concat('raw-', cast(id AS string)) AS body "
        "FROM range(20)"
    )
    write(
        df,
        kinesis_sink,
        data_column="body",
        partition_key_column="pk",
        explicit_hash_key_column="hk",
    )
    found = records(kinesis_sink)
    assert {r["Data"][33:] for r in found} == {f"raw-{i}".encode() for i in range(20)}
    assert all(r["Data"][32:33] == b" " for r in found)
    assert len({r["Data"][:32] for r in found}) == 20
    # hash key 0 belongs to the first shard: every record is there
    client = kinesis_sink["server"].client()
    shards = client.list_shards(StreamName=kinesis_sink["stream"])["Shards"]
    first = min(shards, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    iterator = client.get_shard_iterator(
        StreamName=kinesis_sink["stream"],
        ShardId=first["ShardId"],
        ShardIteratorType="TRIM_HORIZON",
    )["ShardIterator"]
    assert len(client.get_records(ShardIterator=iterator)["Records"]) == 20


def test_throttled_entries_and_calls_and_a_lost_answer_lose_nothing(
    spark: Any, kinesis_sink: dict[str, Any]
) -> None:
    df = spark.sql("SELECT cast(id % 37 AS string) AS key, id FROM range(3000)").repartition(3)
    server = kinesis_sink["server"]
    with KinesisFaultProxy(server.endpoint_url, throttle_fraction=0.1, seed=7) as proxy:
        proxy.throttle_calls(3)
        proxy.drop_responses(2)
        write(df, kinesis_sink, endpoint_url=proxy.url, max_inflight="3")
    assert proxy.entries_refused > 100
    assert (proxy.calls_throttled, proxy.responses_dropped) == (3, 2)
    found = values(kinesis_sink)
    assert set(Counter(v["id"] for v in found)) == set(range(3000))  # every row at least once
    assert sorted(v["id"] for v in deduplicated(found)) == list(range(3000))  # once after dedupe
    assert len(found) > 3000  # the dropped answers' records were resent: duplicates


def test_past_the_deadline_the_task_fails_counting_what_was_not_delivered(
    spark: Any, kinesis_sink: dict[str, Any]
) -> None:
    df = spark.sql("SELECT cast(id AS string) AS key, id FROM range(40)").coalesce(1)
    server = kinesis_sink["server"]
    with (
        KinesisFaultProxy(server.endpoint_url, throttle_fraction=1.0) as proxy,
        pytest.raises(Exception, match=r"40 of 40 item\(s\) not delivered") as info,
    ):
        write(
            df,
            kinesis_sink,
            endpoint_url=proxy.url,
            retry_deadline_seconds="0.5",
            retry_max_attempts="100",
        )
    assert "DeliveryError" in str(info.value)
    assert records(kinesis_sink) == []


def test_ordered_keeps_each_keys_order_through_resends(
    spark: Any, kinesis_sink: dict[str, Any]
) -> None:
    df = spark.sql("SELECT concat('k', cast(id % 4 AS string)) AS key, id FROM range(160)")
    server = kinesis_sink["server"]
    with KinesisFaultProxy(server.endpoint_url, throttle_fraction=0.3, seed=3) as proxy:
        write(df.coalesce(1), kinesis_sink, endpoint_url=proxy.url, ordered="true")
    assert proxy.entries_refused > 20
    per_key: dict[str, list[int]] = defaultdict(list)
    for record in records(kinesis_sink):  # per shard, in sequence order
        per_key[record["PartitionKey"]].append(json.loads(record["Data"])["id"])
    assert sorted(per_key) == ["k0", "k1", "k2", "k3"]
    for key, ids in per_key.items():
        assert ids == sorted(ids) == [i for i in range(160) if f"k{i % 4}" == key]


@pytest.mark.parametrize("phase", ["write", "commit-after"])
def test_streaming_replays_carry_the_same_dedupe_ids(
    spark: Any, kinesis_sink: dict[str, Any], tmp_path: Path, phase: str
) -> None:
    quixsinks.register(spark, faulty(KinesisSink))
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    options = {
        **kinesis_sink["options"],
        "value_columns": "id,name",
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
    }
    failure = ""
    try:
        run_available_now(spark, tmp_path / "in", "faulty_kinesis", tmp_path / "ck", options)
    except Exception as exc:  # the query fails; the restart replays from the checkpoint
        failure = str(exc)
    assert "injected failure" in failure
    run_available_now(spark, tmp_path / "in", "faulty_kinesis", tmp_path / "ck", options)
    found = values(kinesis_sink)
    assert sorted(set(v["id"] for v in found)) == ids
    assert sorted(v["id"] for v in deduplicated(found)) == ids
    if phase == "commit-after":  # batch 1 was put twice, with the same ids
        assert len(found) == len(ids) + 10


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"stream_name": "no-such-stream"}, "KinesisStreamNotFoundError.*no-such-stream"),
        ({"partition_key_column": "long"}, r"row 2 .*partition key has 300 characters"),
        ({"explicit_hash_key_column": "hk"}, r"row 2 .*explicit hash key '3402823669209384634"),
        ({"partition_key_column": "maybe"}, r"row 2 .*null partition key"),
        ({"data_column": "id"}, "'data_column' 'id' has type int64"),
        ({"partition_key_column": "nope"}, "'partition_key_column' names 'nope'"),
        ({"streamname": "x", "stream_nam": "y"}, "unknown option 'stream_nam'"),
        ({"records_per_request": "501"}, r"records_per_request.*<= 500"),
    ],
)
def test_bad_input_fails_before_any_data_moves(
    spark: Any, kinesis_sink: dict[str, Any], options: dict[str, str], match: str
) -> None:
    df = spark.sql(
        """
        SELECT cast(id AS string) AS key, id,
               IF(id = 2, repeat('x', 300), 'short') AS long,
               IF(id = 2, '340282366920938463463374607431768211456', '1') AS hk,
               IF(id = 2, NULL, 'p') AS maybe
        FROM range(5)
        """
    ).coalesce(1)
    given = {**kinesis_sink["options"], "aws_secret_access_key": SECRET}
    if "streamname" in options:
        given.pop("stream_name")
    with pytest.raises(Exception, match=match) as info:
        write(df, {**kinesis_sink, "options": given}, **options)
    assert SECRET not in str(info.value)
    assert records(kinesis_sink) == []


def test_null_keys_may_fall_back_to_the_dedupe_id_and_oversize_records_be_skipped(
    spark: Any, kinesis_sink: dict[str, Any]
) -> None:
    df = spark.sql(
        "SELECT IF(id % 2 = 0, NULL, cast(id AS string)) AS key, id, "
        "IF(id = 3, repeat('x', 1048576), 'ok') AS body FROM range(6)"
    ).coalesce(1)
    write(df, kinesis_sink, null_partition_keys="dedupe_id", invalid_records="skip")
    found = records(kinesis_sink)
    assert sorted(json.loads(r["Data"])["id"] for r in found) == [0, 1, 2, 4, 5]
    for record in found:
        value = json.loads(record["Data"])
        expected = value["_dedupe_id"] if value["id"] % 2 == 0 else str(value["id"])
        assert record["PartitionKey"] == expected


def test_an_unreachable_endpoint_fails_at_planning_without_the_secret(
    readings: Any, kinesis_sink: dict[str, Any]
) -> None:
    with pytest.raises(Exception, match="DescribeStreamSummary") as info:
        write(
            readings,
            kinesis_sink,
            endpoint_url="http://127.0.0.1:9",
            aws_secret_access_key=SECRET,
            retry_deadline_seconds="0.2",
        )
    assert SECRET not in str(info.value)
    sink = KinesisSink(
        KinesisSink.options_class.from_options(
            {**kinesis_sink["options"], "aws_secret_access_key": SECRET}
        )
    )
    assert SECRET not in repr(sink)
    assert SECRET not in repr(sink.options)


def test_credentials_come_from_the_aws_environment_on_the_driver(
    kinesis_sink: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    options = dict(kinesis_sink["options"])
    for name, env in (
        ("aws_access_key_id", "AWS_ACCESS_KEY_ID"),
        ("region_name", "AWS_REGION"),
        ("endpoint_url", "AWS_ENDPOINT_URL_KINESIS"),
    ):
        monkeypatch.setenv(env, options.pop(name))
    options.pop("aws_secret_access_key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    parsed = KinesisSink.options_class.from_options(options)
    assert parsed.endpoint_url == kinesis_sink["server"].endpoint_url
    assert parsed.aws_secret_access_key == SECRET
    assert SECRET not in repr(parsed)
    assert SECRET not in str(parsed.redacted())
    sink = KinesisSink(parsed)
    sink.preflight()  # kinesalite takes any credentials: the stream is found


def test_hostile_names_and_values_round_trip(spark: Any, kinesis_sink: dict[str, Any]) -> None:
    df = spark.sql(
        """
        SELECT concat('ключ "', cast(id AS string), '" 🔑\\n') AS key, id AS `we"ird col`,
               concat('\\u0000 ', cast(id AS string), ' \\\\ "') AS `ü`
        FROM range(5)
        """
    )
    write(df, kinesis_sink)
    found = records(kinesis_sink)
    assert sorted(r["PartitionKey"] for r in found) == [f'ключ "{i}" 🔑\n' for i in range(5)]
    column = 'we"ird col'
    for record in found:
        value = json.loads(record["Data"])
        assert value["ü"] == "\x00 " + str(value[column]) + ' \\ "'


def test_moto_api_parity_wrong_region_and_refused_credentials_fail_at_planning(
    readings: Any, s3_server: Any
) -> None:
    """moto_server (which scopes streams by region and checks IAM when asked) for what
    kinesalite does not check: the same writes, a wrong region, refused credentials."""
    stream = f"parity-{uuid.uuid4().hex[:8]}"
    kinesis = s3_server.client("kinesis")
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(
        StreamName=stream, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
    )
    base = {
        **{k: str(v) for k, v in s3_server.options().items()},
        "stream_name": stream,
        "retry_deadline_seconds": "1",
    }
    where = {"options": base}
    write(readings, where)
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(
        StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    landed = kinesis.get_records(ShardIterator=iterator)["Records"]
    assert sorted(json.loads(r["Data"])["id"] for r in landed) == list(range(30))

    with pytest.raises(Exception, match=f"KinesisStreamNotFoundError.*{stream}"):
        write(readings, where, region_name="eu-west-1")
    denied = s3_server.create_user(f"u{uuid.uuid4().hex[:6]}", ["s3:*"])
    with s3_server.enforce_auth():
        with pytest.raises(Exception, match="DestinationAccessDeniedError") as info:
            write(readings, where, aws_secret_access_key=SECRET)
        assert SECRET not in str(info.value)
        with pytest.raises(Exception, match="DestinationAccessDeniedError"):
            write(
                readings,
                where,
                aws_access_key_id=denied["aws_access_key_id"],
                aws_secret_access_key=denied["aws_secret_access_key"],
            )


def test_a_slow_server_times_out_and_the_resend_loses_nothing(
    spark: Any, kinesis_sink: dict[str, Any]
) -> None:
    df = spark.sql("SELECT cast(id % 11 AS string) AS key, id FROM range(1500)").coalesce(1)
    server = kinesis_sink["server"]
    with KinesisFaultProxy(server.endpoint_url) as proxy:
        proxy.delay_responses(2, 2.0)
        write(
            df,
            kinesis_sink,
            endpoint_url=proxy.url,
            request_timeout_seconds="0.5",
            max_inflight="1",
        )
    assert proxy.responses_delayed == 2
    found = values(kinesis_sink)
    assert sorted(v["id"] for v in deduplicated(found)) == list(range(1500))
    assert len(found) == 1500 + 2 * 500  # the timed-out calls had landed: resent, same ids
