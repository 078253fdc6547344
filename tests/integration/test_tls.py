"""TLS done right: every sink that speaks TLS, against a real TLS endpoint on 127.0.0.1 whose
certificate comes from a CA made by the test (tests/services/tls.py).

For each sink, the same three facts: verification off writes (start-up checks included);
verification on by default refuses the unknown CA before any data moves, with an error that
names the server and the options to set; the sink's CA option, pointing at the test CA, writes
with verification on.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quixsinks.cli import main as cli
from quixsinks.core.errors import DestinationError, OptionError, RetryableError
from quixsinks.sinks.postgresql.client import connect
from quixsinks.sinks.postgresql.options import PostgreSQLOptions
from tests.services.common import free_port
from tests.services.postgres import PostgresServer
from tests.services.redis_server import RedisServer
from tests.services.tls import TestCertificates, TLSFront, make_certificates

CERTIFICATE_REFUSED = "the server's TLS certificate was not accepted"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    """A CA and a server certificate for 127.0.0.1, made now (no key is committed)."""
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def readings(spark: Any) -> Any:
    return spark.sql(
        "SELECT concat('s', cast(id AS string)) AS key, id, cast(id AS double) / 4 AS temp, "
        "timestamp_millis(1714521600000 + id * 1000) AS timestamp FROM range(20)"
    )


def save(df: Any, fmt: str, options: dict[str, str]) -> None:
    writer = df.write.format(fmt).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def check(fmt: str, options: dict[str, str]) -> tuple[int, str]:
    """``python -m quixsinks check``: the options and the destination's preflight."""
    out = io.StringIO()
    argv = ["check", "--format", fmt]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    return cli(argv, out), out.getvalue()


