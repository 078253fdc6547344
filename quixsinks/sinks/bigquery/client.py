"""Clients of the BigQuery sink, and the one place where Google's errors become ours.

``clients(options)`` gives the process's cached pair of a ``google.cloud.bigquery.Client``
(REST: tables, queries) and a ``BigQueryWriteClient`` (gRPC: the Storage Write API), made
from the sink's options with Google's shared credentials (:mod:`quixsinks.core.vendors.google`).
``translate`` maps what they raise through Google's one error map: not found, access
denied, throttled (:class:`SinkBackpressureError`), retryable (unavailable, a passed
deadline), everything else a DestinationError that fails the task.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.errors import CommitError, DestinationError, QuixSinksError, RetryableError
from quixsinks.core.vendors import google
from quixsinks.core.vendors.http import import_client

from .options import BigQueryOptions

__all__ = [
    "Clients",
    "clients",
    "credentials",
    "ddl_kwargs",
    "describe",
    "import_bigquery",
    "run_query",
    "translate",
    "write_retry",
]

#: gRPC messages to and from an emulator (an append request is at most 10 MB)
_EMULATOR_MESSAGE_BYTES = 20 * 1024 * 1024

_SERVICE = google.GoogleService(
    name="BigQuery",
    roles="the credentials need roles/bigquery.dataEditor on the dataset and "
    "roles/bigquery.jobUser on the project",
    timed_out="timed out (no answer within the options ddl_timeout, insert_timeout or "
    "retry_timeout)",
    connect_hint="check the network and api_endpoint",
    throttle_seconds=5.0,
)


def import_bigquery() -> Any:
    """``google.cloud.bigquery``, or MissingDependencyError naming the extra."""
    import_client(
        "google.cloud.bigquery_storage_v1",
        package="google-cloud-bigquery-storage",
        extra="bigquery",
    )
    return import_client(
        "google.cloud.bigquery", package="google-cloud-bigquery-storage", extra="bigquery"
    )


def describe(options: BigQueryOptions) -> str:
    """Where the sink writes, for messages (never a credential)."""
    return f"bigquery table {options.table_path}"


def credentials(options: BigQueryOptions) -> Any:
    """Credentials from ``service_account_json``, anonymous for an http:// emulator
    endpoint, else None (application-default credentials, found by the client libraries)."""
    return google.credentials(options.service_account_json, anonymous=options.emulator)


def translate(exc: BaseException, where: str) -> QuixSinksError:
    """The quixsinks error for what a BigQuery client raised (chain the original)."""
    error = google.classify(exc, where, _SERVICE)
    if error is None:
        return DestinationError(f"{where}: {type(exc).__name__}: {exc}", location=where)
    return error


@dataclass
class Clients:
    """One process's BigQuery clients for one set of options."""

    bigquery: Any
    write: Any
    channel: Any = None

    def close(self) -> None:
        try:
            self.bigquery.close()
        finally:
            if self.channel is not None:
                self.channel.close()


_CLIENTS: ClientCache[Clients] = ClientCache("bigquery clients", lambda c: c.close())


def clients(options: BigQueryOptions) -> Clients:
    """The process's cached clients for ``options`` (made on first use)."""
    return _CLIENTS.get(client_key(options), lambda: _create(options))


def _create(options: BigQueryOptions) -> Clients:
    bigquery = import_bigquery()
    from google.api_core.client_options import ClientOptions
    from google.cloud import bigquery_storage_v1

    creds = credentials(options)
    endpoint = options.api_endpoint
    try:
        bq = bigquery.Client(
            project=options.project_id,
            credentials=creds,
            location=options.location,
            client_options=ClientOptions(api_endpoint=endpoint) if endpoint else None,
        )
    except Exception as exc:
        raise translate(exc, describe(options)) from exc
    channel = None
    try:
        if options.emulator and options.grpc_endpoint:
            from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
                BigQueryWriteGrpcTransport,
            )

            channel = google.emulator_channel(
                options.grpc_endpoint, max_message_bytes=_EMULATOR_MESSAGE_BYTES
            )
            transport = BigQueryWriteGrpcTransport(channel=channel)
            write = bigquery_storage_v1.BigQueryWriteClient(transport=transport)
        else:
            grpc_endpoint = options.grpc_endpoint
            write = bigquery_storage_v1.BigQueryWriteClient(
                credentials=creds,
                client_options=ClientOptions(api_endpoint=grpc_endpoint) if grpc_endpoint else None,
            )
    except Exception as exc:
        bq.close()
        raise translate(exc, describe(options)) from exc
    return Clients(bq, write, channel)


