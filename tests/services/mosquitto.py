"""A throwaway Mosquitto broker on 127.0.0.1 for the integration tests (Debian's mosquitto).

One process, three listeners on free ports of 127.0.0.1:

* ``port``: plain, anonymous;
* ``auth_port``: plain, a password file made with ``mosquitto_passwd -b`` (user ``username``,
  a random ``password``), anonymous clients refused;
* ``tls_port``: TLS with a server certificate made at test time by
  :func:`tests.services.tls.make_certificates` (a private CA: ``ca_cert``), anonymous.

``persistence true`` in its temporary folder: ``restart()`` stops it with SIGTERM (Mosquitto
saves its state) and starts it again on the same ports, so the persistent sessions of QoS 1/2
subscribers (:class:`Recorder`) keep what they had not received yet. ``crash()`` SIGKILLs it.

:class:`Recorder` is the test's subscriber: an MQTT 5 client with a persistent session that
subscribes ``<topic>/#`` at QoS 2 with "retain as published" and records every message
(topic, payload, QoS, retain flag, user properties).

Install the broker with ``bash tests/services/install.sh``. Manual use:
``python tests/services/mosquitto.py`` starts one and keeps it up until Ctrl-C.
"""

from __future__ import annotations

import getpass
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__:
    from .common import Service, free_port, serve_until_interrupted
    from .tls import TestCertificates, make_certificates
else:  # run as a script
    from common import (  # type: ignore[no-redef,import-not-found]
        Service,
        free_port,
        serve_until_interrupted,
    )
    from tls import TestCertificates, make_certificates  # type: ignore[no-redef,import-not-found]

INSTALL_HINT = "bash tests/services/install.sh"
MOSQUITTO = "/usr/sbin/mosquitto"
#: the topic level under a Recorder's topic of the markers :meth:`Recorder.settle` publishes
END_MARKER = "qs-end-marker"

__all__ = ["MosquittoServer", "Received", "Recorder"]


def find(binary: str) -> str:
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin")
    if found is None:
        raise RuntimeError(f"{binary} not found; run: {INSTALL_HINT}")
    return found


