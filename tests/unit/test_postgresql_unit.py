"""The postgresql sink without a server: options, type mapping, error translation."""

from __future__ import annotations

import pickle

import psycopg2
import psycopg2.errors
import pyarrow as pa
import pytest

from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    OptionError,
    RecordError,
    RetryableError,
)
from quixsinks.sinks.postgresql import PostgreSQLOptions, PostgreSQLSink, client
from quixsinks.sinks.postgresql.client import translate
from quixsinks.sinks.postgresql.schema import (
    Column,
    TableSchema,
    accepts,
    column_plan,
    compatible,
    gid_in_schema,
    incompatible_message,
    key_texts,
    non_utf8_rows,
    pg_type,
    prepared_gid,
    settle_action,
    stage_batch,
    stage_table_name,
)

BASE = {"dbname": "db", "table_name": "t"}


def options(**extra: str) -> PostgreSQLOptions:
    return PostgreSQLOptions.from_options({**BASE, **extra})


def test_table_name_or_table_name_column_is_required() -> None:
    with pytest.raises(OptionError, match="exactly one of 'table_name' and 'table_name_column'"):
        PostgreSQLOptions.from_options({"dbname": "db"})


def test_both_table_options_together_are_an_error() -> None:
    with pytest.raises(OptionError):
        options(table_name_column="kind")


def test_upsert_needs_primary_key_columns() -> None:
    with pytest.raises(OptionError) as error:
        options(upsert_on_primary_key="true")
    assert error.value.option == "primary_key_columns"


def test_upsert_and_do_nothing_exclude_each_other() -> None:
    with pytest.raises(OptionError, match="cannot both be true"):
        options(
            primary_key_columns="id", upsert_on_primary_key="true", on_conflict_do_nothing="true"
        )


@pytest.mark.parametrize("value", ["0", "5"])
def test_the_connect_timeout_is_set_by_its_option_not_in_connect_options(value: str) -> None:
    with pytest.raises(OptionError, match="connection_timeout_seconds") as error:
        options(connect_options=f"sslmode=require connect_timeout={value}")
    assert error.value.option == "connect_options"


def test_connect_options_must_be_key_value_pairs() -> None:
    with pytest.raises(OptionError) as error:
        options(connect_options="sslrootcert=/ca.pem oops")
    assert error.value.option == "connect_options"


