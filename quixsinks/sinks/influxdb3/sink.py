"""The InfluxDB 3 sink: vectorised line protocol, gzip, batch_size lines per request.

Executor: each SinkBatch becomes line protocol in Arrow (see ``lineprotocol``), sent in
requests of ``batch_size`` lines through influxdb3-python, synchronously, each request
under the sink's RetryPolicy: HTTP 429/503 become SinkBackpressureError (honouring
Retry-After), connection failures and other 5xx are retried with backoff; 422 (points
outside the retention period) skips the request with a warning and a count, unless
``raise_on_retention_violation``; 401/403 fail at once with an authentication error.

Driver: nothing to commit. A point is identified by measurement, tag set and time, so a
replayed micro-batch overwrites the same points with the same values: effectively
exactly-once.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import ssl
import urllib.error
import urllib.request
import zlib
from typing import Any, ClassVar

import pyarrow as pa

from quixsinks.core.arrow import join_lines
from quixsinks.core.batch import SinkBatch
from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
    MissingDependencyError,
    OptionError,
    QuixSinksError,
    RecordError,
    RetryableError,
    SinkBackpressureError,
    timed_out,
)
from quixsinks.core.sink import Sink
from quixsinks.core.tls import certificate_error, certificate_failure

from .lineprotocol import TIME_KEY, LineProtocol, field_kind, timestamps
from .options import InfluxDB3Options

__all__ = ["InfluxDB3Sink", "translate"]

# Clients per process (Python workers are reused between tasks), closed at exit
_CLIENTS: ClientCache[Any] = ClientCache("influxdb3 clients", lambda c: c.close())


def import_client() -> Any:
    try:
        import influxdb_client_3
    except ImportError as exc:
        raise MissingDependencyError("influxdb3-python", "influxdb3") from exc
    return influxdb_client_3


def _retry_after(value: Any) -> float | None:
    try:
        return max(0.0, float(value)) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None  # an HTTP date: use our own backoff


def translate(
    exc: Exception, where: str, *, retention_ok: bool, timeout_ms: int | None = None
) -> QuixSinksError | None:
    """The quixsinks error for a failed write; None for a 422 retention skip.
    ``timeout_ms``: ``request_timeout_ms``, named when the request timed out."""
    refused = certificate_failure(exc)
    if refused is not None:
        return _certificate_error(where, refused)
    response = getattr(exc, "response", None)
    status = getattr(response, "status", None)
    message = str(getattr(exc, "message", None) or exc).strip()
    text = f"{where}: HTTP {status}: {message}" if status else f"{where}: {message}"
    if status in (429, 503):
        retry_after = _retry_after(getattr(exc, "retry_after", None))
        if retry_after is not None:
            return SinkBackpressureError(retry_after, text)
        return RetryableError(text)
    if status == 422:
        return (
            None
            if retention_ok
            else RecordError(
                f"{text} (points outside the retention period; set "
                "raise_on_retention_violation=false to skip them)"
            )
        )
    if status in (401, 403):
        return DestinationAccessDeniedError(
            f"{where}: HTTP {status}: the token was refused; check 'token' (or INFLUXDB_TOKEN)",
            location=where,
        )
    if status == 404:
        return DestinationNotFoundError(f"{text}; does the database exist?", location=where)
    if status == 400:
        return RecordError(f"{text}")
    if status is not None and status >= 500:
        return RetryableError(text)
    if status is None and timeout_ms is not None and _is_timeout(exc):
        limit = timed_out(timeout_ms / 1000, "request_timeout_ms")
        return RetryableError(f"{where}: {limit}: {message}")
    if status is None:
        return RetryableError(f"{where}: cannot reach the server: {message}")
    return DestinationError(text, location=where)


def _certificate_error(where: str, why: str) -> DestinationError:
    return certificate_error(
        where,
        why,
        trust="set 'ssl_ca_cert' to a file holding its CA certificate (PEM)",
        skip="verify_ssl=false",
    )


def tls_context(options: InfluxDB3Options) -> ssl.SSLContext:
    """The TLS settings of the writes, for the requests the sink makes itself (the ping):
    the same CA bundle, the same verification."""
    if not options.verify_ssl:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=options.ssl_ca_cert)
    except (OSError, ssl.SSLError) as exc:
        raise OptionError(
            f"influxdb3: 'ssl_ca_cert' {options.ssl_ca_cert!r} is not a readable file of PEM "
            f"certificates: {exc}",
            option="ssl_ca_cert",
            value=options.ssl_ca_cert,
        ) from None


def _is_timeout(exc: BaseException) -> bool:
    """No answer in time: urllib3's timeouts (the client's), or the socket's (the ping's)."""
    kinds: tuple[type[BaseException], ...] = (TimeoutError,)
    try:
        import urllib3.exceptions

        kinds = (TimeoutError, urllib3.exceptions.TimeoutError)
    except ImportError:  # pragma: no cover - the client depends on urllib3
        pass
    return isinstance(exc, kinds) or isinstance(getattr(exc, "reason", None), kinds)


def is_server_error(exc: Exception) -> bool:
    """An HTTP answer or a network failure (translated), not a bug of ours (re-raised)."""
    if getattr(getattr(exc, "response", None), "status", None) is not None:
        return True
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in (
        "urllib3",
        "influxdb_client_3",
        "influxdb_client",
    )


class InfluxDB3Sink(Sink[InfluxDB3Options, None]):
    """Writes points to InfluxDB 3; effectively exactly-once. See docs/sinks/influxdb3.md."""

    name: ClassVar[str] = "influxdb3"
    options_class = InfluxDB3Options
    guarantee = "effectively exactly-once"
    extra = "influxdb3"
    retries_requests = True  # each request under the task's RetryPolicy, see write()

    def __init__(self, options: InfluxDB3Options, *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.protocol: LineProtocol | None = None
        self.time_column: str | None = None
        self.metadata_tags: dict[str, str] = {}

    @classmethod
    def check_dependencies(cls) -> None:
        import_client()

    def __repr__(self) -> str:
        return f"InfluxDB3Sink(host={self.options.host!r}, database={self.options.database!r})"

    # ------------------------------------------------------------------ driver: planning

    def prepare(self, schema: pa.Schema) -> None:
        super().prepare(schema)
        records = self.records
        assert records is not None
        opts = self.options
        names = set(schema.names)
        if opts.measurement_column is not None and opts.measurement_column not in names:
            raise OptionError(
                f"influxdb3: 'measurement_column' names {opts.measurement_column!r}, which the "
                f"DataFrame does not have; its columns are: {', '.join(schema.names)}",
                option="measurement_column",
                value=opts.measurement_column,
            )
        self.time_column = opts.time_key or records.timestamp
        if self.time_column is None:
            raise OptionError(
                "influxdb3: no time column; set 'time_key' or 'timestamp_column' (the DataFrame "
                "has no timestamp column to take the record time from)",
                option="time_key",
            )
        if self.time_column not in names:
            raise OptionError(
                f"influxdb3: 'time_key' names {self.time_column!r}, which the DataFrame does "
                f"not have; its columns are: {', '.join(schema.names)}",
                option="time_key",
                value=self.time_column,
            )
        time_type = schema.field(self.time_column).type
        if not (pa.types.is_timestamp(time_type) or pa.types.is_integer(time_type)):
            raise OptionError(
                f"influxdb3: time column {self.time_column!r} has type {time_type}; it must be "
                f"a timestamp or an integer epoch time in {opts.time_precision}",
                option="time_key",
                value=self.time_column,
            )
        if records.value_json:
            tags = list(opts.tags_keys)  # JSON keys or DataFrame columns, resolved per batch
        else:
            tags = [t for t in opts.tags_keys if t in names]
            absent_tags = [t for t in opts.tags_keys if t not in names]
            if absent_tags:
                self.logger.warning("tag columns %s are not in the DataFrame: skipped", absent_tags)
            for tag in tags:
                if pa.types.is_nested(schema.field(tag).type):
                    raise OptionError(
                        f"influxdb3: tag column {tag!r} has type {schema.field(tag).type}, which "
                        "cannot be a tag; use a column of text or numbers",
                        option="tags_keys",
                        value=tag,
                    )
        self.metadata_tags = {}
        if opts.include_metadata_tags:
            for tag, column in (
                ("__key", records.key),
                ("__topic", records.topic),
                ("__partition", records.partition),
            ):
                if column is not None:
                    self.metadata_tags[tag] = column
        taken = {self.time_column, opts.measurement_column, *tags}
        fields: list[str] = []
        if records.value_json:
            fields = list(opts.fields_keys)  # known per batch when empty
        elif opts.fields_keys:
            for name in opts.fields_keys:
                if name in names:
                    fields.append(name)
                elif not opts.allow_missing_fields:
                    raise OptionError(
                        f"influxdb3: field {name!r} is not in the DataFrame (columns: "
                        f"{', '.join(schema.names)}); set allow_missing_fields=true to skip it",
                        option="fields_keys",
                        value=name,
                    )
        else:
            fields = [n for n in records.values if n not in taken]
        if not records.value_json:
            for name in fields:
                if field_kind(schema.field(name).type) == "unsupported":
                    raise OptionError(
                        f"influxdb3: column {name!r} has type {schema.field(name).type}, which "
                        "cannot be a field; flatten it, serialise it to a string, or leave it "
                        "out with fields_keys",
                        option="fields_keys",
                        value=name,
                    )
            if not fields:
                raise OptionError(
                    "influxdb3: no field column left once tags and time are taken; every point "
                    "needs at least one field",
                    option="fields_keys",
                )
        self.protocol = LineProtocol(
            measurement=opts.measurement,
            measurement_column=opts.measurement_column,
            tags=(*tags, *self.metadata_tags),
            fields=tuple(fields),
            precision=opts.time_precision,
            ints_to_floats=opts.convert_ints_to_floats,
            invalid_floats=opts.invalid_floats,
            decimals=opts.decimal_fields,
        )

    def preflight(self) -> None:
        """Ping the server once with the token and the writes' TLS settings (verify_ssl,
        ssl_ca_cert): unreachable, refused or an untrusted certificate fails here."""
        opts = self.options
        request = urllib.request.Request(f"{opts.host.rstrip('/')}/ping")
        if opts.token:
            request.add_header("Authorization", f"Token {opts.token}")
        context = tls_context(opts) if opts.host.startswith("https://") else None
        try:
            with urllib.request.urlopen(
                request, timeout=opts.request_timeout_ms / 1000, context=context
            ):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise DestinationAccessDeniedError(
                    f"{opts.host}: HTTP {exc.code}: the token was refused; check 'token' "
                    "(or INFLUXDB_TOKEN)",
                    location=opts.host,
                ) from None
            if exc.code != 404:  # some servers have no /ping; the first write will tell
                raise DestinationError(
                    f"{opts.host}: ping answered HTTP {exc.code}", location=opts.host
                ) from None
        except (urllib.error.URLError, OSError) as exc:
            refused = certificate_failure(exc)
            if refused is not None:
                raise _certificate_error(opts.host, refused) from None
            reason = getattr(exc, "reason", exc)
            if _is_timeout(exc):
                limit = timed_out(opts.request_timeout_ms / 1000, "request_timeout_ms")
                raise DestinationError(f"{opts.host}: ping {limit}", location=opts.host) from None
            raise DestinationError(
                f"{opts.host}: cannot reach the server: {reason}", location=opts.host
            ) from None

    # ------------------------------------------------------------------ executor

    def _client(self) -> Any:
        return _CLIENTS.get(client_key(self.options), self._new_client)

    def _new_client(self) -> Any:
        opts = self.options
        # No write_client_options: its WriteOptions would switch on batching with
        # client-side retries; the defaults are synchronous and retry nothing. The
        # client's own gzip runs at level 9 (17 MB/s); the sink compresses instead.
        tls: dict[str, str] = {}
        if opts.ssl_ca_cert is not None:
            tls["ssl_ca_cert"] = opts.ssl_ca_cert
        return import_client().InfluxDBClient3(
            host=opts.host,
            token=opts.token,
            database=opts.database,
            org=opts.organization_id or None,
            enable_gzip=False,
            write_timeout=opts.request_timeout_ms,
            verify_ssl=opts.verify_ssl,
            debug=opts.debug,
            **tls,
        )

    def write(self, batch: SinkBatch) -> None:
        assert self.protocol is not None
        assert self.time_column is not None
        protocol = self.protocol
        values = batch.values()
        if self.records is not None and self.records.value_json:
            protocol = self._json_protocol(protocol, values, batch)
        columns: dict[str, pa.Array] = {}
        for name in (*protocol.tags, *protocol.fields, protocol.measurement_column):
            if name is None or name in columns:
                continue
            if name in self.metadata_tags:
                columns[name] = batch.column(self.metadata_tags[name])
            elif name in values.column_names:
                columns[name] = values.column(name).combine_chunks()
            elif name in batch.table.column_names:
                columns[name] = batch.column(name)
            else:  # a tag that no row of this batch has: left out of every line
                columns[name] = pa.nulls(batch.num_rows, pa.string())
        times = timestamps(
            batch.column(self.time_column), self.options.time_precision, name=self.time_column
        )
        lines, skipped = protocol.lines(columns, times, batch.num_rows)
        if skipped:
            batch.count("skipped_no_fields", skipped)
        task = batch.task
        for start in range(0, len(lines), self.options.batch_size):
            chunk = lines.slice(start, self.options.batch_size)
            request = functools.partial(self._send, join_lines(chunk, b"").to_pybytes())
            what = f"influxdb3 write of {len(chunk)} lines"
            # one retry layer: per request, under the task's policy (the glue adds none)
            sent = task.retry(request, what=what) if task is not None else request()
            if not sent:
                batch.count("skipped_retention", len(chunk))
        batch.count("points", len(lines))

    def _json_protocol(
        self, protocol: LineProtocol, values: pa.Table, batch: SinkBatch
    ) -> LineProtocol:
        """The fields of a batch of JSON values: ``fields_keys``, or every key that is not
        a tag; a ``fields_keys`` entry that no row of the batch has is a RecordError unless
        allow_missing_fields."""
        present = set(values.column_names) | set(batch.table.column_names)
        if protocol.fields:
            missing = [f for f in protocol.fields if f not in present]
            if missing and not self.options.allow_missing_fields:
                raise RecordError(
                    f"influxdb3: fields_keys {', '.join(map(repr, missing))} in no row of this "
                    f"batch's JSON values (keys: {', '.join(values.column_names) or 'none'}); "
                    "set allow_missing_fields=true to write the points without them",
                    column=missing[0],
                )
            fields = tuple(f for f in protocol.fields if f in present)
        else:
            taken = {protocol.measurement_column, *protocol.tags}
            fields = tuple(n for n in values.column_names if n not in taken)
        if TIME_KEY in fields:
            raise RecordError(
                "influxdb3: the JSON values of this batch have a key 'time', which cannot be a "
                "field (InfluxDB's time column; InfluxDB 1.x drops such a field silently): "
                "rename the key, or choose the fields with fields_keys",
                column=TIME_KEY,
            )
        return dataclasses.replace(protocol, fields=fields)

    def _send(self, body: bytes) -> bool:
        """One request; False when the server dropped it for its retention period."""
        extra: dict[str, str] = {}
        if self.options.enable_gzip:
            # level 1: ~9x faster than the client's level 9, for a slightly larger body
            body = _gzip(body)
            extra["content_encoding"] = "gzip"
        try:
            self._client().write(record=body, write_precision=self.options.time_precision, **extra)
            return True
        except Exception as exc:
            if not is_server_error(exc):
                raise
            where = f"{self.options.host} database {self.options.database}"
            error = translate(
                exc,
                where,
                retention_ok=not self.options.raise_on_retention_violation,
                timeout_ms=self.options.request_timeout_ms,
            )
            if error is None:
                self.logger.warning(
                    "%s: points outside the retention period dropped (HTTP 422)", where
                )
                return False
            if isinstance(error, RecordError):
                error = RecordError(_with_lines(error.message, exc))
            raise error from exc


def _gzip(body: bytes) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
    return compressor.compress(body) + compressor.flush()


def _with_lines(message: str, exc: Exception) -> str:
    """Add the failing line numbers of a partial write, when the server gave them."""
    details = getattr(exc, "line_errors", None)
    if details:
        lines = ", ".join(f"line {d.line_number}: {d.error_message}" for d in details[:5])
        return f"{message} [{lines}]"
    data = getattr(getattr(exc, "response", None), "data", None)
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        return message
    if isinstance(parsed, dict) and isinstance(parsed.get("data"), list):
        lines = ", ".join(
            f"line {d.get('line_number')}: {d.get('error_message')}"
            for d in parsed["data"][:5]
            if isinstance(d, dict)
        )
        return f"{message} [{lines}]"
    return message
