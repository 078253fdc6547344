"""on_error for the `postgresql` sink: values PostgreSQL refuses for one row.

The target table takes ``id bigint, name varchar(5), u uuid, v bigint NOT NULL CHECK (v >=
0)``; the poison rows carry one row-level error each: a name too long (SQLSTATE 22001),
text that is not a uuid (22P02), a negative v (CHECK, 23514), a null v (NOT NULL, 23502),
a NUL character (refused by the encoder), a value that is not JSON (refused by the glue).
COPY refuses a whole request for one of them: the sink isolates them inside the task's
transaction (savepoints), so the good rows land exactly once and the bad ones go to the
dead-letter output exactly once, in the default staged mode, in ``prepared`` and in
``direct``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.sinks.postgresql import PostgreSQLSink
from quixsinks.testing import faulty

from .poison import (
    assert_nothing_staged,
    dead_letter,
    read_dead_letters,
    run_poison_stream,
)
from .test_postgresql import query, staging_tables

UUID = "0b4cfd5c-55f0-4b8c-9f9e-4d6b6a1f0b9e"
TABLE = (
    "CREATE TABLE orders (id bigint, name varchar(5), u uuid, "
    "v bigint NOT NULL CONSTRAINT v_not_negative CHECK (v >= 0))"
)


def row(**value: Any) -> str:
    return json.dumps(value)


# offsets run from 0 across the batches
BATCHES = [
    [
        ("k0", row(id=0, name="a", u=UUID, v=1)),
        ("k1", row(id=1, name="too long", v=2)),  # 22001
        ("k2", row(id=2, name="b", v=3)),
        ("k3", "{not json"),  # refused by the glue
    ],
    [
        ("k4", row(id=4, name="c", u="not-a-uuid", v=4)),  # 22P02
        ("k5", row(id=5, name="d", v=-5)),  # CHECK, 23514
        ("k6", row(id=6, name="e", v=6)),
    ],
    [
        ("k7", row(id=7, name="a\x00b", v=7)),  # NUL: the encoder refuses it
        ("k8", row(id=8, name="f", v=None)),  # NOT NULL, 23502
        ("k9", row(id=9, name="g", v=9)),
    ],
]
GOOD = [0, 2, 6, 9]
#: offset -> (batch id, what the error message says)
BAD = {
    1: (0, "SQLSTATE 22001"),
    3: (0, "not valid JSON"),
    4: (1, "SQLSTATE 22P02"),
    5: (1, "SQLSTATE 23514"),
    7: (2, "NUL character"),
    8: (2, "SQLSTATE 23502"),
}
MODES = ["exactly-once", "prepared"]


def options(pg: dict[str, Any], mode: str, **extra: str) -> dict[str, str]:
    return {
        **pg["options"],
        "table_name": "orders",
        "include_metadata": "false",
        "write_mode": mode,
        **extra,
    }


def create_table(pg: dict[str, Any]) -> None:
    query(pg, TABLE)


def ids(pg: dict[str, Any]) -> list[int]:
    return [r[0] for r in query(pg, "SELECT id FROM orders ORDER BY id")]


def leftovers(pg: dict[str, Any]) -> tuple[list[str], list[Any]]:
    prepared = query(pg, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
    return staging_tables(pg), prepared


def assert_dead_letters(dead: Path, sink: str = "postgresql") -> None:
    letters = read_dead_letters(dead)
    offsets = sorted(int(letter["row"]["offset"]) for letter in letters)
    assert offsets == sorted(BAD), offsets  # each bad row exactly once
    for letter in letters:
        batch_id, says = BAD[int(letter["row"]["offset"])]
        assert letter["sink"] == sink
        assert letter["batch_id"] == batch_id
        assert letter["error"]["type"] == "RecordError"
        assert says in letter["error"]["message"], letter
        assert "password" not in letter["error"]["message"]
    assert_nothing_staged(dead)


@pytest.mark.parametrize("mode", [*MODES, "direct"])
def test_rows_postgresql_refuses_go_to_the_dead_letter_path_once(
    spark: Any, pg: dict[str, Any], tmp_path: Path, mode: str
) -> None:
    create_table(pg)
    opts = options(pg, mode, sink_id="orders-sink", **dead_letter(tmp_path))
    run_poison_stream(spark, tmp_path, "postgresql", opts, BATCHES)
    assert ids(pg) == GOOD  # exactly the good rows, once: no half of a failed COPY
    assert_dead_letters(tmp_path / "dead")
    assert leftovers(pg) == ([], [])
    # the commit records kept with the ledger rows, read back without Spark
    records = quixsinks.commit_records("postgresql", **opts).to_pylist()
    if mode == "direct":  # no ledger: the log line only
        assert records == []
        return
    assert [
        (r["sink_id"], r["batch_id"], r["rows"], r["rows_written"], r["dead_lettered"])
        for r in records
    ] == [("orders-sink", 0, 4, 2, 2), ("orders-sink", 1, 3, 1, 2), ("orders-sink", 2, 3, 1, 2)]


def test_skip_drops_the_refused_rows_and_counts_them(
    spark: Any, pg: dict[str, Any], tmp_path: Path
) -> None:
    create_table(pg)
    opts = options(pg, "exactly-once", on_error="skip")
    run_poison_stream(spark, tmp_path, "postgresql", opts, BATCHES)
    assert ids(pg) == GOOD
    assert not (tmp_path / "dead").exists()
    records = quixsinks.commit_records("postgresql", **opts).to_pylist()
    assert [(r["skipped"], r["rows_written"]) for r in records] == [(2, 2), (2, 1), (2, 1)]


@pytest.mark.parametrize("mode", MODES)
def test_fail_names_the_row_postgresql_refused_and_writes_nothing(
    spark: Any, pg: dict[str, Any], tmp_path: Path, mode: str
) -> None:
    create_table(pg)
    batches = [[("k0", row(id=0, name="a", v=1)), ("k1", row(id=1, name="b", v=-1))]]
    with pytest.raises(Exception, match=r"offset 1 was refused: .*SQLSTATE 23514"):
        run_poison_stream(spark, tmp_path, "postgresql", options(pg, mode), batches)
    assert ids(pg) == []
    assert leftovers(pg)[1] == []


@pytest.fixture(scope="module")
def faulty_postgresql(spark: Any) -> None:
    quixsinks.register(spark, faulty(PostgreSQLSink))


@pytest.mark.parametrize(
    ("mode", "phase"), [("exactly-once", "commit-before"), ("prepared", "commit-after")]
)
def test_a_batch_failing_after_its_dead_letters_were_staged_replays_them_once(
    spark: Any, faulty_postgresql: None, pg: dict[str, Any], tmp_path: Path, mode: str, phase: str
) -> None:
    """Batch 1 fails in its commit (before the sink's commit: its dead letters are
    published already; or after it landed); the restart from the checkpoint replays it."""
    create_table(pg)
    opts = options(
        pg,
        mode,
        fail_batch="1",
        fail_phase=phase,
        fail_marker=str(tmp_path / "fired"),
        **dead_letter(tmp_path),
    )
    with pytest.raises(Exception, match="injected failure"):
        run_poison_stream(spark, tmp_path, "faulty_postgresql", opts, BATCHES)
    run_poison_stream(spark, tmp_path, "faulty_postgresql", opts, BATCHES)
    assert ids(pg) == GOOD
    assert_dead_letters(tmp_path / "dead", sink="faulty_postgresql")
    assert leftovers(pg) == ([], [])


def test_a_ledger_from_before_commit_records_gets_the_column_and_keeps_its_entries(
    spark: Any, pg: dict[str, Any]
) -> None:
    """An existing ledger without `record` is migrated; its old entries have no record
    and are left out of commit_records, the new batch's record is there."""
    query(
        pg,
        "CREATE TABLE _quixsinks_ledger (sink_id text NOT NULL, batch_id bigint NOT NULL, "
        "query_id text NOT NULL DEFAULT '', tables text[] NOT NULL, rows bigint NOT NULL, "
        "committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (sink_id, batch_id)); "
        "INSERT INTO _quixsinks_ledger (sink_id, batch_id, tables, rows) "
        "VALUES ('older', 0, '{t}', 3)",
    )
    df = spark.range(0, 5, numPartitions=2).selectExpr("id")
    writer = df.write.format("postgresql").mode("append")
    opts = {**pg["options"], "table_name": "t", "sink_id": "keyed", "batch_id": "7"}
    for key, value in opts.items():
        writer = writer.option(key, value)
    writer.save()
    assert query(pg, "SELECT sink_id, record IS NULL FROM _quixsinks_ledger ORDER BY 1") == [
        ("keyed", False),
        ("older", True),
    ]
    records = quixsinks.commit_records("postgresql", **pg["options"], table_name="t").to_pylist()
    assert [(r["sink_id"], r["batch_id"], r["rows_written"]) for r in records] == [("keyed", 7, 5)]
