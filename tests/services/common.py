"""What every test service launcher shares: free ports, a temporary directory, `with`."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

__all__ = [
    "InProcessHTTPServer",
    "ProcessService",
    "Service",
    "free_port",
    "run_install_script",
    "serve_until_interrupted",
]

S = TypeVar("S", bound="Service")
P = TypeVar("P", bound="ProcessService")


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


def run_install_script(script: Path, proof: Path, what: str) -> None:
    """Run ``bash script`` when ``proof`` (a file the install creates) is missing."""
    if proof.is_file():
        return
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if result.returncode != 0 or not proof.is_file():
        raise RuntimeError(
            f"installing {what} failed (bash {script}):\n{result.stdout}{result.stderr}"
        )


class ProcessService(Service):
    """A launcher of one server process on a free port of 127.0.0.1, in a temporary folder.

    Subclasses name the server (``name``: messages, the folder and ``<name>.log``), return
    what their command needs from ``_install()`` and the command from ``_command()``;
    ``probe`` is the HTTP path asked until the server answers (any status counts). The
    process runs in its own session and is stopped by its PID only.
    """

    host = "127.0.0.1"
    name = "server"
    probe = "/"

    def __init__(self, start_timeout: float = 30.0) -> None:
        self.start_timeout = start_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.tmpdir: Path | None = None

    def _install(self) -> Any:
        raise NotImplementedError

    def _command(self, installed: Any) -> list[str]:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def logfile(self) -> Path:
        return self._tmp / f"{self.name}.log"

    def start(self: P, attempts: int = 3) -> P:
        """Start on a free port; retry with another port if one was taken meanwhile."""
        if self.tmpdir is not None:
            raise RuntimeError(f"{type(self).__name__} is already started")
        installed = self._install()
        self.tmpdir = Path(tempfile.mkdtemp(prefix=f"quixsinks-{self.name}-"))
        try:
            for attempt in range(1, attempts + 1):
                self.port = free_port(self.host)
                self._spawn(installed)
                if self._wait_ready():
                    return self
                self._kill()
                if attempt == attempts or "EADDRINUSE" not in self._log_tail():
                    raise RuntimeError(
                        f"{self.name} did not start on {self.host}:{self.port} in "
                        f"{self.start_timeout:g} s\n--- log (tail) ---\n{self._log_tail()}"
                    )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the process this object started (by its PID) and delete its folder."""
        if self.tmpdir is None:
            return
        try:
            self._kill()
        finally:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def _spawn(self, installed: Any) -> None:
        log = open(self.logfile, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                self._command(installed),
                cwd=self._tmp,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()

    def _wait_ready(self) -> bool:
        """Wait until the server answers HTTP (any status) or its process exits."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            if self._answers_http():
                return True
            time.sleep(0.05)
        return False

    def _answers_http(self) -> bool:
        request = f"GET {self.probe} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as sock:
                sock.sendall(request)
                return sock.recv(12).startswith(b"HTTP/1.1")
        except OSError:
            return False

    def _kill(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.logfile.read_text(encoding="utf-8", errors="replace")
        except (OSError, RuntimeError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


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