def eventually(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether `condition` holds within `seconds` (polled; for counters another thread
    updates after the client has already given up)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# -- influxdb3: the InfluxDB 3 stand-in behind a TLS front ---------------------------------


@pytest.fixture(scope="module")
def influx_tls(influx_server: Any, certs: TestCertificates) -> Iterator[TLSFront]:
    with TLSFront(influx_server.host, influx_server.port, certs) as front:
        yield front


@pytest.fixture
def influx_over_tls(influx: dict[str, Any], influx_tls: TLSFront) -> dict[str, Any]:
    """The `influx` fixture's database, reached through the TLS front (https)."""
    options = {**influx["options"], "host": influx_tls.url, "measurement": "env"}
    options["fields_keys"] = "temp"
    return {**influx, "options": options, "front": influx_tls}


def influx_count(influx: dict[str, Any]) -> int:
    rows = list(influx["server"].query(influx["database"], "SELECT count(temp) FROM env"))
    return int(rows[0]["count"]) if rows else 0


def influx_writes(influx: dict[str, Any]) -> int:
    return sum(1 for r in influx["server"].requests if r["database"] == influx["database"])


def test_influxdb3_verify_ssl_false_writes_start_up_ping_included(
    readings: Any, influx_over_tls: dict[str, Any]
) -> None:
    front = influx_over_tls["front"]
    before = front.handshakes
    save(readings, "influxdb3", {**influx_over_tls["options"], "verify_ssl": "false"})
    assert influx_count(influx_over_tls) == 20
    assert front.handshakes > before  # it really went through TLS


def test_influxdb3_check_command_honours_verify_ssl_false(
    influx_over_tls: dict[str, Any],
) -> None:
    code, out = check("influxdb3", {**influx_over_tls["options"], "verify_ssl": "false"})
    assert code == 0, out
    assert "destination (preflight): ok" in out
    assert influx_over_tls["options"]["token"] not in out


def test_influxdb3_verifies_by_default_and_names_the_options_to_set(
    readings: Any, influx_over_tls: dict[str, Any]
) -> None:
    front = influx_over_tls["front"]
    refused = front.refused
    with pytest.raises(Exception, match=CERTIFICATE_REFUSED) as raised:
        save(readings, "influxdb3", influx_over_tls["options"])
    message = str(raised.value)
    assert CERTIFICATE_REFUSED in message
    assert front.url in message
    assert "'ssl_ca_cert'" in message
    assert "verify_ssl=false" in message
    assert eventually(lambda: front.refused > refused)  # the client hung up on our CA
    assert influx_writes(influx_over_tls) == 0  # no data moved
    assert influx_over_tls["options"]["token"] not in message


def test_influxdb3_check_command_names_the_certificate_problem(
    influx_over_tls: dict[str, Any],
) -> None:
    code, out = check("influxdb3", influx_over_tls["options"])
    assert code == 1
    assert "destination (preflight): FAILED" in out
    assert CERTIFICATE_REFUSED in out
    assert "'ssl_ca_cert'" in out


def test_influxdb3_ssl_ca_cert_trusts_a_private_ca_with_verification_on(
    readings: Any, influx_over_tls: dict[str, Any], certs: TestCertificates
) -> None:
    options = {**influx_over_tls["options"], "ssl_ca_cert": str(certs.ca_cert)}
    code, out = check("influxdb3", options)
    assert code == 0, out
    save(readings, "influxdb3", options)
    assert influx_count(influx_over_tls) == 20


def test_influxdb3_a_refused_certificate_on_a_write_is_not_retried(
    influx_over_tls: dict[str, Any],
) -> None:
    """The executors' error boundary: a write refused for its certificate (the preflight
    passed on another machine, say) fails at once instead of entering the retry loop."""
    from quixsinks.sinks.influxdb3.client import import_client, translate

    opts = influx_over_tls["options"]
    client = import_client().InfluxDBClient3(
        host=opts["host"], token=opts["token"], database=opts["database"], write_timeout=10_000
    )
    try:
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED") as raised:
            client.write(record="env temp=1 1714521600000", write_precision="ms")
    finally:
        client.close()
    error = translate(raised.value, opts["host"], retention_ok=True)
    assert isinstance(error, DestinationError)
    assert not isinstance(error, RetryableError)
    assert CERTIFICATE_REFUSED in error.message
    assert "'ssl_ca_cert'" in error.message


def test_influxdb3_an_unreadable_ssl_ca_cert_is_named(
    influx_over_tls: dict[str, Any], tmp_path: Path
) -> None:
    options = {**influx_over_tls["options"], "ssl_ca_cert": str(tmp_path / "missing.pem")}
    code, out = check("influxdb3", options)
    assert code == 1
    assert "'ssl_ca_cert'" in out
    assert "missing.pem" in out


# -- influxdb1: InfluxDB 1.x (auth-enabled) behind a TLS front, ssl=true ----------------------


@pytest.fixture(scope="module")
def influx1_tls(influx1_server: Any, certs: TestCertificates) -> Iterator[TLSFront]:
    with TLSFront(influx1_server.host, influx1_server.port, certs) as front:
        yield front


@pytest.fixture
def influx1_over_tls(influx1: dict[str, Any], influx1_tls: TLSFront) -> dict[str, Any]:
    """The `influx1` fixture's database, reached through the TLS front (ssl=true)."""
    options = {**influx1["options"], "port": str(influx1_tls.port), "ssl": "true"}
    options.update(measurement="env", fields_keys="temp")
    return {**influx1, "options": options, "front": influx1_tls}


def test_influxdb1_ssl_with_a_private_ca_writes_with_verification_on(
    readings: Any, influx1_over_tls: dict[str, Any], certs: TestCertificates
) -> None:
    front = influx1_over_tls["front"]
    before = front.handshakes
    options = {**influx1_over_tls["options"], "ssl_ca_cert": str(certs.ca_cert)}
    code, out = check("influxdb1", options)
    assert code == 0, out
    save(readings, "influxdb1", options)
    assert influx_count(influx1_over_tls) == 20
    assert front.handshakes > before  # it really went through TLS


def test_influxdb1_verify_ssl_false_writes(readings: Any, influx1_over_tls: dict[str, Any]) -> None:
    save(readings, "influxdb1", {**influx1_over_tls["options"], "verify_ssl": "false"})
    assert influx_count(influx1_over_tls) == 20


def test_influxdb1_verifies_by_default_and_names_the_options_to_set(
    readings: Any, influx1_over_tls: dict[str, Any]
) -> None:
    with pytest.raises(Exception, match=CERTIFICATE_REFUSED) as raised:
        save(readings, "influxdb1", influx1_over_tls["options"])
    message = str(raised.value)
    assert "'ssl_ca_cert'" in message
    assert "verify_ssl=false" in message
    assert influx_writes(influx1_over_tls) == 0  # no data moved, not even the empty write
    assert influx1_over_tls["options"]["password"] not in message


def test_influxdb1_a_refused_certificate_on_a_write_is_not_retried(
    influx1_over_tls: dict[str, Any],
) -> None:
    """The executors' error boundary: a write refused for its certificate fails at once."""
    from quixsinks.sinks.influxdb1 import InfluxDB1Options
    from quixsinks.sinks.influxdb1.sink import InfluxDB1Sink

    options = {**influx1_over_tls["options"], "retry_max_attempts": "5"}
    sink = InfluxDB1Sink(InfluxDB1Options.from_options(options))
    with pytest.raises(DestinationError, match=CERTIFICATE_REFUSED) as raised:
        sink._send(b"env temp=1 1714521600000\n")
    assert not isinstance(raised.value, RetryableError)
    assert influx_writes(influx1_over_tls) == 0


# -- postgresql: a second server with ssl=on and TCP over TLS only (hostssl) ----------------


@pytest.fixture(scope="module")
def postgres_tls(certs: TestCertificates) -> Iterator[PostgresServer]:
    """A PostgreSQL server of its own (not the session's), presenting the test certificate
    and refusing unencrypted TCP connections (pg_hba.conf: hostssl lines only)."""
    with PostgresServer(tls=certs) as server:
        yield server


@pytest.fixture
def pg_tls(postgres_tls: PostgresServer) -> dict[str, Any]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    postgres_tls.create_database(name)
    options = {
        "host": postgres_tls.host,
        "port": str(postgres_tls.port),
        "user": postgres_tls.user,
        "password": postgres_tls.password,
        "dbname": name,
        "table_name": "readings",
    }
    return {"options": options, "server": postgres_tls, "dbname": name}


def pg_rows(pg: dict[str, Any]) -> int | None:
    """Rows of the sink's table; None when the table does not exist."""
    conn = pg["server"].connect(pg["dbname"])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass('public.readings') IS NOT NULL")
            if not cur.fetchone()[0]:
                return None
            cur.execute("SELECT count(*) FROM public.readings")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def test_postgresql_sslmode_require_writes_over_tls(readings: Any, pg_tls: dict[str, Any]) -> None:
    save(readings, "postgresql", {**pg_tls["options"], "sslmode": "require"})
    assert pg_rows(pg_tls) == 20


def test_postgresql_verify_full_with_sslrootcert_writes(
    readings: Any, pg_tls: dict[str, Any], certs: TestCertificates
) -> None:
    options = {**pg_tls["options"], "sslmode": "verify-full", "sslrootcert": str(certs.ca_cert)}
    code, out = check("postgresql", options)
    assert code == 0, out
    save(readings, "postgresql", options)
    assert pg_rows(pg_tls) == 20


def test_postgresql_the_sinks_connections_are_tls(
    pg_tls: dict[str, Any], certs: TestCertificates
) -> None:
    """The one connect() of the driver and of the tasks: pg_stat_ssl of its own backend."""
    options = PostgreSQLOptions.from_options(
        {**pg_tls["options"], "sslmode": "verify-full", "sslrootcert": str(certs.ca_cert)}
    )
    conn = connect(options)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            ssl_on, version = cur.fetchone()
    finally:
        conn.close()
    assert ssl_on is True
    assert version.startswith("TLSv1.")


def test_postgresql_verify_full_without_the_ca_fails_before_any_data_moves(
    readings: Any, pg_tls: dict[str, Any]
) -> None:
    options = {**pg_tls["options"], "sslmode": "verify-full"}
    with pytest.raises(Exception, match=CERTIFICATE_REFUSED) as raised:
        save(readings, "postgresql", options)
    message = str(raised.value)
    assert CERTIFICATE_REFUSED in message
    assert "'sslrootcert'" in message
    assert "sslmode=require" in message
    assert pg_tls["options"]["password"] not in message
    assert pg_rows(pg_tls) is None  # not even the table was created
    code, out = check("postgresql", options)
    assert code == 1
    assert CERTIFICATE_REFUSED in out


def test_postgresql_a_ca_that_did_not_sign_the_server_is_refused(
    readings: Any, pg_tls: dict[str, Any], tmp_path: Path
) -> None:
    other = make_certificates(tmp_path / "other")
    options = {**pg_tls["options"], "sslmode": "verify-ca", "sslrootcert": str(other.ca_cert)}
    with pytest.raises(Exception, match=CERTIFICATE_REFUSED):
        save(readings, "postgresql", options)
    assert pg_rows(pg_tls) is None


def test_postgresql_unencrypted_connections_are_refused_with_the_option_named(
    pg_tls: dict[str, Any],
) -> None:
    """The server takes TCP over TLS only: sslmode=disable is told what to set."""
    code, out = check("postgresql", {**pg_tls["options"], "sslmode": "disable"})
    assert code == 1
    assert "only encrypted connections" in out
    assert "'sslmode'" in out


def test_postgresql_tls_settings_in_connect_options_are_refused() -> None:
    for extra in ("sslmode=require", "sslrootcert=/etc/ca.pem"):
        with pytest.raises(OptionError, match="not in connect_options"):
            PostgreSQLOptions.from_options(
                {"dbname": "d", "table_name": "t", "connect_options": extra}
            )


# -- redis: redis-server with a TLS port ---------------------------------------------------


@pytest.fixture(scope="module")
def redis_tls(certs: TestCertificates) -> Iterator[dict[str, Any]]:
    """A redis-server of its own with a TLS port (Debian's redis-server is built with TLS)
    next to its plain one (which the launcher uses to see it up)."""
    server = RedisServer()
    tls_port = free_port()
    server.extra_args = [
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(certs.server_cert),
        "--tls-key-file", str(certs.server_key),
        "--tls-ca-cert-file", str(certs.ca_cert),
        "--tls-auth-clients", "no",
    ]  # fmt: skip
    with server:
        yield {"server": server, "port": tls_port}


@pytest.fixture
def redis_over_tls(redis_tls: dict[str, Any]) -> dict[str, Any]:
    server = redis_tls["server"]
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    options = {**server.options, "port": str(redis_tls["port"]), "key_prefix": prefix}
    options["ssl"] = "true"
    return {"options": options, "prefix": prefix, "client": server.client()}


def redis_keys(redis: dict[str, Any]) -> int:
    return len(redis["client"].keys(redis["prefix"] + "*"))


def test_redis_ssl_verify_false_writes_over_tls(
    readings: Any, redis_over_tls: dict[str, Any]
) -> None:
    save(readings, "redis", {**redis_over_tls["options"], "ssl_verify": "false"})
    assert redis_keys(redis_over_tls) == 20


def test_redis_verifies_by_default_and_names_the_options_to_set(
    readings: Any, redis_over_tls: dict[str, Any]
) -> None:
    with pytest.raises(Exception, match=CERTIFICATE_REFUSED) as raised:
        save(readings, "redis", redis_over_tls["options"])
    message = str(raised.value)
    assert CERTIFICATE_REFUSED in message
    assert f"redis 127.0.0.1:{redis_over_tls['options']['port']}" in message
    assert "'ssl_ca_certs'" in message
    assert "ssl_verify=false" in message
    assert redis_over_tls["options"]["password"] not in message
    assert redis_keys(redis_over_tls) == 0


def test_redis_ssl_ca_certs_trusts_a_private_ca_with_verification_on(
    readings: Any, redis_over_tls: dict[str, Any], certs: TestCertificates
) -> None:
    options = {**redis_over_tls["options"], "ssl_ca_certs": str(certs.ca_cert)}
    code, out = check("redis", options)
    assert code == 0, out
    save(readings, "redis", options)
    assert redis_keys(redis_over_tls) == 20


def test_redis_the_tls_port_speaks_only_tls(redis_over_tls: dict[str, Any]) -> None:
    """What the writes above went through: a plain client cannot talk to that port."""
    code, out = check("redis", {**redis_over_tls["options"], "ssl": "false"})
    assert code == 1
    assert "destination (preflight): FAILED" in out


def test_redis_a_refused_certificate_is_not_retried_by_the_tasks(
    redis_over_tls: dict[str, Any],
) -> None:
    """The tasks' error boundary (the preflight passed elsewhere, say): a certificate that
    does not verify is a DestinationError, never a RetryableError for the retry loop."""
    from quixsinks.sinks.redis.client import RedisClient
    from quixsinks.sinks.redis.options import RedisOptions

    client = RedisClient(RedisOptions.from_options(redis_over_tls["options"]))
    with pytest.raises(DestinationError, match=CERTIFICATE_REFUSED) as raised:
        client.on_connection(lambda conn: conn.send_command("PING"))
    assert not isinstance(raised.value, RetryableError)


def test_redis_ssl_ca_certs_without_tls_is_refused(certs: TestCertificates) -> None:
    """A CA bundle with TLS off: the user meant TLS, and would have sent in plain text."""
    from quixsinks.sinks.redis.options import RedisOptions

    with pytest.raises(OptionError, match="TLS is off") as raised:
        RedisOptions.from_options({"ssl_ca_certs": str(certs.ca_cert)})
    assert raised.value.option == "ssl_ca_certs"
    assert RedisOptions.from_options(
        {"url": "rediss://127.0.0.1:6380", "ssl_ca_certs": str(certs.ca_cert)}
    ).ssl_ca_certs == str(certs.ca_cert)


# -- iceberg: the REST catalog stand-in behind a TLS front ---------------------------------


@pytest.fixture(scope="module")
def rest_tls(iceberg_rest: Any, certs: TestCertificates) -> Iterator[TLSFront]:
    port = int(iceberg_rest.url.rsplit(":", 1)[1])
    with TLSFront("127.0.0.1", port, certs) as front:
        yield front


def rest_over_tls(front: TLSFront, **extra: str) -> dict[str, str]:
    return {
        "table_name": f"db.tls_{uuid.uuid4().hex[:8]}",
        "catalog_type": "rest",
        "catalog_uri": front.url,
        "catalog.token": "rest-secret-token",
        "catalog_timeout_seconds": "10",
        **extra,
    }


def test_iceberg_rest_catalog_ssl_cabundle_trusts_a_private_ca(
    readings: Any, rest_tls: TLSFront, iceberg_rest: Any, certs: TestCertificates
) -> None:
    """`catalog.ssl.cabundle` reaches pyiceberg's nested `ssl` property (a flat one was
    ignored without a word, and the private CA refused)."""
    before = rest_tls.handshakes
    options = rest_over_tls(rest_tls, **{"catalog.ssl.cabundle": str(certs.ca_cert)})
    save(readings.select("id", "temp"), "iceberg", options)
    table = iceberg_rest.catalog.load_table(options["table_name"])
    assert table.scan().to_arrow().num_rows == 20
    assert rest_tls.handshakes > before


def test_iceberg_rest_catalog_verifies_by_default(
    readings: Any, rest_tls: TLSFront, iceberg_rest: Any
) -> None:
    options = rest_over_tls(rest_tls)
    refused = rest_tls.refused
    with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        save(readings.select("id", "temp"), "iceberg", options)
    assert eventually(lambda: rest_tls.refused > refused)
    namespace, name = options["table_name"].split(".")
    assert (namespace, name) not in iceberg_rest.catalog.list_tables(namespace)


def test_iceberg_rest_catalog_ssl_cabundle_false_skips_verification(
    readings: Any, rest_tls: TLSFront, iceberg_rest: Any
) -> None:
    options = rest_over_tls(rest_tls, **{"catalog.ssl.cabundle": "false"})
    save(readings.select("id", "temp"), "iceberg", options)
    table = iceberg_rest.catalog.load_table(options["table_name"])
    assert table.scan().to_arrow().num_rows == 20
