"""The `redis` sink through Spark against a real, password-protected redis-server."""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.sinks.redis import RedisSink
from quixsinks.testing import await_pause, faulty, resume

from .streams import run_available_now, write_input_files


def write(df: Any, redis_sink: dict[str, Any], fmt: str = "redis", **options: str) -> None:
    writer = df.write.format(fmt).mode("append")
    for key, value in {**redis_sink["options"], **options}.items():
        writer = writer.option(key, value)
    writer.save()


def keys(redis_sink: dict[str, Any]) -> list[bytes]:
    return sorted(redis_sink["client"].keys(redis_sink["prefix"] + "*"))


def appended(redis_sink: dict[str, Any], key: str, data_type: str) -> list[dict[str, Any]]:
    """The entries of a list (JSON values) or a stream (fields), in order."""
    r, p = redis_sink["client"], redis_sink["prefix"]
    if data_type == "list":
        return [json.loads(v) for v in r.lrange(p + key, 0, -1)]
    return [{k.decode(): v.decode() for k, v in e.items()} for _, e in r.xrange(p + key)]


@pytest.fixture
def readings(spark: Any) -> Any:
    return spark.sql(
        """
        SELECT concat('s', cast(id AS string)) AS key, concat('c', cast(id % 3 AS string)) AS city,
               id, cast(id AS double) / 4 AS temp, id % 2 = 0 AS ok,
               concat('say "', cast(id AS string), '"') AS note
        FROM range(30)
        """
    )


def test_string_values_are_json_of_the_value_columns_like_quix(
    readings: Any, redis_sink: dict[str, Any]
) -> None:
    write(readings, redis_sink)
    r, p = redis_sink["client"], redis_sink["prefix"]
    assert len(keys(redis_sink)) == 30
    assert json.loads(r.get(p + "s7")) == {
        "city": "c1",
        "id": 7,
        "temp": 1.75,
        "ok": False,
        "note": 'say "7"',
    }
    assert r.ttl(p + "s7") == -1


def test_value_serializer_import_path_is_called_per_row(
    readings: Any, redis_sink: dict[str, Any]
) -> None:
    write(readings, redis_sink, value_serializer="json:dumps", value_columns="id,note")
    assert (
        redis_sink["client"].get(redis_sink["prefix"] + "s3") == b'{"id": 3, "note": "say \\"3\\""}'
    )


def test_value_column_is_written_as_is_with_a_ttl(
    readings: Any, redis_sink: dict[str, Any]
) -> None:
    write(readings, redis_sink, value_column="note", ttl_seconds="1000")
    r, p = redis_sink["client"], redis_sink["prefix"]
    assert r.get(p + "s4") == b'say "4"'
    assert 990 < r.ttl(p + "s4") <= 1000


def test_hash_fields_from_a_key_template_replacing_the_hash(
    spark: Any, readings: Any, redis_sink: dict[str, Any]
) -> None:
    r, p = redis_sink["client"], redis_sink["prefix"]
    r.hset(p + "sensor:c1:7", "stale", "x")
    write(
        readings,
        redis_sink,
        data_type="hash",
        key_template="sensor:{city}:{id}",
        value_columns="temp,ok,note",
        hash_replace="true",
    )
    assert r.hgetall(p + "sensor:c1:7") == {b"temp": b"1.75", b"ok": b"false", b"note": b'say "7"'}
    assert len(keys(redis_sink)) == 30
    # without hash_replace other fields stay, nulls are left out
    r.hset(p + "h:1", "kept", "y")
    df = spark.sql("SELECT 'h:1' AS key, 5 AS a, CAST(NULL AS string) AS b")
    write(df, redis_sink, data_type="hash")
    assert r.hgetall(p + "h:1") == {b"kept": b"y", b"a": b"5"}


