"""A TCP proxy that cuts the network for a while: real transient failures for gRPC clients.

`TCPFaultProxy` forwards every connection made to it (127.0.0.1, a free port) to a target
server, byte for byte (HTTP/2 and gRPC pass through untouched). ``cut_after(bytes_forwarded,
seconds)`` arms one outage: once that many more bytes went from clients to the server, every
open connection is closed and new ones are closed on accept for ``seconds``. A gRPC client
sees UNAVAILABLE, exactly as in a network outage; requests already forwarded may have been
processed by the server while their answers were lost (so resends make duplicates, which is
what an at-least-once sink must survive). Used by the Pub/Sub tests, where the emulator
itself never fails a publish.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from .common import Service

__all__ = ["TCPFaultProxy"]


class TCPFaultProxy(Service):
    """Forwards 127.0.0.1:<port> to ``target_host:target_port``; see the module doc."""

    host = "127.0.0.1"

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.cuts = 0
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._forwarded = 0
        self._cut_at: int | None = None
        self._cut_seconds = 0.0
        self._down_until = 0.0
        self._closed = threading.Event()

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("TCPFaultProxy is not started")
        return int(self._listener.getsockname()[1])

    @property
    def address(self) -> str:
        """host:port, e.g. for PUBSUB_EMULATOR_HOST."""
        return f"{self.host}:{self.port}"

    def cut_after(self, *, bytes_forwarded: int, seconds: float) -> None:
        """Arm one outage of ``seconds`` after ``bytes_forwarded`` more client bytes."""
        with self._lock:
            self._cut_at = self._forwarded + bytes_forwarded
            self._cut_seconds = seconds
        if bytes_forwarded <= 0:
            self._maybe_cut()

    def start(self) -> TCPFaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, name="tcp-fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self._closed.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        self._close_all()

    # -- internals ------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if time.monotonic() < self._down_until:
                client.close()  # the network is down
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            for source, sink, counted in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump, args=(source, sink, counted), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, counted: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
                if counted:
                    with self._lock:
                        self._forwarded += len(data)
                    self._maybe_cut()
        except OSError:
            pass
        finally:
            self._close_pair(source, sink)

    def _close_pair(self, source: socket.socket, sink: socket.socket) -> None:
        """Close both ends of a forwarded connection (the other pump then ends too)."""
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        with self._lock:
            self._sockets.discard(source)
            self._sockets.discard(sink)

    def _maybe_cut(self) -> None:
        with self._lock:
            if self._cut_at is None or self._forwarded < self._cut_at:
                return
            self._cut_at = None
            self._down_until = time.monotonic() + self._cut_seconds
            self.cuts += 1
        self._close_all()

    def _close_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
