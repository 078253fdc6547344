"""A throwaway Redis server on 127.0.0.1 for integration tests (Debian's redis-server).

Started with ``--save '' --appendonly no`` (nothing on disk) and a random password, so the
tests exercise AUTH. ``crash()`` SIGKILLs it and starts it again with what an explicit
``SAVE`` snapshotted, as a server that lost its latest writes. Install it with
``bash tests/services/install.sh``.

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
        self.extra_args: list[str] = []

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
                *self.extra_args,
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
            except Exception:  # not up yet (redis-py's ConnectionError is no OSError)
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
        self._relaunch()

    def crash(self) -> None:
        """SIGKILL the server this object started and start it again on the same port.

        It comes back with the snapshot of the last ``SAVE`` a test ran, if any, else
        empty: every write since is lost, as when a server without persistence restarts,
        one crashes within its fsync window, or a replica that missed writes takes over.
        The snapshot is deleted once loaded (a later restart starts empty again).
        """
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None
        self._relaunch()

    def _relaunch(self) -> None:
        self._launch()
        if not self._wait_up():
            raise RuntimeError("redis-server did not come back")
        (self._tmp / "dump.rdb").unlink(missing_ok=True)

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


class RedisCluster(Service):
    """Three ``redis-server --cluster-enabled yes`` masters joined by ``redis-cli --cluster
    create`` (no replicas), password-protected; ``options`` reach it with ``cluster=true``."""

    host = "127.0.0.1"

    def __init__(self, nodes: int = 3, start_timeout: float = 30.0) -> None:
        self.servers = [RedisServer(start_timeout) for _ in range(nodes)]
        self.password = secrets.token_urlsafe(18)
        for server in self.servers:
            server.password = self.password
            server.extra_args = ["--cluster-enabled", "yes", "--masterauth", self.password]
        self.start_timeout = start_timeout

    @property
    def options(self) -> dict[str, str]:
        first = self.servers[0]
        return {"host": self.host, "port": str(first.port), "password": self.password,
                "cluster": "true"}  # fmt: skip

    def start(self) -> RedisCluster:
        try:
            return self._start()
        except BaseException:
            self.stop()  # no server left behind when the cluster does not come up
            raise

    def _start(self) -> RedisCluster:
        for server in self.servers:
            server.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError(f"redis-cli not found; run: {INSTALL_HINT}")
        subprocess.run(
            [cli, "-a", self.password, "--no-auth-warning", "--cluster", "create",
             *(f"{self.host}:{s.port}" for s in self.servers),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            infos = [s.command("CLUSTER", "INFO") for s in self.servers]
            if all("cluster_state:ok" in _text(i) for i in infos):
                return self
            time.sleep(0.1)
        raise RuntimeError("the redis cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def client(self) -> object:
        from redis.cluster import RedisCluster as Client

        return Client(host=self.host, port=self.servers[0].port, password=self.password)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return "\n".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


if __name__ == "__main__":

    def describe(server: RedisServer) -> None:
        print(f"redis: 127.0.0.1:{server.port} password {server.password}")

    serve_until_interrupted(RedisServer(), describe)