def test_set_and_zset_with_ttl_column(spark: Any, redis_sink: dict[str, Any]) -> None:
    r, p = redis_sink["client"], redis_sink["prefix"]
    df = spark.sql(
        "SELECT concat('g', cast(id % 2 AS string)) AS key, id AS member, id * 1.5 AS score, "
        "IF(id = 0, NULL, 500) AS ttl FROM range(6)"
    )
    write(
        df.select("key", "member", "ttl"),
        redis_sink,
        data_type="set",
        value_column="member",
        ttl_column="ttl",
    )
    assert r.smembers(p + "g0") == {b"0", b"2", b"4"}
    assert 490 < r.ttl(p + "g1") <= 500
    write(
        df,
        redis_sink,
        data_type="zset",
        key_prefix=p + "z",
        value_column="member",
        score_column="score",
    )
    assert r.zrange(p + "zg1", 0, -1, withscores=True) == [(b"1", 1.5), (b"3", 4.5), (b"5", 7.5)]
    write(
        df,
        redis_sink,
        data_type="zset",
        key_prefix=p + "z",
        value_column="member",
        score_column="score",
    )
    assert r.zcard(p + "zg1") == 3  # ZADD overwrites: a replay changes nothing


@pytest.mark.parametrize("phase", ["write", "commit-before", "commit-after"])
def test_failures_and_replays_leave_each_key_once(
    spark: Any, redis_sink: dict[str, Any], tmp_path: Path, phase: str
) -> None:
    quixsinks.register(spark, faulty(RedisSink))
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    options = {
        **redis_sink["options"],
        "data_type": "hash",
        "key_template": "order:{id}",
        "value_columns": "id,amount",
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
    }
    failure = ""
    try:
        run_available_now(spark, tmp_path / "in", "faulty_redis", tmp_path / "ck", options)
    except Exception as exc:  # the query fails; the restart replays from the checkpoint
        failure = str(exc)
    assert "injected failure" in failure
    run_available_now(spark, tmp_path / "in", "faulty_redis", tmp_path / "ck", options)
    assert (tmp_path / "fired").exists()
    r, p = redis_sink["client"], redis_sink["prefix"]
    assert len(keys(redis_sink)) == len(ids)
    assert sorted(int(r.hget(p + f"order:{i}", "id")) for i in ids) == ids


def test_oom_is_backpressure_until_memory_frees(readings: Any, redis_sink: dict[str, Any]) -> None:
    r = redis_sink["client"]
    used = int(r.info("memory")["used_memory"])
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", str(used + 1024))
    threading.Timer(1.5, lambda: redis_sink["server"].client().config_set("maxmemory", "0")).start()
    try:
        write(
            readings.coalesce(1),
            redis_sink,
            retry_backoff_seconds="0.2",
            retry_max_backoff_seconds="0.5",
            retry_max_attempts="100",
        )
    finally:
        r.config_set("maxmemory", "0")
    assert len(keys(redis_sink)) == 30


def test_oom_past_the_deadline_fails_clearly(readings: Any, redis_sink: dict[str, Any]) -> None:
    r = redis_sink["client"]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", str(int(r.info("memory")["used_memory"]) + 1024))
    try:
        with pytest.raises(Exception, match="OOM"):
            write(
                readings.coalesce(1),
                redis_sink,
                retry_max_attempts="2",
                retry_backoff_seconds="0.1",
            )
    finally:
        r.config_set("maxmemory", "0")


def test_a_restarted_server_is_reconnected_to(readings: Any, redis_sink: dict[str, Any]) -> None:
    server = redis_sink["server"]
    write(readings.coalesce(1), redis_sink)  # pools in the reused Python workers
    server.restart()
    started = time.monotonic()
    write(readings.coalesce(1), redis_sink, retry_backoff_seconds="0.2")
    assert len(keys(redis_sink)) == 30
    assert time.monotonic() - started < 60