def write_retry(options: BigQueryOptions) -> Any:
    """The retry of a Storage Write API call: the library's own (a passed deadline, throttling,
    an unavailable service), for at most ``retry_timeout`` seconds. Its defaults retry for
    10 minutes (20 for CreateWriteStream, a day for AppendRows): against a hung endpoint a
    task would wait that long, whatever the per-call timeout."""
    from google.api_core import exceptions as gexc
    from google.api_core.retry import Retry, if_exception_type

    return Retry(
        initial=0.1,
        maximum=10.0,
        multiplier=1.3,
        predicate=if_exception_type(
            gexc.DeadlineExceeded, gexc.ResourceExhausted, gexc.ServiceUnavailable
        ),
        timeout=options.retry_timeout,
    )


def ddl_kwargs(options: BigQueryOptions) -> dict[str, Any]:
    """``timeout`` and ``retry`` of a REST call (tables, datasets, ledger reads)."""
    from google.api_core.retry import Retry
    from google.cloud.bigquery.retry import DEFAULT_RETRY

    retry: Retry = DEFAULT_RETRY.with_deadline(options.retry_timeout)
    return {"timeout": options.ddl_timeout, "retry": retry}


#: how often a commit job that outlived its wait is polled until it has stopped (seconds)
JOB_POLL_SECONDS = 0.5


def run_query(options: BigQueryOptions, sql: str, *, settle: bool = False) -> None:
    """Run one (multi-statement) query job to its end.

    ``settle`` (a commit transaction, which the caller retries): a job that outlives its
    wait is not left running while a retry submits another one (two transactions that
    append do not conflict in BigQuery: both would land). It is cancelled and polled
    until it has stopped: if it committed meanwhile the call succeeds; else the retry may
    go (a RetryableError); a job that does not stop within another wait leaves the outcome
    unknown, a CommitError that the caller does not retry."""
    from google.cloud.bigquery.retry import DEFAULT_JOB_RETRY, DEFAULT_RETRY

    deadline = options.retry_timeout
    job = None
    try:
        job = clients(options).bigquery.query(
            sql,
            timeout=options.ddl_timeout,
            retry=DEFAULT_RETRY.with_deadline(deadline),
            job_retry=DEFAULT_JOB_RETRY.with_deadline(deadline),
        )
        job.result(timeout=deadline + options.insert_timeout)
    except TimeoutError as exc:
        if settle and job is not None:
            _stop(options, job)
            return
        raise translate(exc, describe(options)) from exc
    except Exception as exc:
        raise translate(exc, describe(options)) from exc


def _stop(options: BigQueryOptions, job: Any) -> None:
    """Cancel a commit job that outlived its wait and wait until it has stopped; return if
    it committed, raise RetryableError if it did not, CommitError if it will not stop."""
    where = describe(options)
    try:
        job.cancel(timeout=options.ddl_timeout)
        stop_by = time.monotonic() + options.retry_timeout + options.insert_timeout
        while True:
            job.reload(timeout=options.ddl_timeout)
            if job.state == "DONE" or time.monotonic() > stop_by:
                break
            time.sleep(JOB_POLL_SECONDS)
    except Exception as exc:
        raise CommitError(
            f"{where}: the commit job {job.job_id} outlived its wait and could not be "
            f"stopped ({type(exc).__name__}: {exc}); its outcome is unknown, so it is not "
            "submitted again here: the query's restart finds it in the ledger if it landed"
        ) from exc
    if job.state != "DONE":
        raise CommitError(
            f"{where}: the commit job {job.job_id} outlived its wait and did not stop when "
            "cancelled; its outcome is unknown, so it is not submitted again here: the "
            "query's restart finds it in the ledger if it landed"
        )
    if job.error_result:
        raise RetryableError(
            f"{where}: the commit job {job.job_id} outlived its wait and was stopped "
            f"({job.error_result.get('message', job.error_result)}); nothing was committed"
        )