def test_password_comes_from_pgpassword(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", "from-env")
    assert options().password == "from-env"
    assert options(password="given").password == "given"


def test_password_is_not_in_the_repr_or_the_redacted_view() -> None:
    opts = options(password="s3cret-value")
    assert "s3cret-value" not in repr(opts)
    assert "s3cret-value" not in repr(PostgreSQLSink(opts))
    assert opts.redacted()["password"] == "***"


def test_options_and_sink_pickle_round_trip() -> None:
    sink = PostgreSQLSink(options(password="p"))
    sink.prepare(pa.schema([("id", pa.int64())]))
    copy = pickle.loads(pickle.dumps(sink))
    assert copy.options == sink.options
    assert copy.columns == sink.columns


@pytest.mark.parametrize(
    ("arrow", "expected"),
    [
        (pa.int8(), "smallint"),
        (pa.int16(), "smallint"),
        (pa.int32(), "integer"),
        (pa.int64(), "bigint"),
        (pa.float32(), "real"),
        (pa.float64(), "double precision"),
        (pa.decimal128(12, 3), "numeric(12,3)"),
        (pa.string(), "text"),
        (pa.large_string(), "text"),
        (pa.binary(), "bytea"),
        (pa.bool_(), "boolean"),
        (pa.date32(), "date"),
        (pa.timestamp("us", "UTC"), "timestamp with time zone"),
        (pa.timestamp("us"), "timestamp without time zone"),
        (pa.list_(pa.int64()), "jsonb"),
        (pa.struct([("a", pa.int64())]), "jsonb"),
        (pa.map_(pa.string(), pa.int64()), "jsonb"),
    ],
)
def test_spark_types_map_to_postgresql_types(arrow: pa.DataType, expected: str) -> None:
    assert pg_type(arrow, "c") == expected


def test_an_unmappable_type_is_an_option_error() -> None:
    with pytest.raises(OptionError, match="'c' has type duration"):
        pg_type(pa.duration("s"), "c")


@pytest.mark.parametrize(
    ("ours", "existing", "ok"),
    [
        ("integer", "bigint", True),
        ("bigint", "integer", False),
        ("text", "character varying", True),
        ("text", "integer", False),
        ("numeric(10,2)", "numeric(12,4)", True),
        ("jsonb", "json", True),
        ("timestamp with time zone", "timestamp without time zone", False),
    ],
)
def test_type_compatibility_with_existing_columns(ours: str, existing: str, ok: bool) -> None:
    assert compatible(ours, existing) is ok


def test_metadata_columns_come_first_and_value_names_may_not_clash() -> None:
    plan = column_plan(pa.schema([("v", pa.int64())]), pa.binary(), include_metadata=True)
    assert [(c.name, c.pg_type, c.source) for c in plan] == [
        ("timestamp", "timestamp with time zone", "timestamp"),
        ("__key", "bytea", "key"),
        ("v", "bigint", "value"),
    ]
    with pytest.raises(OptionError, match="clashes with the metadata column"):
        column_plan(pa.schema([("__key", pa.int64())]), None, include_metadata=True)


def test_staging_table_names_are_safe_short_and_carry_the_batch() -> None:
    table = TableSchema("public", 'x"; drop')
    name = stage_table_name("query-1", 42, table, "00003-0-abc")
    assert name.replace("_", "").isalnum()
    assert len(name.encode()) <= 63
    assert stage_batch(name, "query-1") == 42
    assert stage_batch(name, "query-2") is None
    assert name != stage_table_name("query-1", 42, TableSchema("other", 'x"; drop'), "00003-0-abc")
    assert name != stage_table_name("query-1", 42, table, "00003-1-abc")
    largest = stage_table_name("query-1", 2**53 - 1, table, "00003-0-abc")  # batch ids' limit
    assert len(largest.encode()) <= 63


def test_prepared_transaction_ids_carry_their_schema_and_batch() -> None:
    gid = prepared_gid("query-1", 42, "00003-0-abc", 2, "sales")
    assert stage_batch(gid, "query-1") == 42
    assert gid_in_schema(gid, "sales")
    assert not gid_in_schema(gid, "public")
    assert len(gid) < 200  # PostgreSQL's limit for a prepared transaction's id
    # an id made before ids carried their schema counts for every schema
    assert gid_in_schema(gid.rsplit("_", 1)[0], "public")
    assert not gid_in_schema("someone_elses_transaction", "public")


def settle(
    gid: str,
    *,
    decided: bool = False,
    old: bool = False,
    batch: int = 5,
    committed: tuple[int, ...] = (4,),
) -> str | None:
    return settle_action(
        gid,
        decided=decided,
        old=old,
        schema="public",
        sink_id="s1",
        batch_id=batch,
        committed=committed,
    )


def test_settling_commits_decided_and_rolls_back_only_this_schemas_undecided() -> None:
    ours = prepared_gid("s1", 4, "attempt", 0, "public")
    later = prepared_gid("s1", 6, "attempt", 0, "public")
    other_sink = prepared_gid("s2", 4, "attempt", 0, "public")
    other_schema = prepared_gid("s1", 4, "attempt", 0, "sales")
    assert settle(ours, decided=True) == "commit"
    assert settle(ours, batch=4, committed=()) == "rollback"  # the batch's own losers
    assert settle(ours) == "rollback"  # a lower batch the ledger holds: its losers
    # a lower batch the ledger lacks: a keyed write of the sink id may still be running
    assert settle(ours, committed=()) is None
    assert settle(ours, committed=(), old=True) == "abandoned"
    assert settle(later) is None  # a batch not committed yet
    assert settle(other_sink) is None
    assert settle(other_sink, old=True) == "abandoned"
    # another schema's transaction is decided in that schema's table: never rolled back here
    assert settle(other_schema) is None
    assert settle(other_schema, old=True) is None
    assert settle("not_ours", old=True) is None


class _Coded(psycopg2.DatabaseError):
    def __init__(self, code: str) -> None:
        super().__init__(f"error {code}")
        self._code = code

    @property
    def pgcode(self) -> str:  # psycopg2's attribute is read-only
        return self._code


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("28P01", DestinationAccessDeniedError),
        ("42501", DestinationAccessDeniedError),
        ("3D000", DestinationNotFoundError),
        ("42P01", DestinationNotFoundError),
        ("40001", RetryableError),
        ("40P01", RetryableError),
        ("08006", RetryableError),
        ("57P01", RetryableError),
        ("53300", RetryableError),
        ("57014", RetryableError),
        ("22001", RecordError),
        ("23505", RecordError),
        ("22P02", RecordError),
        ("42601", DestinationError),
    ],
)
def test_sqlstates_translate_to_what_the_caller_can_do(code: str, expected: type) -> None:
    translated = translate(_Coded(code), "pg://host/db", rows=True)
    assert type(translated) is expected
    assert translated.message.startswith("pg://host/db: ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('FATAL:  password authentication failed for user "u"', DestinationAccessDeniedError),
        ('FATAL:  database "nope" does not exist', DestinationNotFoundError),
        ("connection to server at 127.0.0.1, port 1 failed: Connection refused", RetryableError),
    ],
)
def test_connection_failures_without_sqlstate_are_classified(text: str, expected: type) -> None:
    translated = translate(psycopg2.OperationalError(text), "pg://h/db", connecting=True)
    assert type(translated) is expected