def test_wrongtype_is_a_record_error_naming_the_key(
    readings: Any, redis_sink: dict[str, Any]
) -> None:
    redis_sink["client"].rpush(redis_sink["prefix"] + "s5", "x")
    with pytest.raises(
        Exception, match=r"the key '.*s5' \(row \d+\) holds a value of another type"
    ):
        write(readings.coalesce(1), redis_sink, data_type="hash")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"password": "wrong"}, "credentials were refused"),
        ({"port": "9"}, "connection failed"),
        ({"db": "4000"}, "no database 4000"),
        ({"key_template": "x:{nope}"}, "'key_template' names 'nope'"),
        ({"key_template": "x:{id:>3}"}, "plain column names"),
        ({"key_column": "none"}, "no key"),
        ({"data_type": "zset"}, "score_column"),
        ({"data_type": "zset", "score_column": "note"}, "must be numeric"),
        ({"ttl_column": "note"}, "must be an integer"),
        ({"data_type": "queue"}, "data_type"),
        ({"data_type": "list", "ttl_seconds": "5"}, "TTLs apply to"),
        ({"value_serializer": "no_such_module:f"}, "cannot be imported"),
    ],
)
def test_bad_input_fails_before_any_data_moves(
    readings: Any, redis_sink: dict[str, Any], options: dict[str, str], match: str
) -> None:
    with pytest.raises(Exception, match=match) as info:
        write(readings, redis_sink, **options)
    assert redis_sink["server"].password not in str(info.value)
    assert keys(redis_sink) == []


def test_null_keys_fail_naming_the_row_or_are_skipped(
    spark: Any, redis_sink: dict[str, Any]
) -> None:
    df = spark.sql("SELECT IF(id = 3, NULL, cast(id AS string)) AS key, id FROM range(5)").coalesce(
        1
    )
    with pytest.raises(Exception, match="key of row 3 is null"):
        write(df, redis_sink)
    assert keys(redis_sink) == []
    write(df, redis_sink, null_keys="skip")
    assert len(keys(redis_sink)) == 4


