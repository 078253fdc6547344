"""A throwaway Google Pub/Sub emulator on 127.0.0.1 for integration tests.

`PubSubEmulator` runs the emulator that ships with the Google Cloud SDK
(``<sdk>/platform/pubsub-emulator/bin/cloud-pubsub-emulator --host=127.0.0.1 --port=N``, a
Java program: Java 17 is enough) on a free port, in memory, from a private temporary
folder. It is not on the package registries; :func:`find_emulator` looks for it in the
usual SDK places (``$CLOUDSDK_ROOT_DIR``, ``/usr/lib/google-cloud-sdk``, the SDK next to a
``gcloud`` on PATH...) and returns None when it is absent, so that the fixtures skip with
that reason printed. The emulator checks no credentials and has no IAM; clients reach it
through ``PUBSUB_EMULATOR_HOST`` (the sink's ``emulator_host`` option).

Manual use: ``python tests/services/pubsub_emulator.py`` starts one, prints its host and
keeps it running until Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__:
    from .common import ProcessService, serve_until_interrupted
else:  # run as a script: python tests/services/pubsub_emulator.py
    from common import (  # type: ignore[no-redef,import-not-found]
        ProcessService,
        serve_until_interrupted,
    )

PROJECT = "quixsinks-test"
_RELATIVE = Path("platform/pubsub-emulator/bin/cloud-pubsub-emulator")


def find_emulator() -> Path | None:
    """The emulator's launcher script, or None when no Google Cloud SDK has it here."""
    roots: list[Path] = []
    for variable in ("QUIXSINKS_PUBSUB_EMULATOR_SDK", "CLOUDSDK_ROOT_DIR"):
        if os.environ.get(variable):
            roots.append(Path(os.environ[variable]))
    roots += [Path("/usr/lib/google-cloud-sdk"), Path("/usr/share/google-cloud-sdk")]
    roots += [Path("/opt/google-cloud-sdk"), Path.home() / "google-cloud-sdk"]
    gcloud = shutil.which("gcloud")
    if gcloud:
        roots.append(Path(gcloud).resolve().parents[1])
    for root in roots:
        launcher = root / _RELATIVE
        if launcher.is_file():
            return launcher
    return None


def missing_reason() -> str | None:
    """Why the emulator cannot run here (printed by the skipping fixtures), or None."""
    if find_emulator() is None:
        return (
            "the Google Pub/Sub emulator is not installed: no "
            f"<google-cloud-sdk>/{_RELATIVE} (install the Google Cloud SDK component "
            "'pubsub-emulator', or set QUIXSINKS_PUBSUB_EMULATOR_SDK to the SDK's folder)"
        )
    if shutil.which("java") is None:
        return "the Google Pub/Sub emulator needs Java (17+), and there is no java on PATH"
    return None


