"""The MQTT connection of a task: paho-mqtt driven in the task's thread, one error boundary.

:class:`Connection` wraps one ``paho.mqtt.client.Client`` whose network loop runs in the
calling thread (no background thread: every wait is a ``loop(timeout)`` call bounded by
the sink's deadline, and no lock is shared with paho's callbacks). ``publish_window``
publishes a window of messages (paho keeps at most ``max_inflight`` of them unacknowledged
on the wire) and then waits for their acknowledgements, PUBACK for QoS 1, PUBCOMP for
QoS 2, once for the window, up to ``mqtt_flush_timeout_seconds``. It returns the indices of
the messages not acknowledged (timed out, or the connection dropped): the caller
(:func:`~quixsinks.core.delivery.deliver`) resends them on a new connection.

Every client id is ``<client_id>-<8 hex digits>``, new per connection: two tasks never share
one (a broker disconnects the older connection of a client id that connects again).

:func:`translate` maps what paho and the socket layer raise or report to quixsinks errors:
refused, reset or timed-out connections and the broker's "server unavailable/busy" are
retryable; refused credentials are DestinationAccessDeniedError; a certificate that does not
verify is the non-retryable error of :mod:`quixsinks.core.tls`; a per-message MQTT 5
reason code of "topic name invalid", "payload format invalid" or "packet too large" is a
row-level refusal of that message (``WindowResult.refused``: the sink refuses its row, as
``on_error`` says, and does not resend it); "not authorized" fails the task.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import selectors
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

from quixsinks.core.clients import connect_timeout
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    QuixSinksError,
    RetryableError,
    timed_out,
)
from quixsinks.core.secrets import scrub
from quixsinks.core.tls import certificate_error, certificate_failure
from quixsinks.core.vendors.http import import_client as import_vendor_client

from .options import MQTTOptions
from .wire import Messages

__all__ = ["Connection", "WindowResult", "import_client", "translate"]

logger = logging.getLogger("quixsinks.sinks.mqtt")

#: MQTT 5 reason codes (CONNACK, PUBACK, PUBREC, PUBCOMP) the sink acts on
_DENIED = frozenset({0x86, 0x87, 0x8A, 0x8C})  # bad credentials, not authorized, banned, auth
_RETRYABLE = frozenset({0x88, 0x89, 0x97, 0x9F, 0x8B, 0x80, 0x83})  # unavailable, busy, quota..
_ROW_LEVEL = frozenset({0x90, 0x95, 0x99, 0x93})  # topic invalid, too large, payload, topic alias
#: bytes handed to one send() call, and asked of one recv()
_WRITE_BYTES = 1 << 20
_READ_BYTES = 1 << 18


def import_client() -> Any:
    """paho-mqtt's client module; MissingDependencyError naming the extra if it (or numpy,
    which builds the packets) is missing."""
    import_vendor_client("numpy", package="numpy", extra="mqtt")
    return import_vendor_client("paho.mqtt.client", package="paho-mqtt", extra="mqtt")


def where(opts: MQTTOptions) -> str:
    scheme = "mqtts" if opts.tls_enabled else "mqtt"
    return f"mqtt broker {scheme}://{opts.server}:{opts.port}"


def translate(exc: BaseException, what: str, opts: MQTTOptions) -> QuixSinksError:
    """The quixsinks error for an exception raised while connecting or publishing."""
    if isinstance(exc, QuixSinksError):
        return exc
    text = scrub(str(exc) or type(exc).__name__, opts.secret_values())
    why = certificate_failure(exc)
    if why is not None:
        return certificate_error(
            where(opts),
            why,
            trust="set tls_ca_cert to its CA bundle file",
            skip="tls_verify=false",
        )
    if isinstance(exc, ssl.SSLError):
        return DestinationError(
            f"{what}: TLS failed ({text}); does the broker speak TLS on port {opts.port}? "
            "(tls_enabled=false for a plain listener)",
            location=where(opts),
        )
    if isinstance(exc, (socket.timeout, TimeoutError)):
        limit = connect_timeout(opts.mqtt_flush_timeout_seconds)
        return RetryableError(f"{what}: {timed_out(limit, 'mqtt_flush_timeout_seconds')}")
    if isinstance(exc, socket.gaierror):
        return DestinationError(
            f"{what}: cannot resolve {opts.server!r} ({text}); is 'server' right?",
            location=where(opts),
        )
    if isinstance(exc, OSError):
        return RetryableError(f"{what}: {text}")
    return DestinationError(f"{what}: {type(exc).__name__}: {text}", location=where(opts))


def refusal(code: int, name: str, what: str, opts: MQTTOptions) -> QuixSinksError:
    """The error for a CONNACK that refused the connection. paho reports MQTT 5 reason
    codes for every version (3.1.1's "not authorized", 5, arrives as 135); the 3.1.1 return
    codes are recognised too."""
    message = f"{what}: the broker refused the connection ({code}: {name})"
    if code in _DENIED or code in (4, 5):
        return DestinationAccessDeniedError(
            f"{message}; check 'username' and 'password', and the broker's ACL",
            location=where(opts),
        )
    if code in _RETRYABLE or code == 3:
        return RetryableError(message)
    if code in (2, 0x85):
        return DestinationError(
            f"{message}; the broker does not accept the client id (client_id "
            f"{opts.client_id!r} plus '-' and 8 hex digits)",
            location=where(opts),
        )
    return DestinationError(message, location=where(opts))


class WindowResult:
    """What one window of publishes came to: the indices to resend, and why; and the
    messages the broker refused for their content (index into the window, reason)."""

    def __init__(
        self,
        unacknowledged: list[int],
        reason: str | None,
        refused: list[tuple[int, str]] | None = None,
    ) -> None:
        self.unacknowledged = unacknowledged
        self.reason = reason
        self.refused = refused or []


class Connection:
    """One connected paho client, driven from the calling thread. See the module doc."""

    def __init__(self, opts: MQTTOptions, clock: Callable[[], float] = time.monotonic) -> None:
        paho = import_client()
        self.paho = paho
        self.opts = opts
        self.clock = clock
        self.client_id = f"{opts.client_id}-{secrets.token_hex(4)}"
        self.v5 = opts.version == "5"
        protocol = {"3.1": paho.MQTTv31, "3.1.1": paho.MQTTv311, "5": paho.MQTTv5}[opts.version]
        kwargs: dict[str, Any] = {}
        if not self.v5:
            kwargs["clean_session"] = True
        client = paho.Client(
            callback_api_version=paho.CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=protocol,
            **kwargs,
        )
        client.connect_timeout = connect_timeout(opts.mqtt_flush_timeout_seconds)
        # our windows bound what is in flight; paho's own cap rescans its queue per ack
        client.max_inflight_messages_set(0)
        client.max_queued_messages_set(0)
        if opts.username is not None:
            client.username_pw_set(opts.username, opts.password)
        if opts.tls_enabled:
            context = ssl.create_default_context(cafile=opts.tls_ca_cert)
            if not opts.tls_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            client.tls_set_context(context)
            if not opts.tls_verify:
                client.tls_insecure_set(True)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        self.client = client
        self._connack: tuple[int, str] | None = None
        self._lost: str | None = None
        self.last_used = clock()
        self.closed = False
        self.connected = False  # a CONNACK accepted the connection
        self.receive_maximum = 65535  # MQTT 5 brokers may announce less in their CONNACK
        self.maximum_packet_size: int | None = None  # MQTT 5 CONNACK: the broker's limit

    # -- callbacks (run inside client.loop(), in this thread) -------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self._connack = (int(reason.value), reason.getName())
        # MQTT 5: the broker takes at most this many unacknowledged QoS 1/2 messages
        # (Mosquitto's default: 20); more and it disconnects with "receive maximum exceeded"
        receive_maximum = getattr(props, "ReceiveMaximum", None) if props is not None else None
        if receive_maximum:
            self.receive_maximum = int(receive_maximum)
        # MQTT 5: a larger packet makes the broker disconnect us; such rows are refused
        maximum_packet = getattr(props, "MaximumPacketSize", None) if props is not None else None
        if maximum_packet:
            self.maximum_packet_size = int(maximum_packet)

    def _on_disconnect(
        self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        name = reason.getName() if reason is not None else "unknown"
        self._lost = f"the broker closed the connection ({name})"

    # -- lifecycle ---------------------------------------------------------------------------

    def connect(self) -> None:
        """Connect and wait for the CONNACK, at most ``mqtt_flush_timeout_seconds``."""
        opts = self.opts
        what = f"{where(opts)}: connect"
        try:
            self.client.connect(opts.server, opts.port, keepalive=opts.keepalive_seconds)
        except Exception as exc:
            raise translate(exc, what, opts) from None
        deadline = self.clock() + opts.mqtt_flush_timeout_seconds
        while self._connack is None:
            remaining = deadline - self.clock()
            if remaining <= 0:
                self.close()
                raise RetryableError(
                    f"{what}: no CONNACK, "
                    f"{timed_out(opts.mqtt_flush_timeout_seconds, 'mqtt_flush_timeout_seconds')}"
                )
            rc = self.client.loop(timeout=min(remaining, 1.0))
            if rc != self.paho.MQTT_ERR_SUCCESS and self._connack is None:
                self.close()
                raise RetryableError(
                    f"{what}: the connection dropped before the CONNACK "
                    f"({self.paho.error_string(rc)})"
                )
        code, name = self._connack
        if code != 0:
            self.close()
            raise refusal(code, name, what, opts)
        self.connected = True
        self.last_used = self.clock()

    @property
    def usable(self) -> bool:
        """Connected, not lost, and used recently enough that the broker kept it."""
        idle = self.clock() - self.last_used
        return not self.closed and self._lost is None and idle < self.opts.keepalive_seconds

    def close(self) -> None:
        """Send DISCONNECT (best effort) and close the socket."""
        if self.closed:
            return
        self.closed = True
        sock = self.client.socket()
        if sock is None:
            return
        try:
            if self.connected and self._lost is None:
                sock.settimeout(1.0)
                sock.sendall(b"\xe0\x00")
        except (OSError, ValueError) as exc:  # closing is best effort
            logger.debug("closing an MQTT connection: %s", exc)
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    # -- publishing ---------------------------------------------------------------------------

    def publish_window(self, messages: Messages, indices: Sequence[int], what: str) -> WindowResult:
        """Publish messages ``indices`` (packet ids 1..n), then wait for every
        acknowledgement (QoS 1: PUBACK; QoS 2: PUBREC, our PUBREL, PUBCOMP) or, QoS 0, for
        every byte to be written; at most ``mqtt_flush_timeout_seconds`` in all.

        The packets are built in Arrow (:meth:`Messages.window`) and written to the socket
        paho opened, in large writes, while the acknowledgements are read in between: one
        loop over a selector, no per-message call into paho.
        """
        opts = self.opts
        count = len(indices)
        if count == 0:
            return WindowResult([], None)
        data = messages.window(indices)
        sock = self.client.socket()
        if sock is None or self._lost is not None:
            return WindowResult(list(range(count)), self._lost or "not connected")
        qos = opts.qos
        acked = bytearray(count + 1) if qos else bytearray()  # by packet id: 0 pending, 1 ok
        codes: dict[int, int] = {}  # packet id -> refusing reason code
        waiting = count if qos else 0
        out: list[memoryview] = [data]
        position = 0
        inbox = bytearray()
        deadline = self.clock() + opts.mqtt_flush_timeout_seconds
        selector = selectors.DefaultSelector()
        try:
            sock.setblocking(False)
            registered = selectors.EVENT_READ | selectors.EVENT_WRITE
            selector.register(sock, registered)
            while out or waiting:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    break
                want = selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0)
                if want != registered:
                    selector.modify(sock, want)
                    registered = want
                pending_tls = isinstance(sock, ssl.SSLSocket) and sock.pending()
                events = [] if pending_tls else selector.select(min(remaining, 1.0))
                readable = pending_tls or any(mask & selectors.EVENT_READ for _, mask in events)
                if out and (pending_tls or any(mask & selectors.EVENT_WRITE for _, mask in events)):
                    head = out[0]
                    try:
                        sent = sock.send(head[position : position + _WRITE_BYTES])
                    except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                        sent = 0
                    position += sent
                    if position >= len(head):
                        out.pop(0)
                        position = 0
                if readable:
                    chunk = self._receive(sock)
                    if chunk is None:
                        self._lost = "the broker closed the connection"
                        break
                    inbox += chunk
                    waiting -= self._acknowledgements(inbox, acked, codes, out)
                if self._lost is not None:
                    break
        except OSError as exc:
            self._lost = f"the connection failed ({scrub(str(exc), opts.secret_values())})"
        finally:
            selector.close()
        self.last_used = self.clock()
        if qos == 0:
            if out:
                return WindowResult(
                    list(range(count)), self._lost or "the window was not written in time"
                )
            return WindowResult([], None)
        refused = sorted((pid - 1, code) for pid, code in codes.items() if code not in _RETRYABLE)
        row_level = [(i, code) for i, code in refused if code in _ROW_LEVEL]
        if len(row_level) < len(refused):
            self._raise_refused(refused, messages, indices, what)
        rejected = [(i, self._refusal(code, messages, indices[i], what)) for i, code in row_level]
        done = {i for i, _ in row_level}
        unacknowledged = [
            i for i in range(count) if i not in done and (not acked[i + 1] or (i + 1) in codes)
        ]
        if not unacknowledged:
            return WindowResult([], None, rejected)
        reason = self._lost or (
            f"{len(unacknowledged)} of {count} message(s) not acknowledged in "
            f"{opts.mqtt_flush_timeout_seconds:g} s (mqtt_flush_timeout_seconds)"
        )
        return WindowResult(unacknowledged, reason, rejected)

    def _refusal(self, code: int, messages: Messages, message: int, what: str) -> str:
        """Why the broker refused one message for its content, for its dead letter."""
        name = self.paho.ReasonCode(self.paho.PacketTypes.PUBACK, identifier=code).getName()
        topic = str(messages.topics[message])
        return (
            f"{what}: the broker refused the message (topic {topic[:80]!r}) with reason "
            f"code {code} ({name})"
        )

    @staticmethod
    def _receive(sock: Any) -> bytes | None:
        """What the socket holds now (b"" if nothing yet); None when the peer closed it."""
        try:
            chunk: bytes = sock.recv(_READ_BYTES)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return b""
        return chunk if chunk else None

    def _acknowledgements(
        self, inbox: bytearray, acked: bytearray, codes: dict[int, int], out: list[memoryview]
    ) -> int:
        """Consume the complete packets at the start of ``inbox``; returns how many messages
        they finished (PUBACK, PUBCOMP, or a refusing PUBREC). A PUBREC is answered with a
        PUBREL (queued on ``out``); a DISCONNECT marks the connection lost."""
        done = 0
        at = 0
        size = len(inbox)
        v5 = self.v5
        while size - at >= 2:
            kind = inbox[at] & 0xF0
            length, shift, cursor = 0, 0, at + 1
            while True:
                if cursor >= size:
                    length = -1
                    break
                byte = inbox[cursor]
                length |= (byte & 0x7F) << shift
                cursor += 1
                if not byte & 0x80:
                    break
                shift += 7
            if length < 0 or cursor + length > size:
                break  # incomplete: wait for more bytes
            body = cursor
            at = cursor + length
            if kind in (0x40, 0x50, 0x70) and length >= 2:  # PUBACK, PUBREC, PUBCOMP
                pid = (inbox[body] << 8) | inbox[body + 1]
                code = inbox[body + 2] if v5 and length >= 3 else 0
                if pid >= len(acked) or acked[pid]:
                    continue  # not of this window, or seen already
                if kind == 0x50 and code < 0x80:
                    out.append(memoryview(bytes((0x62, 0x02, pid >> 8, pid & 0xFF))))
                    continue
                acked[pid] = 1
                if code >= 0x80:
                    codes[pid] = code
                done += 1
            elif kind == 0xE0:  # DISCONNECT (MQTT 5)
                code = inbox[body] if length >= 1 else 0
                self._lost = f"the broker disconnected (reason code {code})"
        del inbox[:at]
        return done

    def _raise_refused(
        self, refused: list[tuple[int, int]], messages: Messages, indices: Sequence[int], what: str
    ) -> None:
        index, code = refused[0]
        name = self.paho.ReasonCode(self.paho.PacketTypes.PUBACK, identifier=code).getName()
        topic = str(messages.topics[indices[index]])
        text = (
            f"{what}: the broker refused {len(refused)} message(s), the first (topic "
            f"{topic[:80]!r}) with reason code {code} ({name})"
        )
        if code in _DENIED:
            raise DestinationAccessDeniedError(
                f"{text}; check the broker's ACL for this user and topic", location=where(self.opts)
            )
        raise DestinationError(text, location=where(self.opts))
