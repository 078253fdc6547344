"""A TCP proxy that loses acknowledgements: the server applies a request, the reply never comes.

`LostAckProxy` forwards every connection made to it (127.0.0.1, a free port) to a target
server, byte for byte, like :class:`~tests.services.tcp_faults.TCPFaultProxy`.
``lose_reply_to(trigger, after=...)`` arms it: the next request whose bytes contain
``trigger`` (on a connection that sent ``after`` earlier, when given) reaches the server;
once the server's reply starts to come back, the reply is dropped and both sides of the
connection are closed. The server has applied the request (it answered); the client sees
a broken connection and cannot know whether it landed. This is the fault behind
"the COMMIT landed but its acknowledgement was lost", for any protocol whose requests
carry a recognisable byte string: a PostgreSQL ``COMMIT``, a Redis ``EVALSHA``, an HTTP
``POST /write``.

The proxy holds only loopback sockets and threads that end when it is stopped.
"""

from __future__ import annotations

import socket

from .tcp_faults import TCPFaultProxy

__all__ = ["PG_COMMIT", "LostAckProxy"]

#: a PostgreSQL simple-query message ``COMMIT`` (what psycopg2's ``commit()`` sends)
PG_COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"


class _Connection:
    """What the proxy knows of one client connection."""

    def __init__(self) -> None:
        self.tail = b""  # the last bytes sent, for a trigger split between two reads
        self.seen_after = False
        self.doomed = False


class LostAckProxy(TCPFaultProxy):
    """Forwards 127.0.0.1:<port> to the target; loses the reply to an armed request."""

    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__(target_host, target_port)
        self.lost = 0  # replies dropped so far
        self._trigger = b""
        self._after = b""
        self._times = 0
        self._connections: dict[socket.socket, _Connection] = {}

    def lose_reply_to(self, trigger: bytes, *, after: bytes = b"", times: int = 1) -> None:
        """Drop the reply to the next ``times`` requests containing ``trigger`` (each on a
        connection that sent ``after`` before, when given)."""
        with self._lock:
            self._trigger, self._after, self._times = trigger, after, times

    def _pump(self, source: socket.socket, sink: socket.socket, counted: bool) -> None:
        client = source if counted else sink
        with self._lock:
            state = self._connections.setdefault(client, _Connection())
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if counted:
                    self._watch(state, data)
                elif state.doomed:  # the server answered the armed request: lose it
                    with self._lock:
                        self.lost += 1
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._close_pair(source, sink)
            with self._lock:
                self._connections.pop(client, None)

    def _watch(self, state: _Connection, data: bytes) -> None:
        """Arm ``state`` when ``data`` (with what came just before it) holds the trigger."""
        with self._lock:
            trigger, after = self._trigger, self._after
            if not trigger or self._times <= 0 or state.doomed:
                return
            window = state.tail + data
            keep = max(len(trigger), len(after)) - 1
            state.tail = window[-keep:] if keep > 0 else b""
            position = window.find(trigger)
            if after and not state.seen_after:
                first = window.find(after)
                state.seen_after = first >= 0
                if first < 0 or position < first:
                    return
            if position >= 0:
                state.doomed = True
                self._times -= 1