class MosquittoServer(Service):
    """One mosquitto process with a plain, a password and a TLS listener (see module doc)."""

    host = "127.0.0.1"
    username = "quixsinks"

    def __init__(self, start_timeout: float = 20.0, max_inflight: int = 1000) -> None:
        #: Mosquitto's max_inflight_messages: also the receive maximum it announces to
        #: MQTT 5 clients (its default is 20)
        self.max_inflight = max_inflight
        self.binary = find("mosquitto")
        self.start_timeout = start_timeout
        self.password = secrets.token_urlsafe(18)
        self.port = self.auth_port = self.tls_port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.certificates: TestCertificates | None = None

    @property
    def ca_cert(self) -> str:
        assert self.certificates is not None
        return str(self.certificates.ca_cert)

    def options(self, *, auth: bool = False, tls: bool = False) -> dict[str, str]:
        """Sink options reaching one listener (no topic_root, no client_id)."""
        if tls:
            return {
                "server": self.host,
                "port": str(self.tls_port),
                "tls_enabled": "true",
                "tls_ca_cert": self.ca_cert,
            }
        options = {"server": self.host, "tls_enabled": "false"}
        if auth:
            return {
                **options,
                "port": str(self.auth_port),
                "username": self.username,
                "password": self.password,
            }
        return {**options, "port": str(self.port)}

    @property
    def logfile(self) -> Path:
        return self._tmp / "mosquitto.log"

    def start(self) -> MosquittoServer:
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-mosquitto-"))
        self.certificates = make_certificates(self._tmp / "tls")
        passwd = self._tmp / "passwd"
        subprocess.run(
            [find("mosquitto_passwd"), "-b", "-c", str(passwd), self.username, self.password],
            check=True,
            capture_output=True,
            timeout=30,
        )
        for _ in range(5):
            self.port, self.auth_port, self.tls_port = (free_port(self.host) for _ in range(3))
            self._write_config(passwd)
            self._launch()
            if self._wait_up():
                return self
            self._kill(signal.SIGKILL)
        raise RuntimeError(f"mosquitto did not start; see {self.logfile}")

    def _write_config(self, passwd: Path) -> None:
        assert self.certificates is not None
        tmp = self._tmp
        (tmp / "mosquitto.conf").write_text(
            f"""per_listener_settings true
user {getpass.getuser()}
persistence true
persistence_location {tmp}/
autosave_interval 1
log_dest file {self.logfile}
log_type error
log_type warning
log_type notice
max_queued_messages 0
max_inflight_messages {self.max_inflight}

listener {self.port} {self.host}
allow_anonymous true

listener {self.auth_port} {self.host}
allow_anonymous false
password_file {passwd}

listener {self.tls_port} {self.host}
allow_anonymous true
certfile {self.certificates.server_cert}
keyfile {self.certificates.server_key}
""",
            encoding="utf-8",
        )

    def _launch(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "-c", str(self._tmp / "mosquitto.conf")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _wait_up(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            if all(_listening(self.host, p) for p in (self.port, self.auth_port, self.tls_port)):
                return True
            time.sleep(0.05)
        return False

    def _kill(self, sig: int = signal.SIGTERM) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def restart(self) -> None:
        """SIGTERM (Mosquitto saves its persistent state) and start again on the same ports."""
        self._kill(signal.SIGTERM)
        self._launch()
        if not self._wait_up():
            raise RuntimeError(f"mosquitto did not come back; see {self.logfile}")

    def crash(self) -> None:
        """SIGKILL the broker this object started and start it again on the same ports."""
        self._kill(signal.SIGKILL)
        self._launch()
        if not self._wait_up():
            raise RuntimeError(f"mosquitto did not come back; see {self.logfile}")

    def stop(self) -> None:
        self._kill()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class Received:
    """One message as the subscriber got it."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: dict[str, str] = field(default_factory=dict)


class Recorder:
    """Subscribes ``<topic>/#`` (which matches ``<topic>`` too) at QoS 2 (MQTT 5, persistent
    session, retain as published) and records every message; ``with`` or ``start()``/``stop()``."""

    def __init__(self, server: MosquittoServer, topic: str) -> None:
        import paho.mqtt.client as paho

        self.paho = paho
        self.server = server
        self.topic = topic
        self.messages: list[Received] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = paho.Client(
            callback_api_version=paho.CallbackAPIVersion.VERSION2,
            client_id=f"recorder-{uuid.uuid4().hex[:12]}",
            protocol=paho.MQTTv5,
        )
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *a: self._subscribed.set()
        self.client.on_message = self._on_message
        self.client.reconnect_delay_set(0.05, 0.5)

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        from paho.mqtt.subscribeoptions import SubscribeOptions

        if reason.is_failure:
            return
        options = SubscribeOptions(qos=2, retainAsPublished=True)
        client.subscribe(f"{self.topic}/#", options=options)  # "a/#" matches "a" too

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        props = getattr(message.properties, "UserProperty", None) or []
        with self._lock:
            self.messages.append(
                Received(
                    message.topic, message.payload, message.qos, bool(message.retain), dict(props)
                )
            )

    def start(self) -> Recorder:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600  # the session outlives a broker restart
        self.client.connect(self.server.host, self.server.port, clean_start=False, properties=props)
        self.client.loop_start()
        if not self._subscribed.wait(20):
            self.stop()
            raise RuntimeError("the recorder did not subscribe in 20 s")
        return self

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.messages)

    def wait_for(self, count: int, timeout: float = 60.0, quiet: float = 0.3) -> list[Received]:
        """Every message once at least ``count`` arrived and none came for ``quiet`` s (so
        that late duplicates are in too); RuntimeError after ``timeout`` s with fewer."""
        deadline = time.monotonic() + timeout
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            got = len(self.snapshot())
            if got != last:
                last, since = got, time.monotonic()
            elif got >= count and time.monotonic() - since >= quiet:
                return self.snapshot()
            time.sleep(0.02)
        raise RuntimeError(f"the recorder got {last} message(s) in {timeout:g} s, expected {count}")

    def settle(self, timeout: float = 60.0) -> list[Received]:
        """Every message the broker had for this subscriber when called: publishes an end
        marker (QoS 1, acknowledged) under the topic and waits until it comes back (the
        broker delivers one subscriber's messages in order); the markers left out."""
        marker = f"{self.topic}/{END_MARKER}/{uuid.uuid4().hex[:8]}"
        info = self.client.publish(marker, b"", qos=1)
        info.wait_for_publish(timeout=timeout)
        if not info.is_published():
            raise RuntimeError(f"the end marker was not acknowledged in {timeout:g} s")
        self.wait_until(lambda got: any(m.topic == marker for m in got), timeout)
        ends = f"{self.topic}/{END_MARKER}/"
        return [m for m in self.snapshot() if not m.topic.startswith(ends)]

    def wait_until(
        self, condition: Callable[[list[Received]], bool], timeout: float = 60.0
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self.snapshot()):
                return
            time.sleep(0.02)
        raise RuntimeError(f"condition not met in {timeout:g} s")


if __name__ == "__main__":

    def describe(server: MosquittoServer) -> None:
        print(
            f"mosquitto: plain 127.0.0.1:{server.port}, auth {server.auth_port} "
            f"({server.username} / {server.password}), tls {server.tls_port} (CA {server.ca_cert})"
        )

    serve_until_interrupted(MosquittoServer(), describe)
