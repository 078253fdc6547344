"""Every constructor parameter of Quix Streams 3.28.1's sinks, and the quixsinks option that
takes its place: the tables of docs/migrating-from-quix.md (``docs/generate.py`` renders them
between ``<!-- quix-parameters:FORMAT -->`` and ``<!-- /quix-parameters -->``).

A parameter whose name is an option of the format, or one of its aliases, maps to it by
itself; every other parameter has a note here. tests/unit/test_migration_guide.py checks
both ways: each listed parameter is mapped or explained, and the lists equal the pinned
Quix Streams' signatures (so a Quix upgrade that adds a parameter fails the suite until the
guide says what becomes of it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Quix's connection callbacks, on every sink that connects
CALLBACKS = (
    "none: a Spark task has no connection callbacks. A failed connection is retried "
    "(`retry_*` options), then fails the task and the query: watch it with a "
    "`StreamingQueryListener` or `query.exception()`"
)


@dataclass(frozen=True)
class QuixSink:
    """One Quix sink class: where it lives, its parameters in order, notes for those that
    are not an option (or alias) of the quixsinks format."""

    format: str
    module: str
    name: str
    parameters: tuple[str, ...]
    notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for callback in ("on_client_connect_success", "on_client_connect_failure"):
            if callback in self.parameters:
                self.notes.setdefault(callback, CALLBACKS)


SINKS: tuple[QuixSink, ...] = (
    QuixSink(
        "csvfile",
        "quixstreams.sinks.core.csv",
        "CSVSink",
        ("path", "dialect", "key_serializer", "value_serializer"),
    ),
    QuixSink(
        "file",
        "quixstreams.sinks.community.file.local",
        "LocalFileSink",
        ("append", "directory", "format"),
        {"directory": "`path` (a local folder, `s3://`, `az://` or `gs://` URI)"},
    ),
    QuixSink(
        "file",
        "quixstreams.sinks.community.file.s3",
        "S3FileSink",
        (
            "bucket",
            "aws_access_key_id",
            "aws_secret_access_key",
            "region_name",
            "endpoint_url",
            "directory",
            "format",
            "on_client_connect_success",
            "on_client_connect_failure",
            "kwargs",
        ),
        {
            "bucket": "`path` = `s3://<bucket>/<directory>`",
            "directory": "`path` = `s3://<bucket>/<directory>`",
            "kwargs": "`aws_session_token`, `storage_timeout_seconds`; other boto3 client "
            "settings come from the environment (`AWS_*`)",
        },
    ),
    QuixSink(
        "file",
        "quixstreams.sinks.community.file.azure",
        "AzureFileSink",
        (
            "azure_connection_string",
            "azure_container",
            "directory",
            "format",
            "on_client_connect_success",
            "on_client_connect_failure",
        ),
        {"directory": "`path` = `az://<container>/<directory>`"},
    ),
    QuixSink(
        "influxdb3",
        "quixstreams.sinks.core.influxdb3",
        "InfluxDB3Sink",
        (
            "token",
            "host",
            "organization_id",
            "database",
            "measurement",
            "fields_keys",
            "tags_keys",
            "time_setter",
            "time_precision",
            "allow_missing_fields",
            "include_metadata_tags",
            "convert_ints_to_floats",
            "batch_size",
            "enable_gzip",
            "request_timeout_ms",
            "debug",
            "on_client_connect_success",
            "on_client_connect_failure",
            "raise_on_retention_violation",
            "verify_ssl",
        ),
    ),
    QuixSink(
        "influxdb1",
        "quixstreams.sinks.community.influxdb1",
        "InfluxDB1Sink",
        (
            "host",
            "database",
            "measurement",
            "port",
            "username",
            "password",
            "fields_keys",
            "tags_keys",
            "time_setter",
            "time_precision",
            "allow_missing_fields",
            "include_metadata_tags",
            "convert_ints_to_floats",
            "batch_size",
            "request_timeout_ms",
            "on_client_connect_success",
            "on_client_connect_failure",
        ),
    ),
    QuixSink(
        "postgresql",
        "quixstreams.sinks.community.postgresql",
        "PostgreSQLSink",
        (
            "host",
            "port",
            "dbname",
            "user",
            "password",
            "table_name",
            "schema_name",
            "schema_auto_update",
            "connection_timeout_seconds",
            "statement_timeout_seconds",
            "primary_key_columns",
            "upsert_on_primary_key",
            "on_conflict_do_nothing",
            "include_metadata",
            "on_client_connect_success",
            "on_client_connect_failure",
            "kwargs",
        ),
        {"kwargs": "`connect_options` (libpq `keyword=value` pairs), `sslmode`, `sslrootcert`"},
    ),
    QuixSink(
        "redis",
        "quixstreams.sinks.community.redis",
        "RedisSink",
        (
            "host",
            "port",
            "db",
            "value_serializer",
            "key_serializer",
            "password",
            "socket_timeout",
            "on_client_connect_success",
            "on_client_connect_failure",
            "kwargs",
        ),
        {"kwargs": "`username`, `url`, `ssl`, `ssl_ca_certs`, `ssl_verify`, `cluster`"},
    ),
    QuixSink(
        "bigquery",
        "quixstreams.sinks.community.bigquery",
        "BigQuerySink",
        (
            "project_id",
            "location",
            "dataset_id",
            "table_name",
            "service_account_json",
            "schema_auto_update",
            "ddl_timeout",
            "insert_timeout",
            "retry_timeout",
            "on_client_connect_success",
            "on_client_connect_failure",
            "kwargs",
        ),
        {"kwargs": "`api_endpoint`, `grpc_endpoint` (the client's endpoints)"},
    ),
    QuixSink(
        "kinesis",
        "quixstreams.sinks.community.kinesis",
        "KinesisSink",
        (
            "stream_name",
            "aws_access_key_id",
            "aws_secret_access_key",
            "region_name",
            "aws_endpoint_url",
            "value_serializer",
            "key_serializer",
            "on_client_connect_success",
            "on_client_connect_failure",
            "kwargs",
        ),
        {
            "kwargs": "`aws_session_token`, `request_timeout_seconds`; other boto3 client "
            "settings come from the environment (`AWS_*`)",
        },
    ),
    QuixSink(
        "pubsub",
        "quixstreams.sinks.community.pubsub",
        "PubSubSink",
        (
            "project_id",
            "topic_id",
            "service_account_json",
            "value_serializer",
            "key_serializer",
            "flush_timeout",
            "on_client_connect_success",
            "on_client_connect_failure",
            "kwargs",
        ),
        {
            "kwargs": "`emulator_host`; the publisher's batch settings `max_messages`, "
            "`max_bytes`, `max_latency`; its flow control `max_outstanding_messages`, "
            "`max_outstanding_bytes`"
        },
    ),
    QuixSink(
        "mqtt",
        "quixstreams.sinks.community.mqtt",
        "MQTTSink",
        (
            "client_id",
            "server",
            "port",
            "topic_root",
            "username",
            "password",
            "version",
            "tls_enabled",
            "key_serializer",
            "value_serializer",
            "qos",
            "mqtt_flush_timeout_seconds",
            "retain",
            "properties",
            "on_client_connect_success",
            "on_client_connect_failure",
        ),
    ),
    QuixSink(
        "iceberg",
        "quixstreams.sinks.community.iceberg",
        "IcebergSink",
        (
            "table_name",
            "config",
            "data_catalog_spec",
            "schema",
            "partition_spec",
            "on_client_connect_success",
            "on_client_connect_failure",
        ),
        {
            "config": "`AWSIcebergConfig(aws_s3_uri, aws_region, aws_access_key_id, "
            "aws_secret_access_key, aws_session_token)` becomes the options `warehouse` "
            "(alias `aws_s3_uri`), `aws_region`, `aws_access_key_id`, "
            "`aws_secret_access_key`, `aws_session_token` (and `aws_endpoint_url`)",
            "schema": "none: the table's columns come from the DataFrame (or the JSON values) "
            "and evolve by name (`schema_mode`); an existing table's schema is kept",
            "partition_spec": "`partition_by` (e.g. `_key,day(_timestamp)`, Quix's default)",
        },
    ),
    QuixSink(
        "tsdatalake",
        "quixstreams.sinks.core.quix_ts_datalake_sink",
        "QuixTSDataLakeSink",
        (
            "s3_prefix",
            "table_name",
            "workspace_id",
            "hive_columns",
            "timestamp_column",
            "sort_column",
            "catalog_url",
            "catalog_auth_token",
            "query_api_url",
            "query_api_auth_token",
            "auto_discover",
            "namespace",
            "auto_create_bucket",
            "max_workers",
            "stats_columns",
            "row_group_rows",
            "stream_timeout_ms",
            "on_stream_timeout",
            "silence_azure_http_logs",
            "on_client_connect_success",
            "on_client_connect_failure",
        ),
        {
            "sort_column": "not ported yet (added to Quix after our port): the table's "
            "preferred ordering property is not written",
            "query_api_url": "not ported yet (added to Quix after our port)",
            "query_api_auth_token": "not ported yet (added to Quix after our port)",
            "stats_columns": "not ported yet: every column gets Parquet statistics "
            "(pyarrow's default)",
            "row_group_rows": "not ported yet: pyarrow's default row-group size; "
            "`max_rows_per_file` bounds a file",
            "silence_azure_http_logs": "none: the Azure SDK logs each request at INFO on "
            "`azure.core.pipeline.policies.http_logging_policy`; raise that logger's level",
        },
    ),
)