def test_the_password_comes_from_redis_password(
    redis_sink: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # read where the options are parsed (the driver's Python), so tested without Spark
    import pyarrow as pa

    from quixsinks.core.batch import SinkBatch, WriteContext
    from quixsinks.sinks.redis import RedisOptions

    monkeypatch.setenv("REDIS_PASSWORD", redis_sink["server"].password)
    options = {k: v for k, v in redis_sink["options"].items() if k != "password"}
    sink = RedisSink(RedisOptions.from_options(options))
    assert redis_sink["server"].password not in repr(sink) + repr(sink.options)
    table = pa.table({"key": ["a"], "v": [1]})
    sink.prepare(table.schema)
    sink.preflight()
    assert sink.records is not None
    sink.write(SinkBatch(table, sink.records, WriteContext("t", 0)))
    assert redis_sink["client"].get(redis_sink["prefix"] + "a") == b'{"v":1}'


def test_a_url_reaches_the_server(readings: Any, redis_sink: dict[str, Any]) -> None:
    server = redis_sink["server"]
    url = f"redis://:{server.password}@127.0.0.1:{server.port}/0"
    write(readings, {**redis_sink, "options": {"url": url, "key_prefix": redis_sink["prefix"]}})
    assert len(keys(redis_sink)) == 30


@pytest.mark.parametrize(
    ("data_type", "phase"),
    [
        ("list", "write"),
        ("list", "commit-before"),
        ("list", "commit-after"),
        ("stream", "commit-after"),
    ],
)
def test_lists_and_streams_get_each_row_exactly_once_across_failures(
    spark: Any, redis_sink: dict[str, Any], tmp_path: Path, data_type: str, phase: str
) -> None:
    quixsinks.register(spark, faulty(RedisSink))
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    options = {
        **redis_sink["options"],
        "data_type": data_type,
        "key_template": "events",
        "value_columns": "id,name",
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
    }
    failure = ""
    try:
        run_available_now(spark, tmp_path / "in", "faulty_redis", tmp_path / "ck", options)
    except Exception as exc:  # the query fails; the restart replays from the checkpoint
        failure = str(exc)
    assert "injected failure" in failure
    run_available_now(spark, tmp_path / "in", "faulty_redis", tmp_path / "ck", options)
    r, p = redis_sink["client"], redis_sink["prefix"]
    entries = appended(redis_sink, "events", data_type)
    assert sorted(int(e["id"]) for e in entries) == ids  # each row once
    assert next(e for e in entries if int(e["id"]) == 0)["name"] == 'name "0", ok'
    # each micro-batch (one input file: ids 0-9, 10-19, 20-29) appended in one piece
    batches = [int(e["id"]) // 10 for e in entries]
    assert sum(1 for a, b in itertools.pairwise(batches) if a != b) == 2
    assert r.keys(p + "_quixsinks:staging:*") == []
    (ledger,) = r.keys(p + "_quixsinks:ledger:*")
    assert sorted(int(b) for b in r.hkeys(ledger)) == [0, 1, 2]


@pytest.mark.parametrize("data_type", ["list", "stream"])
def test_staging_lost_in_a_server_crash_fails_the_commit_and_the_restart_writes_it_once(
    spark: Any, redis_sink: dict[str, Any], tmp_path: Path, data_type: str
) -> None:
    quixsinks.register(spark, faulty(RedisSink))
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)  # batches 0, 1, 2
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    options = {
        **redis_sink["options"],
        "data_type": data_type,
        "key_template": "events",
        "value_columns": "id,name",
        "pause_batch": "1",
        "pause_dir": str(pauses),
        "retry_backoff_seconds": "0.2",
    }
    server, crashes = redis_sink["server"], []

    def crash_between_staging_and_commit() -> None:
        try:
            await_pause(pauses, "write")  # batch 0 committed, batch 1 not staged yet
            server.command("SAVE")
            resume(pauses, "write")
            await_pause(pauses, "commit")  # batch 1 staged, its commit not begun
            server.crash()  # back with the snapshot: batch 1's staging is lost
            crashes.append(True)
        finally:
            resume(pauses, "write")
            resume(pauses, "commit")

    crasher = threading.Thread(target=crash_between_staging_and_commit, daemon=True)
    crasher.start()
    with pytest.raises(Exception, match="CommitError") as failed:  # a loud failure
        run_available_now(spark, tmp_path / "in", "faulty_redis", tmp_path / "ck", options)
    crasher.join(timeout=60)
    assert crashes
    message = str(failed.value)
    assert "micro-batch 1" in message
    assert f"staged 10 {data_type} entries" in message
    assert "the server holds 0" in message
    assert "restart the query from its checkpoint" in message
    r, p = redis_sink["client"], redis_sink["prefix"]
    (ledger,) = r.keys(p + "_quixsinks:ledger:*")
    assert sorted(int(b) for b in r.hkeys(ledger)) == [0]  # batch 1 not recorded
    first = [int(e["id"]) for e in appended(redis_sink, "events", data_type)]
    assert sorted(first) == list(range(first[0], first[0] + 10))  # batch 0's file, only

    run_available_now(spark, tmp_path / "in", "faulty_redis", tmp_path / "ck", options)
    entries = appended(redis_sink, "events", data_type)
    assert sorted(int(e["id"]) for e in entries) == ids  # each row once
    assert [int(e["id"]) for e in entries[:10]] == first
    files = [int(e["id"]) // 10 for e in entries]  # each micro-batch appended in one piece
    assert sum(1 for a, b in itertools.pairwise(files) if a != b) == 2
    assert sorted(int(b) for b in r.hkeys(ledger)) == [0, 1, 2]
    assert r.keys(p + "_quixsinks:staging:*") == []


def test_a_task_of_several_sink_batches_appends_each_row_once(
    spark: Any, redis_sink: dict[str, Any]
) -> None:
    # 25000 rows in one task: Spark hands them over in three Arrow batches, and with
    # max_batch_bytes=1 each one is a SinkBatch staged into the task's one staging hash
    df = spark.sql("SELECT 'many' AS key, id FROM range(25000)").coalesce(1)
    write(df, redis_sink, data_type="list", max_batch_bytes="1")
    assert [e["id"] for e in appended(redis_sink, "many", "list")] == list(range(25000))


def test_a_stream_row_without_fields_is_skipped_and_the_rows_after_it_are_appended(
    spark: Any, redis_sink: dict[str, Any]
) -> None:
    df = spark.sql(
        "SELECT 'gaps' AS key, CASE WHEN id % 4 = 1 THEN NULL ELSE id END AS v FROM range(12)"
    ).coalesce(1)
    write(df, redis_sink, data_type="stream")
    entries = appended(redis_sink, "gaps", "stream")
    assert [int(e["v"]) for e in entries] == [i for i in range(12) if i % 4 != 1]


def test_a_list_commit_onto_a_key_of_another_type_appends_nothing(
    spark: Any, redis_sink: dict[str, Any]
) -> None:
    r, p = redis_sink["client"], redis_sink["prefix"]
    r.set(p + "g1", "x")
    df = spark.sql("SELECT concat('g', cast(id % 2 AS string)) AS key, id FROM range(6)")
    # refused before staging, naming the row (on_error=fail)
    with pytest.raises(Exception, match=r"the key '.*g1' \(row \d+\) holds a value of another"):
        write(df, redis_sink, data_type="list")
    assert r.llen(p + "g0") == 0
    assert r.keys(p + "_quixsinks:staging:*") == []
    r.delete(p + "g1")
    write(df, redis_sink, data_type="list")
    assert r.lrange(p + "g1", 0, -1) == [b'{"id":1}', b'{"id":3}', b'{"id":5}']
    assert r.keys(p + "_quixsinks:*") == []  # a batch write leaves no ledger or staging


def test_stream_maxlen_trims(spark: Any, redis_sink: dict[str, Any]) -> None:
    df = spark.sql("SELECT 's' AS key, id FROM range(500)").coalesce(1)
    write(df, redis_sink, data_type="stream", stream_maxlen="100")
    length = redis_sink["client"].xlen(redis_sink["prefix"] + "s")
    assert 100 <= length < 500


@pytest.mark.parametrize("data_type", ["string", "hash"])
def test_a_cluster_gets_every_key_on_the_node_of_its_slot(
    readings: Any, redis_cluster: Any, data_type: str
) -> None:
    prefix = f"c{data_type}:"
    options = {**redis_cluster.options, "key_prefix": prefix, "data_type": data_type}
    write(readings, {"options": options})
    client = redis_cluster.client()
    found = sorted(client.keys(f"{prefix}*", target_nodes="all"))
    assert len(found) == 30
    nodes_used = {client.keyslot(k) // 5462 for k in found}
    assert len(nodes_used) > 1  # spread over the nodes
    if data_type == "string":
        assert json.loads(client.get(f"{prefix}s7"))["id"] == 7
    else:
        assert client.hget(f"{prefix}s7", "id") == b"7"


def _certificates(folder: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key)."""
    ca_key, ca = folder / f"{name}-ca.key", folder / f"{name}-ca.pem"
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    ext = folder / f"{name}.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    for command in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         f"/CN={name} test CA", "-keyout", ca_key, "-out", ca],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", key, "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-days", "1", "-extfile", ext, "-out", cert],
    ):  # fmt: skip
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
    return ca, cert, key


def test_tls_with_a_verified_certificate_and_a_clear_error_for_an_unknown_ca(
    spark: Any, readings: Any, tmp_path: Path
) -> None:
    """ssl=true against redis-server's TLS port: verified with ssl_ca_certs; a certificate
    from another CA fails at planning, before any data moves, unless ssl_verify=false."""
    from tests.services.common import free_port
    from tests.services.redis_server import RedisServer

    ca, cert, key = _certificates(tmp_path, "server")
    other_ca, _, _ = _certificates(tmp_path, "other")
    tls_port = free_port()
    server = RedisServer()
    server.extra_args = [
        "--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no",
    ]  # fmt: skip
    with server:
        tls = {**server.options, "port": str(tls_port), "ssl": "true", "key_prefix": "tls:"}
        write(readings, {"options": {**tls, "ssl_ca_certs": str(ca)}})
        client = server.client()
        assert len(client.keys("tls:*")) == 30
        assert json.loads(client.get("tls:s7"))["temp"] == 1.75

        with pytest.raises(Exception, match=r"(?i)certificate verify failed") as failed:
            write(readings, {"options": {**tls, "ssl_ca_certs": str(other_ca)}}, key_prefix="x:")
        assert server.password not in str(failed.value)
        assert client.keys("x:*") == []  # refused before any task wrote

        write(
            readings,
            {"options": {**tls, "ssl_ca_certs": str(other_ca), "ssl_verify": "false"}},
            key_prefix="unverified:",
        )
        assert len(client.keys("unverified:*")) == 30
