"""How a task's messages reach Pub/Sub: one ``send`` per :func:`~quixsinks.core.delivery.deliver`
chunk, returning the messages to resend.

- :class:`RequestSender` (no ordering keys): each chunk is one PublishRequest, serialized
  by the sink (:mod:`.wire`) and sent on the cached PublisherClient's gRPC channel.
- :class:`RoundSender` (ordering keys): the client library publishes, then the round waits
  for every future; a failed key is paused by the client and resumed before its resend.

A failure is classified by :func:`.client.translate`: a RetryableError is resent, anything
else fails the task.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

from quixsinks.core.errors import RecordError, RetryableError

from .client import translate
from .wire import Frame, Message, publish_request

__all__ = ["RequestSender", "RoundSender", "wire_size"]


def wire_size(frame: Frame) -> int:
    """What a frame adds to a PublishRequest."""
    return len(frame[1])


class RequestSender:
    """``send`` for :func:`deliver` without ordering keys: each chunk is one PublishRequest,
    serialized here and sent on the cached PublisherClient's gRPC channel. A request is
    all or nothing: a transient failure resends the whole chunk."""

    def __init__(self, publisher: Any, topic: str, timeout: float) -> None:
        self.topic = topic
        self.timeout = timeout
        self.metadata = (("x-goog-request-params", f"topic={topic}"),)
        self.topic_field = publish_request(topic, [])
        self.rpc = publisher.transport.grpc_channel.unary_unary(
            "/google.pubsub.v1.Publisher/Publish"
        )

    def send(self, chunk: Sequence[Frame]) -> list[int]:
        import grpc

        body = b"".join([self.topic_field, *(f[1] for f in chunk)])
        try:
            self.rpc(body, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            rows = (chunk[0][0], chunk[-1][0])
            raise translate(exc, self.topic, timeout=self.timeout, rows=rows) from None
        return []


class RoundSender:
    """One delivery round's ``send`` for :func:`deliver`: publish, then wait for all."""

    def __init__(
        self, publisher: Any, topic: str, flush_timeout: float, publish_timeout: float
    ) -> None:
        self.publisher = publisher
        self.topic = topic
        self.flush_timeout = flush_timeout
        self.publish_timeout = publish_timeout
        self.paused: set[str] = set()

    def send(self, chunk: Sequence[Message]) -> list[int]:
        from google.cloud.pubsub_v1.publisher import exceptions as pexc

        for key in self.paused:  # the failed messages of these keys come first in `chunk`
            self.publisher.resume_publish(self.topic, key)
        self.paused.clear()
        futures = []
        for message in chunk:
            try:
                future = self.publisher.publish(
                    self.topic,
                    message.data,
                    ordering_key=message.ordering_key,
                    retry=None,
                    **message.attributes,
                )
            except pexc.MessageTooLargeError as exc:
                raise RecordError(
                    f"pubsub: the message of row {message.row} does not fit in one publish "
                    f"request ({exc})",
                    row=message.row,
                ) from None
            except AssertionError as exc:
                # the client's batch of this key failed while we were adding to it (its
                # "publish after a publish error" assertion): refused, like the batch
                future = concurrent.futures.Future()
                future.set_exception(RuntimeError(str(exc)))
            futures.append(future)
        done, _ = concurrent.futures.wait(futures, timeout=self.flush_timeout)
        refused: list[int] = []
        reasons: list[str] = []
        for index, future in enumerate(futures):
            if future not in done:
                refused.append(index)
                reasons.append(f"no result in flush_timeout={self.flush_timeout:g} s")
                continue
            error = future.exception()
            if error is None:
                continue
            # a key's batches queued behind its failed one are cancelled with a bare
            # RuntimeError (the client's ordered sequencer): resent with the failed one
            queued = type(error) is RuntimeError
            if not (queued or isinstance(error, pexc.PublishToPausedOrderingKeyException)):
                row = chunk[index].row
                found = translate(error, self.topic, timeout=self.publish_timeout, rows=(row, row))
                if not isinstance(found, RetryableError):
                    if chunk[index].ordering_key:  # paused by the client: resumed next send
                        self.paused.add(chunk[index].ordering_key)
                    raise found
            refused.append(index)
            reasons.append(f"{type(error).__name__}: {error}")
            if chunk[index].ordering_key:
                self.paused.add(chunk[index].ordering_key)
        if refused and len(refused) == len(chunk):
            raise RetryableError(f"pubsub {self.topic}: every publish failed: {reasons[0]}")
        return refused
