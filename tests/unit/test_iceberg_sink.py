"""The iceberg sink's pure logic: partition_by syntax, options, catalog properties, the
snapshot ledger's takeover rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from quixsinks.core.errors import LedgerFenceError, MissingDependencyError, OptionError
from quixsinks.core.ledger import Ledger
from quixsinks.core.secrets import scrub
from quixsinks.core.tables.partitioning import PartitionField, parse_partition_by
from quixsinks.sinks.iceberg.client import catalog_properties
from quixsinks.sinks.iceberg.ledger import SnapshotLedgerStore, summary_properties
from quixsinks.sinks.iceberg.options import IcebergOptions

pytest.importorskip("pyiceberg")


def test_a_pyarrow_older_than_pyicebergs_floor_is_named_before_any_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyarrow as pa

    from quixsinks.sinks.iceberg.client import import_pyiceberg

    monkeypatch.setattr(pa, "__version__", "15.0.0")
    with pytest.raises(MissingDependencyError, match=r"'pyarrow>=17'.*found pyarrow 15\.0\.0") as e:
        import_pyiceberg()
    assert e.value.extra == "iceberg"


def test_partition_by_parses_every_transform() -> None:
    assert parse_partition_by("day(ts), bucket(16, id), truncate(4, name), identity(city), k") == (
        PartitionField("ts", "day"),
        PartitionField("id", "bucket", 16),
        PartitionField("name", "truncate", 4),
        PartitionField("city", "identity"),
        PartitionField("k", "identity"),
    )
    assert [f.name for f in parse_partition_by("HOUR(ts), bucket( 8 , id )")] == [
        "ts_hour",
        "id_bucket_8",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("day(ts),", "empty item"),
        ("squash(ts)", "unknown transform 'squash'"),
        ("bucket(id)", "needs a positive width"),
        ("bucket(0, id)", "needs a positive width"),
        ("day(3, ts)", "takes only a column"),
        ("day(ts), day(ts)", "names a partition field twice"),
        ("day(a(b))", "not a transform"),
    ],
)
def test_bad_partition_by_names_the_item(text: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_partition_by(text)


def test_embedded_default_is_a_sqlite_catalog_in_the_warehouse(tmp_path: Any) -> None:
    opts = IcebergOptions.from_options({"table_name": "a.b", "warehouse": str(tmp_path)})
    props = catalog_properties(opts)
    assert props["type"] == "sql"
    assert props["uri"] == f"sqlite:///{tmp_path}/catalog.db"
    assert props["warehouse"] == f"file://{tmp_path}"
    assert props["py-io-impl"] == "pyiceberg.io.pyarrow.PyArrowFileIO"


def test_glue_and_s3_properties_and_pass_through() -> None:
    opts = IcebergOptions.from_options(
        {
            "table_name": "a.b",
            "catalogType": "GLUE",
            "warehouse": "s3://bucket/wh",
            "aws_region": "eu-west-1",
            "aws_access_key_id": "AKIA",
            "aws_secret_access_key": "s3cr3t",
            "aws_endpoint_url": "http://127.0.0.1:5000",
            "catalog.glue.id": "123",
        }
    )
    props = catalog_properties(opts)
    assert props["glue.region"] == props["s3.region"] == "eu-west-1"
    assert props["glue.secret-access-key"] == "s3cr3t"
    assert props["s3.endpoint"] == "http://127.0.0.1:5000"
    assert props["glue.id"] == "123"
    assert "s3cr3t" not in scrub(f"boom {props}", opts.secret_values())


def test_every_rest_catalog_request_gets_the_catalog_timeout() -> None:
    from requests import Session
    from requests.adapters import BaseAdapter, HTTPAdapter

    from quixsinks.core.tables.pyiceberg_compat import TimeoutAdapter, with_timeout

    class Recording(BaseAdapter):
        timeouts: list[Any] = []

        def send(self, request: Any, **kwargs: Any) -> Any:
            self.timeouts.append(kwargs["timeout"])
            raise ConnectionError("recorded")

        def close(self) -> None:
            pass

    session = Session()
    session.mount("https://catalog.example/", HTTPAdapter())  # as SigV4 signing mounts one
    for prefix in ("http://", "https://", "https://catalog.example/"):
        session.mount(prefix, Recording())
    with_timeout(with_timeout(session, (3.0, 7.5)), (1.0, 1.0))  # the second call: no-op
    assert all(isinstance(a, TimeoutAdapter) for a in session.adapters.values())
    assert not any(isinstance(a.inner, TimeoutAdapter) for a in session.adapters.values())
    for url, timeout in (("http://x/v1/config", None), ("https://catalog.example/t", 42)):
        with pytest.raises(ConnectionError):
            session.get(url, timeout=timeout)
    assert Recording.timeouts == [(3.0, 7.5), 42]  # an explicit timeout is kept


def test_catalog_timeout_is_a_catalog_property_and_must_be_positive() -> None:
    opts = IcebergOptions.from_options(
        {
            "table_name": "a.b",
            "catalog_type": "rest",
            "catalog_uri": "http://c",
            "catalogTimeoutSeconds": "2.5",
        }
    )
    assert catalog_properties(opts)["quixsinks.timeout-seconds"] == "2.5"
    assert (
        IcebergOptions.from_options(
            {"table_name": "a.b", "warehouse": "/w"}
        ).catalog_timeout_seconds
        == 60
    )
    for bad in ("0", "-1", "inf", "nan"):
        with pytest.raises(OptionError) as info:
            IcebergOptions.from_options(
                {"table_name": "a.b", "warehouse": "/w", "catalog_timeout_seconds": bad}
            )
        assert info.value.option == "catalog_timeout_seconds"


def test_the_glue_client_has_the_catalog_timeouts() -> None:
    from quixsinks.sinks.iceberg.client import forget_catalog, load_catalog

    opts = IcebergOptions.from_options(
        {
            "table_name": "a.b",
            "catalog_type": "glue",
            "warehouse": "s3://bucket/wh",
            "aws_region": "eu-west-1",
            "aws_access_key_id": "AKIA",
            "aws_secret_access_key": "s3cr3t",
            "aws_endpoint_url": "http://127.0.0.1:9",
            "catalog_timeout_seconds": "25",
        }
    )
    try:
        config = load_catalog(opts).glue.meta.config  # no request is sent yet
        assert (config.connect_timeout, config.read_timeout) == (10.0, 25.0)
        assert config.retries["mode"] == "standard"  # pyiceberg's own retry settings kept
    finally:
        forget_catalog(opts)


def test_rest_needs_a_uri_and_sql_a_warehouse() -> None:
    with pytest.raises(OptionError, match="needs 'catalog_uri'"):
        IcebergOptions.from_options({"table_name": "a.b", "catalog_type": "rest"})
    with pytest.raises(OptionError, match="needs 'warehouse'"):
        IcebergOptions.from_options({"table_name": "a.b"})


@dataclass
class FakeSummary:
    additional_properties: dict[str, str]


@dataclass
class FakeSnapshot:
    snapshot_id: int
    parent_snapshot_id: int | None
    summary: FakeSummary
    sequence_number: int = 0


@dataclass
class FakeMetadata:
    snapshots: list[FakeSnapshot] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)

    def current_snapshot(self) -> FakeSnapshot | None:
        return self.snapshots[-1] if self.snapshots else None

    def snapshot_by_id(self, snapshot_id: int) -> FakeSnapshot | None:
        return next((s for s in self.snapshots if s.snapshot_id == snapshot_id), None)


@dataclass
class FakeTable:
    metadata: FakeMetadata


def history(*entries: dict[str, str]) -> FakeTable:
    meta = FakeMetadata()
    for i, props in enumerate(entries):
        meta.snapshots.append(FakeSnapshot(i + 1, i or None, FakeSummary(props)))
    return FakeTable(meta)


def test_the_ledger_reads_summaries_and_fences_other_queries() -> None:
    table = history(
        summary_properties("s", 0, "q1"),
        {"other": "writer"},
        summary_properties("s", 1, "q1"),
        summary_properties("t", 0, "q9"),
    )
    store = SnapshotLedgerStore(table)
    assert Ledger(store).committed("s", 1, "q1")
    assert not Ledger(store).committed("s", 2, "q1")
    with pytest.raises(LedgerFenceError, match="belongs to streaming query q1"):
        Ledger(SnapshotLedgerStore(table)).committed("s", 0, "q2")


def test_a_takeover_is_written_in_the_summary_and_hides_the_old_entries() -> None:
    table = history(summary_properties("s", 0, "q1"), summary_properties("s", 1, "q1"))
    store = SnapshotLedgerStore(table)
    assert not Ledger(store, takeover_query_id="q1").committed("s", 0, "q2")
    assert store.takeover_of == "q1"
    table = history(
        summary_properties("s", 0, "q1"),
        summary_properties("s", 0, "q2", takeover_of="q1"),
    )
    assert SnapshotLedgerStore(table).owners("s") == {"q2"}
    with pytest.raises(LedgerFenceError):  # the old query is out
        Ledger(SnapshotLedgerStore(table)).committed("s", 1, "q1")


def test_an_entry_carried_in_the_table_properties_counts_as_the_oldest() -> None:
    table = history(summary_properties("t", 0, "q9"))
    table.metadata.properties = {"quixsinks.ledger.s": "41:q1", "quixsinks.ledger.bad": "x"}
    assert Ledger(SnapshotLedgerStore(table)).committed("s", 41, "q1")
    assert not Ledger(SnapshotLedgerStore(table)).committed("s", 40, "q1")
    with pytest.raises(LedgerFenceError, match="belongs to streaming query q1"):
        Ledger(SnapshotLedgerStore(table)).committed("s", 0, "q2")
    assert SnapshotLedgerStore(table).owners("bad") == set()
    # a takeover marker on the branch drops the carried entry of the query it took over
    table = history(summary_properties("s", 0, "q2", takeover_of="q1"))
    table.metadata.properties = {"quixsinks.ledger.s": "41:q1"}
    assert SnapshotLedgerStore(table).owners("s") == {"q2"}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7d", 604800.0),
        ("12h", 43200.0),
        ("30m", 1800.0),
        ("90s", 90.0),
        ("3600", 3600.0),
        ("1.5 hours", 5400.0),
        ("2W", 1209600.0),
    ],
)
def test_expire_snapshots_older_than_takes_durations(text: str, seconds: float) -> None:
    opts = IcebergOptions.from_options(
        {"table_name": "db.t", "warehouse": "/w", "expire_snapshots_older_than": text}
    )
    assert opts.expire_older_than_seconds == seconds


@pytest.mark.parametrize("text", ["7 fortnights", "d7", "-1d", "0", "soon", "1d2h"])
def test_a_bad_expiry_duration_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(OptionError, match="'expire_snapshots_older_than' has value"):
        IcebergOptions.from_options(
            {"table_name": "db.t", "warehouse": "/w", "expire_snapshots_older_than": text}
        )


def test_azure_account_keys_are_redacted() -> None:
    opts = IcebergOptions.from_options(
        {
            "table_name": "db.t",
            "warehouse": "abfs://c/wh",
            "catalog_uri": "sqlite:////tmp/c.db",
            "catalog.adls.account-name": "acct",
            "catalog.adls.account-key": "azure-key-value",
            "catalog.adls.sas-token": "sas-value",
        }
    )
    assert "azure-key-value" not in repr(opts)
    assert "sas-value" not in repr(opts)
    assert "acct" in repr(opts)
    assert scrub("failed with azure-key-value", opts.secret_values()) == "failed with ***"


def test_an_azure_warehouse_in_the_account_form_is_refused_saying_what_to_write() -> None:
    options = {
        "table_name": "db.t",
        "catalog_uri": "sqlite:////tmp/c.db",
        "warehouse": "abfss://lake@myaccount.dfs.core.windows.net/warehouse",
    }
    with pytest.raises(
        OptionError,
        match=r"write abfss://lake/warehouse with catalog\.adls\.account-name=myaccount",
    ):
        IcebergOptions.from_options(options)
    fsspec = {**options, "catalog.py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}
    assert IcebergOptions.from_options(fsspec).warehouse == options["warehouse"]
    plain = {**options, "warehouse": "abfss://lake/warehouse"}
    assert IcebergOptions.from_options(plain).warehouse == "abfss://lake/warehouse"


def test_the_installed_pyiceberg_has_every_private_hook_the_compat_module_uses(
    tmp_path: Any,
) -> None:
    """pyiceberg_compat wraps pyiceberg's private API; the iceberg extra's version range is
    what this test proves (it runs in CI against the release the range admits)."""
    import importlib

    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from quixsinks.core.tables.pyiceberg_compat import PRIVATE_HOOKS, TRANSACTION_ATTRIBUTES

    missing = []
    for module, path in PRIVATE_HOOKS:
        found: Any = importlib.import_module(module)
        for part in path.split("."):
            found = getattr(found, part, None)
        if found is None:
            missing.append(f"{module}.{path}")
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("ns")
    tx = catalog.create_table("ns.t", schema=pa.schema([("a", pa.int64())])).transaction()
    missing += [f"Transaction.{name}" for name in TRANSACTION_ATTRIBUTES if not hasattr(tx, name)]
    assert missing == []


def test_a_zoned_timestamp_fits_a_quix_zoneless_timestamp_column_as_utc_wall_time() -> None:
    import datetime as dt

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType, TimestampType, TimestamptzType

    from quixsinks.sinks.iceberg.wire import conform_schema

    quix = Schema(
        NestedField(1, "_timestamp", TimestampType(), required=False),
        NestedField(2, "_key", StringType(), required=False),
    )
    rows = pa.table(
        {
            "_key": ["k"],
            "_timestamp": pa.array(
                [dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)], pa.timestamp("us", "UTC")
            ),
        }
    )
    fitted = conform_schema(rows.schema, quix)
    assert fitted.field("_timestamp").type == pa.timestamp("us")
    assert rows.cast(fitted).column("_timestamp").to_pylist() == [dt.datetime(2024, 5, 1, 12)]
    ours = Schema(NestedField(1, "_timestamp", TimestamptzType(), required=False))
    assert conform_schema(rows.schema, ours).field("_timestamp").type == pa.timestamp("us", "UTC")


def test_a_caching_transaction_builds_its_metadata_once_per_change(tmp_path: Any) -> None:
    """pyiceberg rebuilds a transaction's metadata (a deep copy of every snapshot) on each
    read; ours never while nothing is staged, then once per staged change, and it is the
    metadata pyiceberg's would be."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Transaction

    from quixsinks.core.tables.pyiceberg_compat import commit_transaction, transaction

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("ns")
    rows = pa.table({"a": pa.array([1, 2], pa.int64())})
    table = catalog.create_table("ns.t", schema=rows.schema)
    table.append(rows)

    tx = transaction(table)
    first = tx.table_metadata
    assert first is table.metadata  # nothing staged: the table's own (frozen), not a copy
    assert tx.table_metadata is first
    tx.set_properties(owner="quixsinks")
    changed = tx.table_metadata
    assert changed is not first
    assert changed.properties["owner"] == "quixsinks"
    plain = Transaction(table)
    plain.set_properties(owner="quixsinks")
    # built a millisecond apart, the two may differ in their update time only
    moment = {"last_updated_ms"}
    assert changed.model_dump(exclude=moment) == plain.table_metadata.model_dump(exclude=moment)

    # an append staged through it commits as pyiceberg's own would
    from pyiceberg.table.update import AssertTableUUID

    from quixsinks.core.tables.pyiceberg_compat import write_data_files

    files = write_data_files(table.metadata, rows, table.io)
    with tx.update_snapshot().fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)
    commit_transaction(table, tx, AssertTableUUID(uuid=table.metadata.table_uuid))
    assert table.scan().to_arrow().num_rows == 4
    assert table.metadata.properties["owner"] == "quixsinks"
    assert transaction(table).table_metadata == table.metadata
