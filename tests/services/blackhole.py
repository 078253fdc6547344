"""A hung server: a TCP listener that accepts every connection and never answers.

`BlackHole` listens on a free port of 127.0.0.1 from a thread of the test process. Each
connection is accepted (so a client's connect succeeds) and then held open without a byte
in reply: whatever the client sends is read and dropped, so its writes never block either.
A client without a read timeout waits forever, which is what the hung-server tests
(tests/integration/test_hung_server.py) prove no sink does.

Bounded: at most ``max_connections`` connections are held (more are closed on accept, a
client sees a reset), one thread serves them all, and everything is closed by :meth:`stop`
(or the ``with`` block's end), or by the thread itself after ``max_seconds`` if nobody
stopped it. A TLS client waits for the server's hello and times out the same way.

    with BlackHole() as hole:
        options = {"host": hole.url}            # http://127.0.0.1:<port>
        hole.port, hole.address                 # <port>, "127.0.0.1:<port>"
        hole.accepted                           # connections accepted so far
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time

from .common import Service

__all__ = ["BlackHole"]


class BlackHole(Service):
    """Accepts TCP connections on 127.0.0.1:<free port> and never answers; see the module doc."""

    host = "127.0.0.1"

    def __init__(self, max_connections: int = 256, max_seconds: float = 600.0) -> None:
        self.max_connections = max_connections
        self.max_seconds = max_seconds
        self.accepted = 0
        self._listener: socket.socket | None = None
        self._selector: selectors.DefaultSelector | None = None
        self._held: set[socket.socket] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("BlackHole is not started")
        return int(self._listener.getsockname()[1])

    @property
    def address(self) -> str:
        """host:port, e.g. for an emulator host option."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """http://host:port, for the options that take a URL."""
        return f"http://{self.address}"

    def start(self) -> BlackHole:
        if self._listener is not None:
            raise RuntimeError("BlackHole is started already")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(64)
        listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ)
        self._listener = listener
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="black-hole", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the listener and every held connection; returns once the thread ended."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._close_all()

    # -- internals ------------------------------------------------------------------------

    def _serve(self) -> None:
        assert self._selector is not None
        assert self._listener is not None
        deadline = time.monotonic() + self.max_seconds
        while not self._stop.is_set():
            if time.monotonic() > deadline:
                self._close_all()  # forgotten: let go of everything
                return
            for key, _ in self._selector.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                else:
                    self._drain(sock)

    def _accept(self) -> None:
        assert self._listener is not None
        assert self._selector is not None
        try:
            conn, _ = self._listener.accept()
        except OSError:  # BlockingIOError (another wakeup took it) included
            return
        if len(self._held) >= self.max_connections:
            conn.close()
            return
        conn.setblocking(False)
        self.accepted += 1
        self._held.add(conn)
        self._selector.register(conn, selectors.EVENT_READ)

    def _drain(self, conn: socket.socket) -> None:
        """Read and drop what a client sends; forget a connection the client closed."""
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._forget(conn)

    def _forget(self, conn: socket.socket) -> None:
        assert self._selector is not None
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        self._held.discard(conn)
        with contextlib.suppress(OSError):
            conn.close()

    def _close_all(self) -> None:
        for conn in list(self._held):
            self._forget(conn)
        if self._selector is not None:
            if self._listener is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(self._listener)
            self._selector.close()
            self._selector = None
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
            self._listener = None


if __name__ == "__main__":  # pragma: no cover - manual use
    with BlackHole() as hole:
        print(f"black hole at {hole.url}; Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(1)
