"""The `postgresql` sink against a real PostgreSQL server, read back with psycopg2."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.sinks.postgresql import PostgreSQLSink
from quixsinks.testing import faulty

from .streams import run_available_now, write_input_files

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)


def write(df: Any, pg: dict[str, Any], mode: str = "append", **options: str) -> None:
    writer = df.write.format("postgresql").mode(mode)
    for key, value in {**pg["options"], **options}.items():
        writer = writer.option(key, value)
    writer.save()


def query(pg: dict[str, Any], sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    conn = pg["server"].connect(pg["dbname"])
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            rows = list(cur.fetchall()) if cur.description else []
        conn.commit()
        return rows
    finally:
        conn.close()


def column_types(pg: dict[str, Any], table: str, schema: str = "public") -> dict[str, str]:
    rows = query(
        pg,
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    )
    return dict(rows)


def staging_tables(pg: dict[str, Any]) -> list[str]:
    """The sink's staging tables left in the database (there should be none)."""
    rows = query(pg, "SELECT tablename FROM pg_tables WHERE left(tablename, 4) = '_qs_'")
    return [name for (name,) in rows]


@pytest.fixture
def typed_frame(spark: Any) -> Any:
    return spark.sql(
        """
        SELECT cast(id AS string) AS key, timestamp_millis(1714521600000 + id) AS timestamp,
               cast(id AS int) AS i, id AS l, cast(id AS smallint) AS s,
               cast(id AS double) * 0.5 AS d,
               cast(id AS float) AS f, cast(id AS decimal(10,2)) AS n, concat('t', id) AS t,
               cast(concat('b', id) AS binary) AS b, id % 2 = 0 AS flag,
               date_add(date'2024-01-01', cast(id AS int)) AS day,
               cast(timestamp_millis(1714521600000 + id) AS timestamp_ntz) AS local_ts,
               array(id, id + 1) AS arr, named_struct('x', id, 'y', 'z') AS st,
               map('k', id) AS m
        FROM range(5)
        """
    )


def test_types_come_from_the_spark_schema(typed_frame: Any, pg: dict[str, Any]) -> None:
    write(typed_frame, pg, table_name="typed")
    assert column_types(pg, "typed") == {
        "timestamp": "timestamp with time zone",
        "__key": "text",
        "i": "integer",
        "l": "bigint",
        "s": "smallint",
        "d": "double precision",
        "f": "real",
        "n": "numeric",
        "t": "text",
        "b": "bytea",
        "flag": "boolean",
        "day": "date",
        "local_ts": "timestamp without time zone",
        "arr": "jsonb",
        "st": "jsonb",
        "m": "jsonb",
    }
    row = list(query(pg, "SELECT * FROM typed WHERE l = 3")[0])
    row[9] = bytes(row[9])
    assert row == [
        dt.datetime(2024, 5, 1, 0, 0, 0, 3000, tzinfo=dt.UTC),
        "3",
        3,
        3,
        3,
        1.5,
        3.0,
        decimal.Decimal("3.00"),
        "t3",
        b"b3",
        False,
        dt.date(2024, 1, 4),
        dt.datetime(2024, 5, 1, 0, 0, 0, 3000),
        [3, 4],
        {"x": 3, "y": "z"},
        {"k": 3},
    ]
    assert query(
        pg,
        "SELECT numeric_precision, numeric_scale FROM information_schema.columns "
        "WHERE table_name = 'typed' AND column_name = 'n'",
    ) == [(10, 2)]


def test_every_row_lands_once_in_a_batch_write(spark: Any, pg: dict[str, Any]) -> None:
    df = spark.range(10_000).selectExpr("cast(id AS string) AS key", "id", "id * 2 AS twice")
    write(df.repartition(4), pg, table_name="rows")
    assert query(pg, "SELECT count(*), count(DISTINCT id), sum(twice) FROM rows") == [
        (10_000, 10_000, 2 * sum(range(10_000)))
    ]
    assert staging_tables(pg) == []


