"""Options of the ``kinesis`` sink (Quix KinesisSink's names, snake_case or camelCase)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from quixsinks.core.errors import OptionError
from quixsinks.core.options import check_import_path, option
from quixsinks.core.sink import CommonOptions

__all__ = ["DedupeIdMode", "KinesisOptions"]

#: where a record's dedupe id goes (see docs/sinks/kinesis.md, "Dedupe ids")
DedupeIdMode = Literal["auto", "field", "prefix", "none"]

#: Kinesis's stream name pattern
_STREAM_NAME = r"[a-zA-Z0-9_.-]{1,128}"


@dataclass(frozen=True, kw_only=True)
class KinesisOptions(CommonOptions):
    sink_name: ClassVar[str] = "kinesis"

    stream_name: str = option(
        pattern=_STREAM_NAME,
        pattern_name="a Kinesis stream name (1-128 letters, digits, '_', '-' or '.')",
        doc="The Kinesis data stream to put records into",
    )
    aws_access_key_id: str | None = option(
        None,
        env="AWS_ACCESS_KEY_ID",
        doc="Access key id (default: AWS_ACCESS_KEY_ID, else boto3's credential chain)",
    )
    aws_secret_access_key: str | None = option(
        None,
        secret=True,
        env="AWS_SECRET_ACCESS_KEY",
        doc="Secret access key (default: AWS_SECRET_ACCESS_KEY)",
    )
    aws_session_token: str | None = option(
        None,
        secret=True,
        env="AWS_SESSION_TOKEN",
        doc="Session token of temporary credentials (default: AWS_SESSION_TOKEN)",
    )
    region_name: str | None = option(
        None, env="AWS_REGION", doc="AWS region (default: AWS_REGION, else boto3's default)"
    )
    endpoint_url: str | None = option(
        None,
        env="AWS_ENDPOINT_URL_KINESIS",
        aliases=("aws_endpoint_url",),
        doc="Kinesis endpoint URL, e.g. a local test server (default: AWS_ENDPOINT_URL_KINESIS; "
        "Quix's name: aws_endpoint_url)",
    )
    data_column: str | None = option(
        None,
        one_of="data",
        doc="Send this column as each record's data as it is (bytes, or text as UTF-8); "
        "default: the value as JSON (a Kafka JSON value as the producer wrote it, null for a "
        "tombstone; else a JSON object of the value columns)",
    )
    value_serializer: str | None = option(
        None,
        one_of="data",
        doc="Import path (module:function) called per row on the message's own value (as "
        "json.loads gives it; None for a tombstone), returning str or bytes; json:dumps "
        "gives Quix's bytes",
    )
    partition_key_column: str | None = option(
        None,
        one_of="key",
        doc="Column holding each record's partition key; default: the key column",
    )
    key_serializer: str | None = option(
        None,
        one_of="key",
        doc="Import path (module:function) called per row on a non-null key, returning str "
        "(default: the key as text, bytes decoded as UTF-8 as Quix's bytes.decode, bytes "
        "that are not UTF-8 with replacement characters)",
    )
    explicit_hash_key_column: str | None = option(
        None,
        doc="Column holding an explicit hash key (a decimal integer 0..2^128-1) that picks the "
        "shard instead of the partition key's hash",
    )
    null_partition_keys: Literal["error", "dedupe_id"] = option(
        "error",
        doc="A row whose partition key is null: fail naming the row, or use the record's dedupe "
        "id as its partition key (spreads such rows over the shards)",
    )
    invalid_records: Literal["error", "skip"] = option(
        "error",
        doc="A record Kinesis would refuse (over 1 MiB, a partition key over 256 characters, an "
        "explicit hash key out of range): fail naming the row, or skip it and count it",
    )
    dedupe_id: DedupeIdMode = option(
        "auto",
        doc="Where each record's deterministic dedupe id goes: field (a member of the JSON "
        "object), prefix (32 hex characters and a space before the data), none; auto: field "
        "for the default JSON values, prefix for data_column and value_serializer",
    )
    dedupe_id_field: str = option(
        "_dedupe_id", doc="dedupe_id=field: the JSON member holding the id (put first)"
    )
    ordered: bool = option(
        False,
        doc="Keep the order of records per partition key through resends: a request then "
        "holds at most one record per key (slower with few keys)",
    )
    max_inflight: int = option(4, minimum=1, doc="PutRecords requests in flight at once per task")
    records_per_request: int = option(
        500,
        minimum=1,
        maximum=500,
        doc="Records per PutRecords request (Kinesis allows at most 500)",
    )
    request_timeout_seconds: float = option(
        30.0,
        positive=True,
        doc="Seconds to wait for an answer to one request (and, at most 10 of them, to connect)",
    )

    def validate(self) -> None:
        super().validate()
        if self.dedupe_id == "field" and (self.data_column or self.value_serializer):
            raise OptionError(
                "kinesis: dedupe_id=field adds a member to the JSON object the sink builds; "
                "with 'data_column' or 'value_serializer' the data is yours: use "
                "dedupe_id=prefix or none",
                option="dedupe_id",
                value=self.dedupe_id,
                allowed=("auto", "prefix", "none"),
            )
        for name in ("key_serializer", "value_serializer"):
            check_import_path(getattr(self, name), option_name=name)

    @property
    def dedupe_placement(self) -> Literal["field", "prefix", "none"]:
        """``dedupe_id`` with auto resolved."""
        if self.dedupe_id != "auto":
            return self.dedupe_id
        return "prefix" if (self.data_column or self.value_serializer) else "field"
