"""Options of the ``bigquery`` sink (Quix BigQuerySink's names, snake_case or camelCase)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from quixsinks.core.errors import OptionError
from quixsinks.core.options import option
from quixsinks.core.sink import LedgerOptions

__all__ = [
    "MAX_APPEND_BYTES",
    "MAX_TABLE_NAME_BYTES",
    "STAGING_SUFFIX",
    "BigQueryOptions",
    "split_table_id",
]

#: the staging table of a table (exactly-once mode) is its name with this suffix
STAGING_SUFFIX = "_qs_staging"
#: BigQuery's limit for one AppendRows request (10 MB); the sink stays below it
MAX_APPEND_BYTES = 10 * 1000 * 1000

#: names BigQuery takes (matched whole): a project id, or a domain-scoped one
#: (``example.com:my-project``); datasets: letters, digits and _; tables: also - and spaces
_PROJECT = r"(?i)(?:[a-z0-9][a-z0-9.-]{0,62}:)?[a-z][a-z0-9-]{0,62}"
_DATASET = r"[A-Za-z0-9_]{1,1024}"
_TABLE = r"[\w\- ]{1,1024}"
#: BigQuery's limit for a table name, in UTF-8 bytes
MAX_TABLE_NAME_BYTES = 1024


@dataclass(frozen=True, kw_only=True)
class BigQueryOptions(LedgerOptions):
    sink_name: ClassVar[str] = "bigquery"

    project_id: str = option(
        env="GOOGLE_CLOUD_PROJECT",
        pattern=_PROJECT,
        doc="Google Cloud project of the dataset (default: the GOOGLE_CLOUD_PROJECT variable)",
    )
    location: str | None = option(
        None, doc="Location of a dataset the sink creates, and of its jobs (e.g. EU, us-east1)"
    )
    dataset_id: str = option(pattern=_DATASET, doc="Dataset of the table (created when missing)")
    table_name: str = option(pattern=_TABLE, doc="Target table (created when missing)")
    service_account_json: str | None = option(
        None,
        secret=True,
        doc="A service account key: its JSON text, or the path of its file; default: "
        "application-default credentials",
    )
    schema_auto_update: bool = option(
        True, doc="Create the dataset and table when missing; add NULLABLE columns for new fields"
    )
    ddl_timeout: float = option(
        10.0,
        positive=True,
        doc="Seconds for one REST request (dataset/table create, get, patch; ledger reads; "
        "query submission) and one Storage Write stream request (create, finalize, commit)",
    )
    insert_timeout: float = option(
        10.0,
        positive=True,
        doc="Seconds for one append request (times the requests of a batch) or query job step",
    )
    retry_timeout: float = option(
        30.0,
        minimum=0,
        doc="Seconds the client libraries may retry one call, REST and Storage Write (their "
        "defaults run to 600 s, 1200 s for CreateWriteStream)",
    )
    api_endpoint: str | None = option(
        None,
        doc="REST endpoint, e.g. http://127.0.0.1:9050 for an emulator (default: Google's); "
        "an http:// endpoint also makes the gRPC channel plain text and, without "
        "service_account_json, the credentials anonymous",
    )
    grpc_endpoint: str | None = option(
        None, doc="host:port of the Storage Write API (default: Google's)"
    )
    include_metadata: bool = option(
        True,
        doc="Add Quix's columns `timestamp` (TIMESTAMP, the record time) and `__key` (the "
        "record key) when the record has a time or a key",
    )
    json_columns: tuple[str, ...] = option(
        (),
        doc="Comma-separated value columns written as BigQuery JSON (structs, maps and "
        "arrays as their JSON text; a Kafka JSON value's fields by name)",
    )
    write_mode: Literal["exactly-once", "direct"] = option(
        "exactly-once",
        doc="exactly-once: PENDING streams into a staging table, one driver transaction "
        "with a ledger row; direct: PENDING streams straight into the table, committed by "
        "the driver (at-least-once across driver restarts)",
    )
    max_request_bytes: int = option(
        9 * 1000 * 1000,
        minimum=1024,
        maximum=MAX_APPEND_BYTES,
        doc="Largest AppendRows request the sink sends (BigQuery's limit: 10 MB)",
    )

    def validate(self) -> None:
        super().validate()
        # the staging table (exactly-once) is the table's name with a suffix: it must fit too
        limit = MAX_TABLE_NAME_BYTES - (len(STAGING_SUFFIX) if self.exactly_once else 0)
        size = len(self.table_name.encode("utf-8"))
        if size > limit:
            raise OptionError(
                f"bigquery: option 'table_name' {self.table_name[:40]!r}... is {size} bytes "
                f"(UTF-8); BigQuery takes {MAX_TABLE_NAME_BYTES}, and exactly-once mode needs "
                f"{len(STAGING_SUFFIX)} of them for its staging table: at most {limit}",
                option="table_name",
                value=self.table_name,
            )

    @property
    def exactly_once(self) -> bool:
        return self.write_mode == "exactly-once"

    @property
    def emulator(self) -> bool:
        """An http:// REST endpoint: a local emulator (plain-text gRPC)."""
        return bool(self.api_endpoint and self.api_endpoint.startswith("http://"))

    @property
    def table_path(self) -> str:
        """``project.dataset.table`` (the project may hold dots and a ':' of its own)."""
        return f"{self.project_id}.{self.dataset_id}.{self.table_name}"


def split_table_id(table_id: str) -> tuple[str, str, str]:
    """``project.dataset.table`` -> its three parts. Split from the right: a domain-scoped
    project (``example.com:my-project``) holds dots, datasets and tables hold none."""
    project, dataset, table = table_id.rsplit(".", 2)
    return project, dataset, table
