"""A throwaway Google Cloud Storage emulator on 127.0.0.1 for integration tests.

`GCSEmulator` runs ``gcp-storage-emulator start --in-memory`` (a PyPI package in the dev
extra, installed in the virtualenv next to the Python running the tests) on a free port,
and puts :class:`~tests.services.gcs_front.GCSFront` in front of it: preconditions,
1,000-item list pages, service-account authentication and fault injection, which the
emulator lacks. Clients talk to the front (``url``); ``emulator_url`` is the bare emulator.

Manual use: ``python tests/services/gcs_emulator.py`` starts one, prints how to reach it and
keeps it running until Ctrl-C.
"""

from __future__ import annotations

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
import uuid
from pathlib import Path
from typing import Any

if __package__:
    from .common import Service, free_port, serve_until_interrupted
    from .gcs_front import GCSFront
else:  # run as a script: python tests/services/gcs_emulator.py
    from common import (  # type: ignore[no-redef,import-not-found]
        Service,
        free_port,
        serve_until_interrupted,
    )
    from gcs_front import GCSFront  # type: ignore[no-redef,import-not-found]

INSTALL_HINT = "pip install 'gcp-storage-emulator>=2024.8' (part of quixsinks[dev])"
PROJECT = "quixsinks-test"

#: Runs the emulator's own ``main`` (what its ``gcp-storage-emulator`` script runs) with one
#: change: in memory, it re-serialises the metadata of *every* object after each write (a
#: snapshot nobody reads in memory mode), which makes writes O(objects stored) and a test
#: session quadratic; that snapshot is skipped. Nothing else is patched.
_LAUNCH = """
import sys
from gcp_storage_emulator import storage
_snapshot = storage.Storage._write_config_to_file
def _write_config_to_file(self):
    if not self._use_memory_fs:
        _snapshot(self)
storage.Storage._write_config_to_file = _write_config_to_file
from gcp_storage_emulator.__main__ import main
main(sys.argv[1:])
"""


def find_emulator() -> str:
    """The ``gcp-storage-emulator`` script of this virtualenv (or on PATH); the emulator
    runs under the Python of its shebang line."""
    beside = Path(sys.executable).parent / "gcp-storage-emulator"
    if beside.exists():
        return str(beside)
    found = shutil.which("gcp-storage-emulator")
    if found is None:
        raise RuntimeError(f"gcp-storage-emulator not found; run: {INSTALL_HINT}")
    return found


def _python_of(script: str) -> str:
    """The interpreter in ``script``'s ``#!`` line (a console script of some virtualenv)."""
    with open(script, "rb") as f:
        first = f.readline().decode(errors="replace").strip()
    if first.startswith("#!") and " " not in first[2:].strip():
        return first[2:].strip()
    return sys.executable


