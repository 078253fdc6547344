"""What every test service launcher shares: free ports, a temporary directory, `with`."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["InProcessHTTPServer", "Service", "free_port", "serve_until_interrupted"]

S = TypeVar("S", bound="Service")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now (another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class Service:
    """Base of the launchers: `start()`/`stop()` and their `with` form, and `tmpdir`."""

    tmpdir: Path | None = None

    def start(self: S) -> S:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    @property
    def _tmp(self) -> Path:
        if self.tmpdir is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self.tmpdir

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve_until_interrupted(service: S, describe: Callable[[S], None]) -> None:
    """For a launcher run by hand: start ``service``, print how to reach it, keep it up
    until Ctrl-C or SIGTERM, then stop it and delete its directory."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if inherited as ignored
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    started = time.monotonic()
    with service:
        print(f"{type(service).__name__} up in {time.monotonic() - started:.2f}s")
        describe(service)
        print(f"dir:   {service.tmpdir}")
        print("Ctrl-C to stop and delete it.", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopping")


class InProcessHTTPServer:
    """An HTTP server in a daemon thread of the test process (fault proxies, fronts).

    A subclass's ``start()`` builds its handler class and calls :meth:`serve`; ``stop()``
    and the ``with`` form are shared.
    """

    host: str = "127.0.0.1"
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return int(self._server.server_address[1])

    def serve(self, handler: type[BaseHTTPRequestHandler], *, name: str) -> None:
        """Listen on a free port of ``host`` and serve ``handler`` until :meth:`stop`."""
        self._server = ThreadingHTTPServer((self.host, 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=name,
            daemon=True,
        )
        self._thread.start()

    def start(self) -> Any:
        raise NotImplementedError

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self: Any) -> Any:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