class PubSubEmulator(ProcessService):
    """One throwaway Pub/Sub emulator: ``start()`` it (or use ``with``), then ``stop()``.

    It answers plain HTTP on its gRPC port ("Ok"), which is the readiness probe.
    """

    name = "pubsub-emulator"
    project = PROJECT

    def __init__(self, start_timeout: float = 90.0) -> None:
        super().__init__(start_timeout)

    @property
    def emulator_host(self) -> str:
        """What ``PUBSUB_EMULATOR_HOST`` (the sink's ``emulator_host``) must hold."""
        return f"{self.host}:{self.port}"

    def options(self, topic: str) -> dict[str, str]:
        """The sink options that reach ``topic`` on this emulator."""
        return {"project_id": self.project, "topic_id": topic, "emulator_host": self.emulator_host}

    # -- client helpers (google-cloud-pubsub's clients, pointed at this emulator) -----------

    def publisher(self) -> Any:
        import grpc
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import pubsub_v1
        from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

        channel = grpc.insecure_channel(self.emulator_host)
        transport = PublisherGrpcTransport(channel=channel, credentials=AnonymousCredentials())
        return pubsub_v1.PublisherClient(transport=transport)

    def subscriber(self) -> Any:
        import grpc
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import pubsub_v1
        from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

        channel = grpc.insecure_channel(self.emulator_host)
        transport = SubscriberGrpcTransport(channel=channel, credentials=AnonymousCredentials())
        return pubsub_v1.SubscriberClient(transport=transport)

    def create_topic(
        self,
        topic: str,
        *,
        ordering: bool = True,
        project: str | None = None,
        exist_ok: bool = False,
    ) -> str:
        """Create ``topic`` (in ``project``, default: this emulator's) and a subscription
        ``<topic>-sub`` reading it (with message ordering when ``ordering``); returns the
        subscription's path."""
        from google.api_core.exceptions import AlreadyExists

        project = project or self.project
        publisher = self.publisher()
        subscriber = self.subscriber()
        try:
            topic_path = publisher.topic_path(project, topic)
            subscription = subscriber.subscription_path(project, f"{topic}-sub")
            try:
                publisher.create_topic(name=topic_path)
            except AlreadyExists:
                if not exist_ok:
                    raise
                return str(subscription)
            subscriber.create_subscription(
                request={
                    "name": subscription,
                    "topic": topic_path,
                    "enable_message_ordering": ordering,
                    "ack_deadline_seconds": 600,
                }
            )
            return str(subscription)
        finally:
            subscriber.close()
            publisher.transport.close()

    def delete_topic(self, topic: str) -> None:
        publisher = self.publisher()
        try:
            publisher.delete_topic(topic=publisher.topic_path(self.project, topic))
        finally:
            publisher.transport.close()

    def pull_all(self, topic: str, *, idle_seconds: float = 1.0, limit: int = 1000) -> list[Any]:
        """Every message of ``<topic>-sub`` (acknowledged as read), in the order received:
        pulls until ``idle_seconds`` pass with nothing new."""
        return list(self._pull(topic, idle_seconds=idle_seconds, limit=limit))

    def count_all(self, topic: str, *, idle_seconds: float = 1.0, limit: int = 1000) -> int:
        """How many messages :meth:`pull_all` would return, without holding them."""
        return sum(1 for _ in self._pull(topic, idle_seconds=idle_seconds, limit=limit))

    def _pull(self, topic: str, *, idle_seconds: float, limit: int) -> Iterator[Any]:
        from google.api_core.exceptions import DeadlineExceeded

        subscriber = self.subscriber()
        subscription = subscriber.subscription_path(self.project, f"{topic}-sub")
        try:
            while True:
                try:
                    answer = subscriber.pull(
                        request={"subscription": subscription, "max_messages": limit},
                        timeout=idle_seconds,
                        retry=None,
                    )
                except DeadlineExceeded:
                    return  # nothing new for idle_seconds
                if not answer.received_messages:
                    return
                subscriber.acknowledge(
                    request={
                        "subscription": subscription,
                        "ack_ids": [m.ack_id for m in answer.received_messages],
                    }
                )
                for received in answer.received_messages:
                    yield received.message
        finally:
            subscriber.close()

    # -- internals ------------------------------------------------------------------------

    def _install(self) -> Path:
        launcher = find_emulator()
        reason = missing_reason()
        if launcher is None or reason is not None:
            raise RuntimeError(reason)
        return launcher

    def _command(self, installed: Path) -> list[str]:
        return [str(installed), f"--host={self.host}", f"--port={self.port}"]


def main() -> None:
    """Start an emulator, print how to reach it, keep it until Ctrl-C (or SIGTERM)."""

    def describe(server: PubSubEmulator) -> None:
        print(f"PUBSUB_EMULATOR_HOST={server.emulator_host}  (pid {server.pid})")

    serve_until_interrupted(PubSubEmulator(), describe)


if __name__ == "__main__":
    main()