def test_nulls_and_empty_strings_stay_distinct(spark: Any, pg: dict[str, Any]) -> None:
    df = spark.sql("SELECT 1 AS id, '' AS a, cast(NULL AS string) AS b, 'x,\"y\"\n' AS c")
    write(df, pg, table_name="nulls", include_metadata="false")
    assert query(pg, "SELECT a, b, c FROM nulls") == [("", None, 'x,"y"\n')]


def test_missing_columns_are_added_and_never_dropped(spark: Any, pg: dict[str, Any]) -> None:
    write(spark.sql("SELECT 1 AS id, 'a' AS first"), pg, table_name="evolve")
    write(spark.sql("SELECT 2 AS id, 'b' AS second"), pg, table_name="evolve")
    assert list(column_types(pg, "evolve")) == ["timestamp", "__key", "id", "first", "second"]
    assert query(pg, "SELECT id, first, second FROM evolve ORDER BY id") == [
        (1, "a", None),
        (2, None, "b"),
    ]


def test_conflicting_column_type_names_both_types(spark: Any, pg: dict[str, Any]) -> None:
    query(pg, "CREATE TABLE conflict (id bigint, amount text); INSERT INTO conflict VALUES (1,'x')")
    with pytest.raises(Exception, match=r"column 'id' of table public\.conflict has type bigint"):
        write(spark.sql("SELECT 'one' AS id"), pg, table_name="conflict", include_metadata="false")
    assert query(pg, "SELECT count(*) FROM conflict") == [(1,)]


def test_upsert_keeps_the_last_row_of_each_key(spark: Any, pg: dict[str, Any]) -> None:
    options = {
        "table_name": "users",
        "primary_key_columns": "id",
        "upsert_on_primary_key": "true",
        "include_metadata": "false",
    }
    write(spark.sql("SELECT * FROM VALUES (1, 'a'), (2, 'b') AS t(id, name)"), pg, **options)
    df = spark.sql("SELECT * FROM VALUES (1, 'old'), (1, 'new'), (3, 'c') AS t(id, name)")
    write(df.coalesce(1), pg, **options)
    assert query(pg, "SELECT id, name FROM users ORDER BY id") == [(1, "new"), (2, "b"), (3, "c")]
    assert query(
        pg,
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = "
        "i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indisprimary AND "
        "i.indrelid = 'users'::regclass",
    ) == [("id",)]


def test_upsert_adds_a_primary_key_to_a_table_without_one(spark: Any, pg: dict[str, Any]) -> None:
    query(pg, "CREATE TABLE nopk (id integer, v text); INSERT INTO nopk VALUES (1, 'a')")
    write(
        spark.sql("SELECT 1 AS id, 'b' AS v"),
        pg,
        table_name="nopk",
        primary_key_columns="id",
        upsert_on_primary_key="true",
        include_metadata="false",
    )
    assert query(pg, "SELECT id, v FROM nopk") == [(1, "b")]


def test_null_primary_key_is_an_error_and_writes_nothing(spark: Any, pg: dict[str, Any]) -> None:
    df = spark.sql("SELECT * FROM VALUES (1, 'a'), (NULL, 'b') AS t(id, v)")
    with pytest.raises(Exception, match="primary key column 'id' is null"):
        write(
            df.coalesce(1),
            pg,
            table_name="pk",
            primary_key_columns="id",
            upsert_on_primary_key="true",
            include_metadata="false",
        )
    assert query(pg, "SELECT count(*) FROM pk") == [(0,)]


