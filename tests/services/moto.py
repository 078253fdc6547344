"""A throwaway S3 server (moto) on 127.0.0.1 for integration tests.

`MotoServer` runs ``moto_server -H 127.0.0.1 -p PORT`` (from ``moto[server]``, installed with
the ``dev`` extra, next to the running Python) in a temporary directory, and gives the
keyword arguments that point :class:`quixsinks.core.s3.S3Destination` at it. Authentication
is off unless a test turns it on with :meth:`MotoServer.enforce_auth`.

Manual use: ``python tests/services/moto.py`` starts a server, prints its URL and keeps it
running until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__:
    from .common import Service, free_port, serve_until_interrupted
else:  # run as a script: python tests/services/moto.py
    from common import (  # type: ignore[no-redef,import-not-found]
        Service,
        free_port,
        serve_until_interrupted,
    )

INSTALL_HINT = "pip install 'moto[server]>=5' (the quixsinks 'dev' extra)"
#: any credentials do while auth is off (moto's default)
ACCESS_KEY_ID = "AKIAQUIXSINKSTESTKEY"
SECRET_ACCESS_KEY = "quixsinks-moto-secret"
REGION = "us-east-1"


#: ``moto_server``'s own entry point, with conditional writes made atomic. moto checks
#: ``If-None-Match``/``If-Match`` and then writes, without a lock, in a threaded server:
#: measured, 1 of 200 rounds of 8 concurrent create-only PUTs had two winners. S3 decides
#: conditional writes atomically, and the commit protocol relies on that, so the server
#: serialises conditional PutObject / CompleteMultipartUpload requests (only those).
_ATOMIC_CONDITIONAL_WRITES = """
import sys, threading
from moto import server
from moto.s3.responses import S3Response

lock = threading.Lock()

def atomic(method):
    def wrapper(self, *args, **kwargs):
        if self.headers.get("If-None-Match") or self.headers.get("If-Match"):
            with lock:
                return method(self, *args, **kwargs)
        return method(self, *args, **kwargs)
    return wrapper

S3Response.put_object = atomic(S3Response.put_object)
S3Response._key_response_post = atomic(S3Response._key_response_post)
server.main(sys.argv[1:])
"""


def find_moto_server() -> Path:
    """``moto_server`` next to the running Python (a venv), else on ``PATH``."""
    beside = Path(sys.executable).parent / "moto_server"
    if beside.exists():
        return beside
    found = shutil.which("moto_server")
    if found:
        return Path(found)
    raise RuntimeError(
        f"moto_server not found next to {sys.executable} nor on PATH; {INSTALL_HINT}"
    )


class MotoServer(Service):
    """One moto S3 server: ``start()`` it (or use ``with``), then ``stop()``.

    Args:
        host: the address to bind (127.0.0.1).
        start_timeout: seconds to wait for the server to answer.
    """

    def __init__(self, host: str = "127.0.0.1", start_timeout: float = 30.0) -> None:
        self.host = host
        self.start_timeout = start_timeout
        self.port: int | None = None
        self.pid: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The endpoint URL (``http://127.0.0.1:PORT``)."""
        if self.port is None:
            raise RuntimeError("MotoServer is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def logfile(self) -> Path:
        return self._tmp / "moto.log"

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, attempts: int = 3) -> MotoServer:
        """Start the server; returns once it answers HTTP. Retries on a port taken meanwhile."""
        if self.tmpdir is not None:
            raise RuntimeError("MotoServer is already started")
        binary = find_moto_server()
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-moto-"))
        try:
            for attempt in range(1, attempts + 1):
                self.port = free_port(self.host)
                with open(self.logfile, "ab") as log:
                    self._process = subprocess.Popen(
                        [*_command(binary), "-H", self.host, "-p", str(self.port)],
                        cwd=self.tmpdir,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=_server_env(),
                        start_new_session=True,
                    )
                self.pid = self._process.pid
                if self._wait_until_up():
                    return self
                self._kill()
                if attempt == attempts or "Address already in use" not in self._log_tail():
                    raise RuntimeError(
                        f"moto_server did not come up on {self.url}\n"
                        f"--- server log (tail) ---\n{self._log_tail()}"
                    )
        except BaseException:
            self.stop()
            raise
        raise AssertionError("unreachable")

    def _wait_until_up(self) -> bool:
        """Poll until the server answers (True) or its process exits / time runs out."""
        deadline = time.monotonic() + self.start_timeout
        assert self._process is not None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/data.json", timeout=1):
                    return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        return False

    def stop(self) -> None:
        """Stop the server this object started (by its PID) and delete its directory."""
        try:
            self._kill()
        finally:
            if self.tmpdir is not None:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
            self.port = None

    def _kill(self) -> None:
        process, self._process, self.pid = self._process, None, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    # -- client helpers -------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """The keyword arguments that point an ``S3Destination`` at this server."""
        return {
            "endpoint_url": self.url,
            "region_name": REGION,
            "aws_access_key_id": ACCESS_KEY_ID,
            "aws_secret_access_key": SECRET_ACCESS_KEY,
        }

    def client(self, service: str = "s3", **credentials: Any) -> Any:
        """A boto3 client of this server (``s3``, ``iam``...)."""
        import boto3

        options = {**self.options(), **credentials}
        return boto3.client(service, **options)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def create_user(self, name: str, actions: list[str] | None = None) -> dict[str, Any]:
        """An IAM user allowed ``actions`` (default ``s3:*``; ``[]``: nothing) on every
        resource; returns ``options()`` with its access key instead of the default one.
        Only :meth:`enforce_auth` makes the server check them."""
        iam = self.client("iam")
        iam.create_user(UserName=name)
        if actions is None or actions:
            policy = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": actions or ["s3:*"], "Resource": "*"}],
            }
            iam.put_user_policy(
                UserName=name, PolicyName="quixsinks-test", PolicyDocument=json.dumps(policy)
            )
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return {
            **self.options(),
            "aws_access_key_id": key["AccessKeyId"],
            "aws_secret_access_key": key["SecretAccessKey"],
        }

    @contextlib.contextmanager
    def enforce_auth(self) -> Iterator[None]:
        """Make the server check signatures and IAM policies until the block ends.

        Every request of every client is then checked, so the default ``options()``
        credentials (no IAM user) are refused too: use :meth:`create_user` (before).
        """
        self._reset_auth("0")
        try:
            yield
        finally:
            self._reset_auth("inf")

    def _reset_auth(self, count: str) -> None:
        request = urllib.request.Request(  # not form-encoded: moto reads the raw body
            f"{self.url}/moto-api/reset-auth",
            data=count.encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.logfile.read_text(encoding="utf-8", errors="replace")
        except (OSError, RuntimeError):
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])


def _command(moto_server: Path) -> list[str]:
    """``moto_server`` as the Python of its installation runs it, with atomic conditional
    writes (see ``_ATOMIC_CONDITIONAL_WRITES``)."""
    python = moto_server.parent / "python"
    return [str(python if python.exists() else sys.executable), "-c", _ATOMIC_CONDITIONAL_WRITES]


def _server_env() -> dict[str, str]:
    """The server's environment: no AWS settings of the user's leak into it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def main() -> None:
    """Start a server, print how to reach it, keep it until Ctrl-C (or SIGTERM)."""

    def describe(server: MotoServer) -> None:
        print(f"S3 endpoint: {server.url}  (pid {server.pid}, log: {server.logfile})")
        print(f"options: {server.options()}")

    serve_until_interrupted(MotoServer(), describe)


if __name__ == "__main__":
    main()
