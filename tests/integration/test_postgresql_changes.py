"""The `postgresql` sink's change-stream deletes (delete_column) and schema contracts."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from quixsinks.core.errors import OptionError
from quixsinks.sinks.postgresql import PostgreSQLOptions

from .test_postgresql import query
from .test_postgresql_existing_tables import MODES, commit, make_sink, run_task, write

UPSERT = {"table_name": "items", "primary_key_columns": "id", "upsert_on_primary_key": "true"}


@pytest.mark.parametrize("mode", MODES)
def test_rows_flagged_by_delete_column_delete_their_key(pg: dict[str, Any], mode: str) -> None:
    query(
        pg, "CREATE TABLE items (id bigint PRIMARY KEY, v text); INSERT INTO items VALUES (1,'a')"
    )
    rows = pa.table({"id": [1, 2, 3], "v": [None, "b", "c"], "gone": [True, False, None]})
    write(pg, rows, delete_column="gone", write_mode=mode, **UPSERT)
    assert query(pg, "SELECT id, v FROM items ORDER BY id") == [(2, "b"), (3, "c")]
    assert "gone" not in [
        r[0]
        for r in query(pg, "SELECT attname FROM pg_attribute WHERE attrelid = 'items'::regclass")
    ]


@pytest.mark.parametrize("mode", MODES)
def test_the_last_row_of_a_key_wins_between_upsert_and_delete(
    pg: dict[str, Any], mode: str
) -> None:
    rows = pa.table({"id": [1, 1, 2, 2], "v": ["x", None, None, "y"], "op": ["c", "d", "D", "u"]})
    write(pg, rows, delete_column="op", write_mode=mode, **UPSERT)
    assert query(pg, "SELECT id, v FROM items ORDER BY id") == [(2, "y")]


def test_a_delete_in_a_later_partition_wins_over_an_upsert_in_an_earlier_one(
    pg: dict[str, Any],
) -> None:
    first = pa.table({"id": [1], "v": ["a"], "gone": [False]})
    sink = make_sink(pg, first.schema, delete_column="gone", **UPSERT)
    receipts = [
        run_task(sink, first, partition=0),
        run_task(sink, pa.table({"id": [1], "v": [None], "gone": [True]}), partition=1),
    ]
    commit(sink, receipts)
    assert query(pg, "SELECT count(*) FROM items") == [(0,)]


def test_delete_column_needs_upsert() -> None:
    with pytest.raises(OptionError, match="'delete_column' needs upsert_on_primary_key"):
        PostgreSQLOptions.from_options({"dbname": "d", "table_name": "t", "delete_column": "x"})


def test_delete_column_must_be_boolean_or_text(pg: dict[str, Any]) -> None:
    with pytest.raises(OptionError, match="must name a boolean or text column"):
        make_sink(
            pg,
            pa.schema([("id", pa.int64()), ("gone", pa.int64())]),
            delete_column="gone",
            **UPSERT,
        )


def contract_case(pg: dict[str, Any], contract: str, mode: str = "exactly-once") -> None:
    query(pg, "CREATE TABLE frozen (id bigint, v text)")
    rows = pa.table({"id": [1, 2], "v": ["a", "b"], "extra": [None, "new"]})
    write(pg, rows, table_name="frozen", schema_contract=contract, write_mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_schema_contract_evolve_adds_the_column(pg: dict[str, Any], mode: str) -> None:
    contract_case(pg, "evolve", mode)
    assert query(pg, "SELECT id, v, extra FROM frozen ORDER BY id") == [
        (1, "a", None),
        (2, "b", "new"),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_schema_contract_freeze_refuses_a_new_column(pg: dict[str, Any], mode: str) -> None:
    with pytest.raises(OptionError, match="lacks the columns extra and schema_contract is freeze"):
        contract_case(pg, "freeze", mode)
    assert query(pg, "SELECT count(*) FROM frozen") == [(0,)]


@pytest.mark.parametrize("mode", MODES)
def test_schema_contract_discard_row_drops_rows_with_a_value_in_a_new_column(
    pg: dict[str, Any], mode: str
) -> None:
    contract_case(pg, "discard_row", mode)
    assert query(pg, "SELECT * FROM frozen") == [(1, "a")]


@pytest.mark.parametrize("mode", MODES)
def test_schema_contract_discard_value_drops_the_new_columns_values(
    pg: dict[str, Any], mode: str
) -> None:
    contract_case(pg, "discard_value", mode)
    assert query(pg, "SELECT * FROM frozen ORDER BY id") == [(1, "a"), (2, "b")]


def test_a_new_table_is_created_with_every_column_under_any_contract(pg: dict[str, Any]) -> None:
    write(pg, pa.table({"id": [1], "v": ["a"]}), table_name="fresh", schema_contract="freeze")
    assert query(pg, "SELECT id, v FROM fresh") == [(1, "a")]
