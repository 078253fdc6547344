"""The postgresql sink's driver-side transactions (commits, DDL, the ledger) run on
connections kept open between micro-batches, and a server restart or crash between two of
them costs a new connection, never an error."""

from __future__ import annotations

from typing import Any

import pytest

from quixsinks.sinks.postgresql import client
from quixsinks.sinks.postgresql.options import PostgreSQLOptions


def options(pg: dict[str, Any]) -> PostgreSQLOptions:
    return PostgreSQLOptions.from_options({**pg["options"], "table_name": "t"})


def backend(opts: PostgreSQLOptions) -> int:
    with client.session(opts) as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid: int = cur.fetchone()[0]
        return pid


def test_sessions_run_on_one_connection_one_user_at_a_time(pg: dict[str, Any]) -> None:
    opts = options(pg)
    first = backend(opts)
    assert backend(opts) == first  # kept open between transactions
    with client.session(opts) as outer:
        outer.execute("SELECT pg_backend_pid()")
        assert outer.fetchone()[0] == first
        assert backend(opts) != first  # a nested transaction gets its own connection


def test_a_failed_transaction_closes_its_connection(pg: dict[str, Any]) -> None:
    opts = options(pg)
    first = backend(opts)
    with pytest.raises(Exception, match="no_such_table"), client.session(opts) as cur:
        cur.execute("SELECT * FROM no_such_table")
    assert backend(opts) != first


@pytest.mark.parametrize("fault", ["restart", "crash"])
def test_a_server_restart_between_transactions_costs_a_new_connection(
    pg: dict[str, Any], fault: str
) -> None:
    opts = options(pg)
    before = backend(opts)
    getattr(pg["server"], fault)()
    after = backend(opts)  # no error: the pooled connection was found closed
    assert after != before
    assert backend(opts) == after