@pytest.mark.parametrize(
    ("text", "timed_out"),
    [
        ('connection to server at "127.0.0.1", port 1 failed: timeout expired', True),
        ('connection to server at "127.0.0.1", port 1 failed: Connection refused', False),
    ],
)
def test_libpqs_timeout_names_the_option_however_soon_it_ends(
    monkeypatch: pytest.MonkeyPatch, text: str, timed_out: bool
) -> None:
    """libpq's "timeout expired" is a timeout even when this process's clock saw less than
    connect_timeout pass (a CI run did); a refused connection is not."""

    def fail_at_once(**params: object) -> None:
        raise psycopg2.OperationalError(text)

    monkeypatch.setattr(psycopg2, "connect", fail_at_once)
    with pytest.raises(RetryableError) as caught:
        client.connect(options(connection_timeout_seconds="2"))
    named = "timed out (no answer in 2 s; option 'connection_timeout_seconds')"
    assert (named in caught.value.message) is timed_out
    assert ("cannot connect" in caught.value.message) is not timed_out


def test_every_psycopg2_error_class_translates_to_a_quixsinks_error() -> None:
    """A new psycopg2 error class must not slip through the translation untyped."""
    classes = {
        cls
        for cls in vars(psycopg2.errors).values()
        if isinstance(cls, type) and issubclass(cls, psycopg2.Error)
    }
    for cls in classes:
        assert isinstance(
            translate(cls("x"), "pg"), DestinationError | RetryableError | RecordError
        ), cls


# ----------------------------------------------------------------------------- fidelity


@pytest.mark.parametrize(
    ("ours", "existing", "ok"),
    [
        ("numeric(10,2)", "numeric(10,4)", False),  # 8 integer digits need room too
        ("numeric(10,4)", "numeric(12,2)", False),  # would round to 2 places
        ("numeric(10,2)", "numeric(38,18)", True),
        ("numeric(38,18)", "numeric", True),
        ("double precision", "numeric(12,2)", False),  # a float would be rounded
        ("double precision", "numeric", True),
        ("integer", "numeric(12,2)", True),
        ("bigint", "numeric(12,2)", False),
        ("bigint", "double precision", False),
        ("numeric(38,18)", "double precision", False),  # a decimal's digits would round
        ("numeric(10,2)", "double precision", False),
    ],
)
def test_an_existing_numeric_column_takes_only_values_it_keeps_exactly(
    ours: str, existing: str, ok: bool
) -> None:
    assert compatible(ours, existing) is ok


def test_json_integers_may_widen_into_an_existing_double_column() -> None:
    assert compatible("bigint", "double precision", json_values=True)


