"""Options of the ``postgresql`` sink (Quix PostgreSQLSink's names, snake_case or camelCase)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from quixsinks.core.errors import OptionError
from quixsinks.core.options import option
from quixsinks.core.sink import LedgerOptions

from .schema import identifier_problem

__all__ = ["PostgreSQLOptions", "parse_conninfo"]


@dataclass(frozen=True, kw_only=True)
class PostgreSQLOptions(LedgerOptions):
    sink_name: ClassVar[str] = "postgresql"

    host: str = option("localhost", doc="Server host")
    port: int = option(5432, minimum=1, doc="Server port")
    dbname: str = option(doc="Database name")
    user: str = option("postgres", doc="User name")
    password: str | None = option(
        None, secret=True, env="PGPASSWORD", doc="Password (default: the PGPASSWORD variable)"
    )
    table_name: str | None = option(
        None, one_of="table", doc="Target table (give this or table_name_column)"
    )
    table_name_column: str | None = option(
        None, one_of="table", doc="Column whose value names each row's table (one table per value)"
    )
    schema_name: str = option("public", doc="Schema of the tables (created if missing)")
    schema_auto_update: bool = option(
        True, doc="Create missing tables and add missing nullable columns"
    )
    connection_timeout_seconds: int = option(
        30,
        minimum=1,
        doc="Seconds to wait for a connection: TCP, TLS, authentication and the first answer "
        "(libpq's connect_timeout; it waits at least 2)",
    )
    statement_timeout_seconds: int = option(
        30, minimum=0, doc="statement_timeout of every session (0: none)"
    )
    primary_key_columns: tuple[str, ...] = option(
        (), doc="Comma-separated primary key columns (used by upsert and by new tables)"
    )
    upsert_on_primary_key: bool = option(
        False, doc="INSERT ... ON CONFLICT (primary key) DO UPDATE; last row of a key wins"
    )
    on_conflict_do_nothing: bool = option(
        False, doc="INSERT ... ON CONFLICT DO NOTHING: keep the rows already there"
    )
    delete_column: str | None = option(
        None,
        doc="Change streams: a boolean column (true: delete), or a text op column ('d' or "
        "'delete', any case: delete), whose delete rows remove their primary key from the "
        "table in the same transaction; needs upsert_on_primary_key (the last row of a key "
        "wins: an upsert or a delete); the column itself is not written",
    )
    schema_contract: Literal["evolve", "freeze", "discard_row", "discard_value"] = option(
        "evolve",
        doc="A column the existing table lacks (dlt's names): evolve adds it; freeze fails "
        "the write; discard_row drops the rows that have a value in it; discard_value "
        "drops its values (a new table is always created with every column)",
    )
    include_metadata: bool = option(
        True, doc="Add the columns `timestamp` (record time) and `__key` (record key)"
    )
    key_text_format: Literal["utf8", "hex"] = option(
        "utf8",
        doc="How a binary key is written into an existing text `__key` column (a table Quix's "
        "PostgreSQLSink created): utf8 writes the key's text (a key that is not UTF-8 is "
        "refused, as on_error says); hex writes PostgreSQL's bytea text, `\\x6b31`, what "
        "Quix writes for a bytes key (its default key_deserializer)",
    )
    write_mode: Literal["exactly-once", "prepared", "direct"] = option(
        "exactly-once",
        doc="exactly-once: stage, then one driver transaction with a ledger row; prepared: "
        "exactly-once without the staging copy, COPY straight into the table in a prepared "
        "(two-phase) transaction that the driver commits (appends only; the server needs "
        "max_prepared_transactions > 0); direct: COPY straight into the table "
        "(at-least-once)",
    )
    copy_format: Literal["binary", "csv"] = option(
        "binary",
        doc="How rows travel: binary COPY encoded from Arrow by pgpq (falls back to CSV for a "
        "COPY whose columns it cannot map exactly, see docs), or CSV always",
    )
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = option(
        "prefer",
        doc="libpq sslmode, for every connection (the driver's and the tasks'): prefer (libpq's "
        "default) and require encrypt without checking the server's certificate; verify-full "
        "checks it and the host name against sslrootcert",
    )
    sslrootcert: str | None = option(
        None,
        doc="CA certificate file (PEM) that verifies the server, for sslmode verify-ca or "
        "verify-full (libpq's sslrootcert; 'system': the system's CAs); default: libpq's "
        "~/.postgresql/root.crt. The path must exist on the driver and on every executor",
    )
    connect_options: str = option(
        "",
        secret=True,
        doc="More libpq parameters, 'key=value key=value' (libpq conninfo syntax, values may "
        "be single-quoted, e.g. options='-c search_path=app'); an `options` value is merged "
        "with the sink's own (its sessions always run with timezone=UTC); client "
        "certificates go here (sslcert, sslkey), sslmode and sslrootcert are options",
    )
    max_connections_per_executor: int = option(
        4, minimum=1, doc="Connections the tasks of one executor machine open to the server at once"
    )

    def validate(self) -> None:
        super().validate()
        if self.table_name is None and self.table_name_column is None:
            raise OptionError(
                "postgresql: give exactly one of 'table_name' and 'table_name_column'",
                option="table_name",
            )
        if self.upsert_on_primary_key and self.on_conflict_do_nothing:
            raise OptionError(
                "'upsert_on_primary_key' and 'on_conflict_do_nothing' cannot both be true",
                option="upsert_on_primary_key",
            )
        if self.upsert_on_primary_key and not self.primary_key_columns:
            raise OptionError(
                "'upsert_on_primary_key' needs 'primary_key_columns'",
                option="primary_key_columns",
            )
        if self.delete_column is not None and not self.upsert_on_primary_key:
            raise OptionError(
                "'delete_column' needs upsert_on_primary_key=true (and primary_key_columns): "
                "a delete removes the row of its primary key, the last row of a key wins",
                option="delete_column",
                value=self.delete_column,
            )
        if self.write_mode == "prepared":
            conflicting = [
                name
                for name in ("upsert_on_primary_key", "on_conflict_do_nothing")
                if getattr(self, name)
            ] + (["delete_column"] if self.delete_column is not None else [])
            if conflicting:
                raise OptionError(
                    f"postgresql: write_mode=prepared appends rows; {conflicting[0]!r} needs "
                    "the rows staged first: use write_mode=exactly-once",
                    option="write_mode",
                    value="prepared",
                )
        for name, value in (("table_name", self.table_name), ("schema_name", self.schema_name)):
            problem = identifier_problem(value) if value is not None else None
            if problem:
                raise OptionError(
                    f"postgresql: option {name!r}: {problem}; choose a shorter name",
                    option=name,
                    value=value,
                )
        extra = parse_conninfo(self.connect_options)
        if "connect_timeout" in extra:
            raise OptionError(
                "option 'connect_options': set the connect timeout with "
                "'connection_timeout_seconds', not connect_timeout (a connect_timeout of 0 "
                "would wait forever)",
                option="connect_options",
                value="***",
            )
        for key in ("sslmode", "sslrootcert"):
            if key in extra:
                raise OptionError(
                    f"option 'connect_options': set {key} with the option {key!r}, not in "
                    "connect_options (one place for the TLS settings of every connection)",
                    option="connect_options",
                    value="***",
                )

    @property
    def exactly_once(self) -> bool:
        """Whether the writes go through the fenced ledger (not ``direct``)."""
        return self.write_mode != "direct"


def parse_conninfo(text: str) -> dict[str, str]:
    """``key=value`` pairs in libpq's conninfo syntax (values may be single-quoted, with
    backslash escapes). OptionError, never showing a value (it may hold a password)."""
    params: dict[str, str] = {}
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return params
        start = i
        while i < n and text[i] != "=" and not text[i].isspace():
            i += 1
        key = text[start:i]
        while i < n and text[i].isspace():
            i += 1
        if not key or i >= n or text[i] != "=":
            raise OptionError(
                f"option 'connect_options': entry {len(params) + 1} is not key=value (the "
                "value is not shown: it may be secret)",
                option="connect_options",
                value="***",
            )
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value: list[str] = []
        if i < n and text[i] == "'":
            i += 1
            while i < n and text[i] != "'":
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
            if i >= n:
                raise OptionError(
                    f"option 'connect_options': the value of {key!r} has no closing quote",
                    option="connect_options",
                    value="***",
                )
            i += 1
        else:
            while i < n and not text[i].isspace():
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
        params[key] = "".join(value)