def test_on_conflict_do_nothing_keeps_existing_rows(spark: Any, pg: dict[str, Any]) -> None:
    options = {
        "table_name": "keep",
        "primary_key_columns": "id",
        "on_conflict_do_nothing": "true",
        "include_metadata": "false",
    }
    write(spark.sql("SELECT 1 AS id, 'first' AS v"), pg, **options)
    write(spark.sql("SELECT * FROM VALUES (1, 'second'), (2, 'x') AS t(id, v)"), pg, **options)
    assert query(pg, "SELECT id, v FROM keep ORDER BY id") == [(1, "first"), (2, "x")]


def test_overwrite_truncates_in_the_same_transaction(spark: Any, pg: dict[str, Any]) -> None:
    write(spark.range(5).selectExpr("id"), pg, table_name="over")
    write(spark.range(2).selectExpr("id + 100 AS id"), pg, "overwrite", table_name="over")
    assert query(pg, "SELECT id FROM over ORDER BY id") == [(100,), (101,)]


def test_hostile_names_are_quoted(spark: Any, pg: dict[str, Any]) -> None:
    table = 'odd "table"; DROP TABLE victim; --'
    schema = "Schema With Spaces"
    query(pg, "CREATE TABLE victim (x int)")
    df = spark.sql('SELECT 1 AS `we"ird col`, 2 AS `select`, 3 AS `ünï cødé`')
    write(df, pg, table_name=table, schema_name=schema)
    assert query(pg, "SELECT count(*) FROM victim") == [(0,)]
    cols = column_types(pg, table, schema)
    assert list(cols)[2:] == ['we"ird col', "select", "ünï cødé"]
    assert query(
        pg,
        'SELECT "we""ird col", "select" FROM "Schema With Spaces".'
        '"odd ""table""; DROP TABLE victim; --"',
    ) == [(1, 2)]


def test_rows_are_routed_by_table_name_column(spark: Any, pg: dict[str, Any]) -> None:
    df = spark.sql("SELECT * FROM VALUES ('cats', 1), ('dogs', 2), ('cats', 3) AS t(kind, id)")
    write(df, pg, table_name_column="kind", include_metadata="false")
    assert query(pg, "SELECT id FROM cats ORDER BY id") == [(1,), (3,)]
    assert query(pg, "SELECT id FROM dogs") == [(2,)]
    assert "kind" not in column_types(pg, "cats")


def test_kafka_json_values_become_columns(spark: Any, pg: dict[str, Any]) -> None:
    df = spark.sql(
        """SELECT cast('k1' AS binary) AS key,
                  cast('{"temp": 21.5, "room": "a"}' AS binary) AS value,
                  'sensors' AS topic, 0 AS partition, 7L AS offset,
                  timestamp_millis(1714521600000) AS timestamp, 0 AS timestampType"""
    )
    write(df, pg, table_name="readings")
    [(key, temp, room, when)] = query(pg, "SELECT __key, temp, room, timestamp FROM readings")
    assert (bytes(key), temp, room) == (b"k1", 21.5, "a")
    assert when == dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


def test_a_value_too_long_for_its_column_fails_without_partial_rows(
    spark: Any, pg: dict[str, Any]
) -> None:
    query(pg, "CREATE TABLE short (id bigint, code varchar(3))")
    df = spark.sql("SELECT * FROM VALUES (1L, 'abc'), (2L, 'abcdef') AS t(id, code)")
    with pytest.raises(Exception, match="value too long"):
        write(df.coalesce(1), pg, table_name="short", include_metadata="false")
    assert query(pg, "SELECT count(*) FROM short") == [(0,)]


def test_wrong_password_fails_before_any_task(spark: Any, pg: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="authentication failed"):
        write(spark.range(1), pg, table_name="x", password="wrong")


def test_missing_database_fails_before_any_task(spark: Any, pg: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="database does not exist"):
        write(spark.range(1), pg, table_name="x", dbname="no_such_db")


def test_password_never_appears_in_errors(spark: Any, pg: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="no_such_db") as failure:
        write(spark.range(1), pg, table_name="x", dbname="no_such_db")
    assert pg["options"]["password"] not in str(failure.value)


