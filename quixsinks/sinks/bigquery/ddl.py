"""Datasets and tables of the BigQuery sink: created when missing, columns added, checked.

Each process remembers the columns of the tables it has checked (no table fetch per batch,
unlike Quix's sink) and checks again only when a batch brings a new column.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from quixsinks.core.errors import DestinationError, DestinationNotFoundError, QuixSinksError

from .client import clients, ddl_kwargs, import_bigquery, translate
from .options import BigQueryOptions
from .schema import BQField, conflict

__all__ = ["ColumnConflict", "check_dataset", "ensure_table"]

logger = logging.getLogger("quixsinks.sinks.bigquery")


class _Shapes:
    """Per process: table id -> its columns, as last checked."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tables: dict[str, list[BQField]] = {}


_SHAPES = _Shapes()


def ensure_table(
    options: BigQueryOptions, table_id: str, wanted: Sequence[BQField], *, internal: bool = False
) -> list[BQField]:
    """The columns of ``table_id``, with every wanted column present (created or added as
    ``schema_auto_update`` allows; always for the sink's ``internal`` tables)."""
    cached = _SHAPES.tables.get(table_id)
    if cached is not None:
        if _covers(cached, wanted):
            return cached
        # a column's type never changes: a conflict with the known shape needs no request
        _missing(cached, wanted, f"bigquery table {table_id}", table_id)
    with _SHAPES.lock:
        fields = _ensure_now(options, table_id, wanted, internal=internal)
        _SHAPES.tables[table_id] = fields
        return fields


def _ensure_now(
    options: BigQueryOptions, table_id: str, wanted: Sequence[BQField], *, internal: bool
) -> list[BQField]:
    bigquery = import_bigquery()
    from google.api_core import exceptions as gexc

    kw = ddl_kwargs(options)
    auto = options.schema_auto_update or internal
    where = f"bigquery table {table_id}"
    try:
        bq = clients(options).bigquery
        try:
            table = bq.get_table(table_id, **kw)
        except gexc.NotFound:
            if not auto:
                raise DestinationNotFoundError(
                    f"{where} does not exist (or its dataset does not) and "
                    "schema_auto_update is false: create it, or set schema_auto_update=true",
                    location=table_id,
                ) from None
            _ensure_dataset(options)
            schema = [_schema_field(bigquery, f) for f in wanted]
            table = bq.create_table(bigquery.Table(table_id, schema=schema), exists_ok=True, **kw)
            logger.info("created %s (%d columns)", where, len(schema))
        existing = [_from_schema_field(f) for f in table.schema]
        missing = _missing(existing, wanted, where, table_id)
        if missing:
            if not auto:
                raise DestinationError(
                    f"{where} lacks the columns {', '.join(f.name for f in missing)} and "
                    "schema_auto_update is false: add them, or set schema_auto_update=true",
                    location=table_id,
                )
            added = [_nullable(f) for f in missing]
            table.schema = [*table.schema, *(_schema_field(bigquery, f) for f in added)]
            table = bq.update_table(table, ["schema"], **kw)
            logger.info("%s: added the columns %s", where, ", ".join(f.name for f in added))
            existing = [_from_schema_field(f) for f in table.schema]
        return existing
    except QuixSinksError:
        raise
    except Exception as exc:
        raise translate(exc, where) from exc


class ColumnConflict(DestinationError):
    """A column of the rows whose type the table's column of that name cannot take."""


def _missing(
    existing: Sequence[BQField], wanted: Sequence[BQField], where: str, table_id: str
) -> list[BQField]:
    """The wanted columns the table lacks; DestinationError for one of a conflicting type."""
    by_name = {f.name.lower(): f for f in existing}
    missing = []
    for f in wanted:
        there = by_name.get(f.name.lower())
        if there is None:
            missing.append(f)
            continue
        problem = conflict(f, there)
        if problem:
            raise ColumnConflict(
                f"{where}: column {f.name!r} conflicts with the rows: {problem}; "
                "cast the column in Spark or write to another table",
                location=table_id,
            )
    return missing


def check_dataset(options: BigQueryOptions) -> None:
    """The dataset exists (created when missing, as ``schema_auto_update`` allows)."""
    from google.api_core import exceptions as gexc

    try:
        clients(options).bigquery.get_dataset(
            f"{options.project_id}.{options.dataset_id}", **ddl_kwargs(options)
        )
    except gexc.NotFound:
        if not options.schema_auto_update:
            raise DestinationNotFoundError(
                f"bigquery dataset {options.project_id}.{options.dataset_id} does not exist and "
                "schema_auto_update is false: create it, or set schema_auto_update=true",
                location=options.table_path,
            ) from None
        _ensure_dataset(options)
    except Exception as exc:
        raise translate(exc, f"bigquery table {options.table_path}") from exc


def _ensure_dataset(options: BigQueryOptions) -> None:
    bigquery = import_bigquery()
    dataset = bigquery.Dataset(f"{options.project_id}.{options.dataset_id}")
    if options.location:
        dataset.location = options.location
    clients(options).bigquery.create_dataset(dataset, exists_ok=True, **ddl_kwargs(options))


def _covers(existing: Sequence[BQField], wanted: Sequence[BQField]) -> bool:
    """Whether ``existing`` has every wanted column, each of a fitting type."""
    by_name = {f.name.lower(): f for f in existing}
    return all(
        f.name.lower() in by_name and conflict(f, by_name[f.name.lower()]) is None for f in wanted
    )


def _nullable(f: BQField) -> BQField:
    return f if f.mode == "REPEATED" else BQField(f.name, f.type, "NULLABLE", f.fields)


def _schema_field(bigquery: Any, f: BQField) -> Any:
    return bigquery.SchemaField(
        f.name, f.type, mode=f.mode, fields=[_schema_field(bigquery, c) for c in f.fields]
    )


def _from_schema_field(f: Any) -> BQField:
    return BQField.canonical(
        f.name, f.field_type, f.mode, [_from_schema_field(c) for c in f.fields]
    )
