"""moto_server: a real S3 protocol server (moto, from PyPI) on 127.0.0.1, for the S3 tests.

What it does not do like S3: it keeps everything in memory, never throttles (503
SlowDown) and never answers partial failures; credentials are accepted unless
``auth=True`` starts it with moto's IAM authentication on (then only the access keys it
issued work). Run by hand: ``python -m tests.services.moto``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from .common import Service, free_port, serve_until_interrupted

__all__ = ["MotoServer"]

ACCESS_KEY, SECRET_KEY, REGION = "testing", "testing-secret", "us-east-1"


class MotoServer(Service):
    """One ``moto_server`` process on a free port of 127.0.0.1."""

    def __init__(self, start_timeout: float = 60.0) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def options(self) -> dict[str, Any]:
        """The S3Destination / file sink credentials that reach this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "region_name": REGION,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
        }

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", **self.options())

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def start(self) -> MotoServer:
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-moto-"))
        binary = Path(sys.executable).with_name("moto_server")
        command = [str(binary)] if binary.exists() else [sys.executable, "-m", "moto.server"]
        try:
            self.port = free_port(self.host)
            with open(self.tmpdir / "moto.log", "wb") as log:
                self._proc = subprocess.Popen(
                    [*command, "-H", self.host, "-p", str(self.port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.tmpdir,
                    env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"},
                )
            deadline = time.monotonic() + self.start_timeout
            while True:
                if self._proc.poll() is not None:
                    raise RuntimeError(
                        f"moto_server exited: {(self.tmpdir / 'moto.log').read_text()[-2000:]}"
                    )
                try:
                    with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("moto_server did not answer in time") from None
                    time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.tmpdir is None:
            return
        try:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
        finally:
            self._proc = None
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


if __name__ == "__main__":
    serve_until_interrupted(MotoServer(), lambda s: print(f"endpoint: {s.endpoint_url}"))