def test_upsert_and_do_nothing_together_is_an_option_error(spark: Any, pg: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="cannot both be true"):
        write(
            spark.range(1),
            pg,
            table_name="x",
            primary_key_columns="id",
            upsert_on_primary_key="true",
            on_conflict_do_nothing="true",
        )


def test_direct_mode_copies_straight_into_the_table(spark: Any, pg: dict[str, Any]) -> None:
    write(spark.range(100).selectExpr("id"), pg, table_name="direct", write_mode="direct")
    assert query(pg, "SELECT count(*) FROM direct") == [(100,)]
    assert staging_tables(pg) == []


@pytest.fixture(scope="module")
def faulty_postgresql(spark: Any) -> None:
    quixsinks.register(spark, faulty(PostgreSQLSink))


@pytest.mark.parametrize("phase", ["write", "commit-before", "commit-after"])
def test_streaming_exactly_once_after_a_failure(
    spark: Any, faulty_postgresql: None, pg: dict[str, Any], tmp_path: Path, phase: str
) -> None:
    ids = write_input_files(tmp_path / "in", files=4, rows_per_file=25)
    options = {
        **pg["options"],
        "table_name": "events",
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_postgresql", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_postgresql", tmp_path / "ck", options)
    assert [r[0] for r in query(pg, "SELECT id FROM events ORDER BY id")] == ids
    assert staging_tables(pg) == []
    assert query(pg, "SELECT count(*) FROM _quixsinks_ledger") == [(4,)]


def test_streaming_upsert_of_json_values(spark: Any, pg: dict[str, Any], tmp_path: Path) -> None:
    write_input_files(tmp_path / "in", files=2, rows_per_file=10)
    options = {
        **pg["options"],
        "table_name": "latest",
        "primary_key_columns": "__key",
        "upsert_on_primary_key": "true",
    }
    run_available_now(spark, tmp_path / "in", "postgresql", tmp_path / "ck", options)
    rows = query(pg, "SELECT __key, id FROM latest ORDER BY __key")
    assert [k for k, _ in rows] == [f"k{i}" for i in range(7)]
    # the last id of each key within its micro-batch (key = id % 7, 10 rows per batch)
    assert dict(rows) == {f"k{k}": max(i for i in range(10, 20) if i % 7 == k) for k in range(7)}


def test_direct_mode_upsert_absorbs_a_repeated_write_per_table(
    spark: Any, pg: dict[str, Any]
) -> None:
    df = spark.sql("SELECT * FROM VALUES ('a', 1, 'x'), ('b', 2, 'y') AS t(kind, id, v)")
    options = {
        "table_name_column": "kind",
        "primary_key_columns": "id",
        "upsert_on_primary_key": "true",
        "write_mode": "direct",
        "include_metadata": "false",
    }
    write(df, pg, **options)
    write(df, pg, **options)
    assert query(pg, "SELECT id, v FROM a") == [(1, "x")]
    assert query(pg, "SELECT id, v FROM b") == [(2, "y")]


# ----------------------------------------------------------------------------- fidelity


def test_an_existing_numeric_column_of_smaller_scale_is_an_error_not_rounding(
    spark: Any, pg: dict[str, Any]
) -> None:
    query(pg, "CREATE TABLE money (amount numeric(10,2))")
    df = spark.sql("SELECT cast(1.2345 AS decimal(10,4)) AS amount")
    with pytest.raises(Exception, match=r"has type numeric\(10,2\), but the data has numeric"):
        write(df, pg, table_name="money", include_metadata="false")
    assert query(pg, "SELECT count(*) FROM money") == [(0,)]


