"""A throwaway Redis server on 127.0.0.1 for integration tests (Debian's redis-server).

Started with ``--save '' --appendonly no`` (nothing on disk) and a random password, so the
tests exercise AUTH. Install it with ``bash tests/services/install.sh``.

Manual use: ``python tests/services/redis_server.py`` starts one, prints how to reach it
and keeps it running until Ctrl-C.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

if __package__:
    from .common import Service, free_port, serve_until_interrupted
else:  # run as a script
    from common import (  # type: ignore[no-redef,import-not-found]
        Service,
        free_port,
        serve_until_interrupted,
    )

INSTALL_HINT = "bash tests/services/install.sh"


def find_redis_server() -> str:
    found = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin")
    if found is None:
        raise RuntimeError(f"redis-server not found; run: {INSTALL_HINT}")
    return found


class RedisServer(Service):
    """One redis-server process: ``start()`` / ``stop()`` / ``restart()`` (or ``with``)."""

    host = "127.0.0.1"

    def __init__(self, start_timeout: float = 20.0) -> None:
        self.binary = find_redis_server()
        self.start_timeout = start_timeout
        self.password = secrets.token_urlsafe(18)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def options(self) -> dict[str, str]:
        """What the sink needs to reach it."""
        return {"host": self.host, "port": str(self.port), "password": self.password}

    def start(self) -> RedisServer:
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-redis-"))
        for _ in range(5):
            self.port = free_port(self.host)
            self._launch()
            if self._wait_up():
                return self
            self._kill()
        raise RuntimeError(f"redis-server did not start; see {self._tmp / 'redis.log'}")

    def _launch(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", self.host,
                "--save", "",
                "--appendonly", "no",
                "--requirepass", self.password,
                "--dir", str(self._tmp),
                "--logfile", str(self._tmp / "redis.log"),
                "--daemonize", "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def _wait_up(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            try:
                if self.command("PING") in (True, b"PONG"):
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        """Stop and start again on the same port (the data is gone: nothing on disk)."""
        self._kill()
        self._launch()
        if not self._wait_up():
            raise RuntimeError("redis-server did not come back")

    def stop(self) -> None:
        self._kill()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def client(self) -> object:
        """A redis-py client (bytes replies) on this server."""
        import redis

        return redis.Redis(host=self.host, port=self.port, password=self.password)

    def command(self, *args: str) -> object:
        """One command over a raw socket (no client library needed): the reply."""
        import redis

        with redis.Redis(
            host=self.host, port=self.port, password=self.password, socket_timeout=5
        ) as r:
            return r.execute_command(*args)


if __name__ == "__main__":

    def describe(server: RedisServer) -> None:
        print(f"redis: 127.0.0.1:{server.port} password {server.password}")

    serve_until_interrupted(RedisServer(), describe)