@pytest.mark.parametrize("option", ["table_name", "schema_name"])
def test_a_name_postgresql_would_truncate_is_an_option_error(option: str) -> None:
    with pytest.raises(OptionError, match="63") as error:
        options(**{option: "é" * 32})  # 64 bytes
    assert error.value.option == option
    assert options(**{option: "x" * 63})


def test_connect_options_are_secret() -> None:
    opts = options(connect_options="sslpassword=hunter2-key")
    assert "hunter2" not in repr(opts)
    assert "hunter2" not in repr(PostgreSQLSink(opts))
    assert opts.redacted()["connect_options"] == "***"


def test_a_malformed_connect_option_error_never_shows_its_text() -> None:
    with pytest.raises(OptionError) as error:
        options(connect_options="password=ok hunter2secret")
    assert "hunter2secret" not in str(error.value)


def test_connect_options_follow_libpq_quoting() -> None:
    from quixsinks.sinks.postgresql.options import parse_conninfo

    assert parse_conninfo(" a=1  options='-c search_path=app\\'s' b = x ") == {
        "a": "1",
        "options": "-c search_path=app's",
        "b": "x",
    }


def test_a_primary_key_in_no_row_of_a_json_batch_marks_every_row() -> None:
    from quixsinks.core.batch import SinkBatch, WriteContext
    from quixsinks.core.records import RecordSchema
    from quixsinks.sinks.postgresql.schema import null_key_rows

    table = pa.table({"value": pa.array(['{"a": 1}', '{"a": 2}'], pa.string())})
    batch = SinkBatch(
        table, RecordSchema.resolve(table.schema, value_format="json"), WriteContext("s", 0)
    )
    columns = column_plan(batch.values().schema, None, include_metadata=False)
    assert null_key_rows(batch, columns, ["id"])["id"].to_pylist() == [True, True]


@pytest.mark.parametrize(
    ("column", "existing", "ok"),
    [
        # the metadata columns of a table Quix's PostgreSQLSink created
        (
            Column("timestamp", "timestamp with time zone", "timestamp"),
            "timestamp without time zone",
            True,
        ),
        (Column("__key", "bytea", "key"), "text", True),
        (Column("__key", "bytea", "key"), "character varying(64)", True),
        # a value column gets no such leeway: the zone of a naive column is unknown
        (Column("t", "timestamp with time zone", "value"), "timestamp without time zone", False),
        (Column("__key", "bytea", "key"), "integer", False),
        (Column("timestamp", "timestamp with time zone", "timestamp"), "date", False),
    ],
)
def test_an_existing_column_accepts_what_it_takes_without_loss(
    column: Column, existing: str, ok: bool
) -> None:
    assert accepts(column, existing) is ok


def test_a_type_that_loses_data_says_the_alter_table_and_the_spark_cast() -> None:
    table = TableSchema("public", 'odd"name')
    message = incompatible_message(table, Column("reading", "double precision", "value"), "bigint")
    assert (
        'ALTER TABLE "public"."odd""name" ALTER COLUMN "reading" TYPE double precision '
        'USING "reading"::double precision'
    ) in message
    assert "cast the column 'reading' to bigint in Spark" in message
    json_message = incompatible_message(
        table, Column("n", "double precision", "value"), "numeric(10,2)", json_values=True
    )
    assert "from_json" in json_message
    assert "decimal(10,2)" in json_message
    key_message = incompatible_message(table, Column("__key", "bytea", "key"), "integer")
    assert "include_metadata=false" in key_message


def test_binary_keys_become_text_as_utf8_or_as_quixs_bytea_text() -> None:
    keys = pa.array([b"k1", None, "\u00fc".encode()], pa.binary())
    assert key_texts(keys).to_pylist() == ["k1", None, "\u00fc"]
    assert key_texts(keys, "hex").to_pylist() == ["\\x6b31", None, "\\xc3bc"]
    bad = pa.array([b"ok", b"\xff", None, b"\xfe\x00"], pa.binary())
    assert non_utf8_rows(bad, None) == [1, 3]
    assert non_utf8_rows(bad, pa.array([0, 3], pa.int64())) == [3]
    assert non_utf8_rows(keys, None) == []
