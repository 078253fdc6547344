"""The Pub/Sub sink's client, and the one place where what it raises becomes a quixsinks error.

``publisher(options)`` gives the process's cached ``PublisherClient`` for one set of options
(its batch and flow-control settings; the library's own retries off, so the sink's
RetryPolicy is the only one), with Google's shared credentials
(:mod:`quixsinks.core.vendors.google`) or, with ``emulator_host``, a plain-text channel.
``translate`` classifies through Google's one error map; Pub/Sub adds a missing topic
(:class:`PubSubTopicNotFoundError`, Quix's name) and a refused message (a RecordError
naming its row).
"""

from __future__ import annotations

import os
from typing import Any

from quixsinks.core.clients import ClientCache, client_key
from quixsinks.core.errors import (
    DestinationError,
    DestinationNotFoundError,
    QuixSinksError,
    RecordError,
    timed_out,
)
from quixsinks.core.vendors import google
from quixsinks.core.vendors.http import import_client

from .options import PubSubOptions

__all__ = ["PubSubTopicNotFoundError", "import_pubsub", "not_found", "publisher", "translate"]

_SCOPES = ("https://www.googleapis.com/auth/pubsub",)


class PubSubTopicNotFoundError(DestinationNotFoundError):
    """The Pub/Sub topic does not exist (Quix's name)."""


def import_pubsub() -> Any:
    """``google.cloud.pubsub_v1``, or MissingDependencyError naming the extra."""
    return import_client("google.cloud.pubsub_v1", package="google-cloud-pubsub", extra="pubsub")


def not_found(topic: str) -> PubSubTopicNotFoundError:
    return PubSubTopicNotFoundError(
        f"pubsub: topic {topic} does not exist; create it (gcloud pubsub topics create) or "
        "fix 'project_id' / 'topic_id'",
        location=topic,
    )


def translate(
    exc: BaseException, topic: str, *, timeout: float, rows: tuple[int, int] | None = None
) -> QuixSinksError:
    """The quixsinks error for a publish (or ``get_topic``) failure: RetryableError for one
    to resend. ``timeout`` is the call's ``publish_timeout``; ``rows``, the first and last
    row of the refused messages."""

    def pubsub_errors(error: BaseException, where: str) -> QuixSinksError | None:
        from google.api_core import exceptions as api

        if isinstance(error, api.NotFound):
            return not_found(topic)
        if isinstance(error, api.InvalidArgument) and rows is not None:
            first, last = rows
            which = f"row {first}" if first == last else f"rows {first}..{last}"
            return RecordError(
                f"pubsub: {topic} refused the message of {which}: {error.message}", row=first
            )
        return None

    service = google.GoogleService(
        name=topic,
        roles="check 'service_account_json' (the role roles/pubsub.publisher on the topic)",
        timed_out=timed_out(timeout, "publish_timeout"),
        connect_hint="check the network and emulator_host",
        hook=pubsub_errors,
    )
    error = google.classify(exc, "pubsub", service)
    if error is None:
        return DestinationError(
            f"pubsub: publishing to {topic} failed: {type(exc).__name__}: {exc}", location=topic
        )
    return error


def _close_publisher(publisher: Any) -> None:
    try:
        publisher.stop()
    finally:
        publisher.transport.close()


#: PublisherClients per process (Python workers are reused between tasks), closed at exit
_PUBLISHERS: ClientCache[Any] = ClientCache("pubsub publishers", _close_publisher, max_size=4)


def publisher(options: PubSubOptions) -> Any:
    """The process's cached PublisherClient for ``options`` (made on first use)."""
    return _PUBLISHERS.get(client_key(options), lambda: _new_publisher(options))


def _new_publisher(opts: PubSubOptions) -> Any:
    pubsub_v1 = import_pubsub()
    kwargs: dict[str, Any] = {}
    if opts.emulator_host:
        from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

        kwargs["transport"] = PublisherGrpcTransport(
            channel=google.emulator_channel(opts.emulator_host),
            credentials=google.credentials(None, anonymous=True),
        )
    else:
        kwargs["credentials"] = google.credentials(opts.service_account_json, scopes=_SCOPES)
    batch = pubsub_v1.types.BatchSettings(
        max_bytes=opts.max_bytes, max_latency=opts.max_latency, max_messages=opts.max_messages
    )
    flow = pubsub_v1.types.PublishFlowControl(
        message_limit=opts.max_outstanding_messages,
        byte_limit=opts.max_outstanding_bytes,
        limit_exceeded_behavior=pubsub_v1.types.LimitExceededBehavior.BLOCK,
    )
    publisher_options = pubsub_v1.types.PublisherOptions(
        enable_message_ordering=opts.ordering_key_column is not None,
        flow_control=flow,
        retry=None,
        timeout=opts.publish_timeout,
    )
    environ = os.environ.pop("PUBSUB_EMULATOR_HOST", None)  # the option decides, not it
    try:
        return pubsub_v1.PublisherClient(
            batch_settings=batch, publisher_options=publisher_options, **kwargs
        )
    finally:
        if environ is not None:
            os.environ["PUBSUB_EMULATOR_HOST"] = environ