def test_a_binary_table_name_column_names_tables_by_its_text(
    spark: Any, pg: dict[str, Any]
) -> None:
    df = spark.sql("SELECT cast('cats' AS binary) AS kind, 1 AS id")
    write(df, pg, table_name_column="kind", include_metadata="false")
    assert query(pg, "SELECT id FROM cats") == [(1,)]
    assert query(pg, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'b''%'") == [(0,)]


def test_a_table_name_postgresql_would_truncate_is_an_error(spark: Any, pg: dict[str, Any]) -> None:
    long = "t" * 70
    df = spark.sql(f"SELECT '{long}' AS kind, 1 AS id")
    with pytest.raises(Exception, match="PostgreSQL keeps only the first 63"):
        write(df, pg, table_name_column="kind", include_metadata="false")
    with pytest.raises(Exception, match="PostgreSQL keeps only the first 63"):
        write(df, pg, table_name=long)


def test_connect_options_cannot_shift_the_session_time_zone(spark: Any, pg: dict[str, Any]) -> None:
    df = spark.sql("SELECT timestamp'2024-05-01 12:00:00' AS at, 1 AS id")
    options = "application_name=mine options='-c timezone=America/New_York -c work_mem=8MB'"
    write(df, pg, table_name="tz", include_metadata="false", connect_options=options)
    [(at,)] = query(pg, "SELECT at FROM tz")
    assert at == dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)


def test_a_struct_key_is_written_as_json_text(spark: Any, pg: dict[str, Any]) -> None:
    df = spark.sql("SELECT named_struct('a', 1, 'b', 'x') AS key, 1 AS id")
    write(df, pg, table_name="keyed")
    assert query(pg, "SELECT __key::jsonb FROM keyed") == [({"a": 1, "b": "x"},)]


def test_a_nul_character_in_text_is_a_record_error_and_nothing_lands(
    spark: Any, pg: dict[str, Any]
) -> None:
    df = spark.sql("SELECT * FROM VALUES (1, 'ok'), (2, concat('a', char(0), 'b')) AS t(id, s)")
    with pytest.raises(Exception, match=r"'s' holds a NUL character \(U\+0000\) in row 1"):
        write(df.coalesce(1), pg, table_name="nul", include_metadata="false")
    assert query(pg, "SELECT count(*) FROM nul") == [(0,)]


def kafka_frame(spark: Any, *values: str | None) -> Any:
    rows = ", ".join(f"({i}, {'NULL' if v is None else repr(v)})" for i, v in enumerate(values))
    return spark.sql(
        f"""SELECT cast(concat('k', i) AS binary) AS key, cast(v AS binary) AS value,
                   't' AS topic, 0 AS partition, cast(i AS bigint) AS offset,
                   timestamp_millis(1714521600000 + i) AS timestamp, 0 AS timestampType
            FROM VALUES {rows} AS t(i, v)"""
    ).coalesce(1)


def test_json_values_evolve_the_table_across_batches(spark: Any, pg: dict[str, Any]) -> None:
    """Null-only keys add no column; a key's first non-null type makes its column; a later
    float in an integer column is an error (it cannot be widened in place)."""
    write(kafka_frame(spark, None, '{"n": null}'), pg, table_name="evolving")
    write(kafka_frame(spark, '{"n": 1, "s": "x"}'), pg, table_name="evolving")
    assert column_types(pg, "evolving")["n"] == "bigint"  # its first non-null type
    with pytest.raises(Exception, match="has type bigint, but the data has double precision"):
        write(kafka_frame(spark, '{"n": 3.5}'), pg, table_name="evolving")
    assert sorted(query(pg, "SELECT n, s FROM evolving"), key=repr) == [
        (1, "x"),
        (None, None),
        (None, None),
    ]


def test_json_integers_widen_into_an_existing_double_column(spark: Any, pg: dict[str, Any]) -> None:
    write(kafka_frame(spark, '{"n": 1.5}'), pg, table_name="widen")
    write(kafka_frame(spark, '{"n": 2}'), pg, table_name="widen")
    assert sorted(query(pg, "SELECT n FROM widen")) == [(1.5,), (2.0,)]