class GCSEmulator(Service):
    """One emulator process plus its front: ``start()`` (or ``with``), then ``stop()``.

    Args:
        require_auth: the front refuses requests without a token it issued (as GCS does
            for a private bucket); ``options()`` carries a registered service account.
    """

    host = "127.0.0.1"

    def __init__(self, *, require_auth: bool = True, start_timeout: float = 30.0) -> None:
        self.require_auth = require_auth
        self.start_timeout = start_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.front: GCSFront | None = None
        self.tmpdir: Path | None = None
        self._accounts: dict[bool, str] = {}

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, attempts: int = 3) -> GCSEmulator:
        if self.tmpdir is not None:
            raise RuntimeError("GCSEmulator is already started")
        self.tmpdir = Path(tempfile.mkdtemp(prefix="quixsinks-gcs-"))
        try:
            for attempt in range(1, attempts + 1):
                self.port = free_port(self.host)
                if self._launch():
                    break
                if attempt == attempts:
                    raise RuntimeError(
                        "gcp-storage-emulator did not start; its log:\n" + self._log_tail()
                    )
            self.front = GCSFront(self.emulator_url, require_auth=self.require_auth).start()
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self) -> bool:
        """Start the emulator on ``self.port``; False if it exited (port taken meanwhile)."""
        log = open(self._tmp / "emulator.log", "ab")  # noqa: SIM115 - the child keeps it
        env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
        self.process = subprocess.Popen(
            [
                _python_of(find_emulator()),
                "-c",
                _LAUNCH,
                "start",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--in-memory",
            ],
            cwd=self._tmp,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                return False
            try:
                with urllib.request.urlopen(f"{self.emulator_url}/", timeout=1) as answer:
                    if answer.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)  # polling interval of the readiness check, not a fixed wait
        raise RuntimeError(
            f"gcp-storage-emulator not ready in {self.start_timeout:g} s:\n{self._log_tail()}"
        )

    def stop(self) -> None:
        """Stop the front and the emulator this object started (by PID), delete the dir."""
        if self.front is not None:
            self.front.stop()
            self.front = None
        if self.process is not None:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.kill(self.process.pid, signal.SIGKILL)
                    self.process.wait(timeout=10)
            self.process = None
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    # -- addresses and credentials ---------------------------------------------------------

    @property
    def emulator_url(self) -> str:
        """The bare emulator (no preconditions, no pagination, no authentication)."""
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The front: what clients should use."""
        return self._front.url

    @property
    def _front(self) -> GCSFront:
        if self.front is None:
            raise RuntimeError("GCSEmulator is not started")
        return self.front

    def options(self, *, read_only: bool = False) -> dict[str, Any]:
        """Keyword arguments for ``GCSDestination``: the front and a service account of it."""
        return {
            "endpoint": self.url,
            "project": PROJECT,
            "service_account_json": self.service_account_json(read_only=read_only),
        }

    def service_account_json(self, *, read_only: bool = False, registered: bool = True) -> str:
        """A service account key (JSON text) whose token endpoint is the front.

        ``registered=False`` gives a well-formed key the front does not know: its token
        requests are refused (``invalid_grant``), like a deleted or mistyped key.
        """
        if registered and read_only in self._accounts:
            return self._accounts[read_only]
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        public = (
            key.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )
        name = f"{'ro' if read_only else 'rw'}-{uuid.uuid4().hex[:8]}"
        email = f"{name}@{PROJECT}.iam.gserviceaccount.com"
        text = json.dumps(
            {
                "type": "service_account",
                "project_id": PROJECT,
                "private_key_id": uuid.uuid4().hex,
                "private_key": private,
                "client_email": email,
                "client_id": str(uuid.uuid4().int)[:21],
                "token_uri": self._front.token_uri,
            }
        )
        if registered:
            self._front.register_account(email, public, read_only=read_only)
            self._accounts[read_only] = text
        return text

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (directly on the emulator)."""
        request = urllib.request.Request(
            f"{self.emulator_url}/storage/v1/b?project={PROJECT}",
            # no soft delete (GCS's default keeps deleted objects for 7 days; in memory here)
            data=json.dumps(
                {"name": name, "softDeletePolicy": {"retentionDurationSeconds": "0"}}
            ).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            if answer.status != 200:
                raise RuntimeError(f"creating bucket {name} failed: HTTP {answer.status}")

    def inject(
        self,
        status: int,
        count: int = 1,
        *,
        retry_after: float | None = None,
        methods: tuple[str, ...] | None = None,
    ) -> None:
        """Answer the next ``count`` requests with ``status`` (see ``GCSFront.inject``)."""
        self._front.inject(status, count, retry_after=retry_after, methods=methods)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = (self._tmp / "emulator.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no emulator log)"
        return "\n".join(text.splitlines()[-lines:])


def main() -> None:
    """Start an emulator and its front, print how to reach them, keep them until Ctrl-C."""

    def describe(server: GCSEmulator) -> None:
        print(f"front:    {server.url}  (token endpoint {server._front.token_uri})")
        print(f"emulator: {server.emulator_url}  (pid {server.pid}; no auth, no preconditions)")
        print(f"try:      STORAGE_EMULATOR_HOST={server.emulator_url} python ...")

    serve_until_interrupted(GCSEmulator(require_auth=False), describe)


if __name__ == "__main__":
    main()
