"""TLS for the integration tests: a throwaway CA and server certificate, and a TLS front.

`make_certificates(directory)` runs the ``openssl`` command-line tool to make, at test time,
a private certificate authority and a server certificate it signed for ``127.0.0.1`` and
``localhost`` (subject alternative names), valid for two days. Nothing is committed: the keys
live in the test's temporary directory and die with it. Clients that trust the system's CAs
refuse the server certificate (it chains to a CA nobody else knows); clients given
`TestCertificates.ca_cert` as their CA bundle accept it, host name checks included.

`TLSFront` terminates TLS on 127.0.0.1 in front of any plain TCP server (here: the InfluxDB 3
stand-in), forwarding the decrypted bytes both ways: an HTTP sink then talks HTTPS to a real
TLS endpoint. It counts the handshakes that succeeded and those that failed, so a test can
tell "the client refused the certificate" from "the client never came".
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from .common import Service

__all__ = ["TLSFront", "TestCertificates", "make_certificates"]

_DAYS = "2"


@dataclass(frozen=True)
class TestCertificates:
    """PEM files made by `make_certificates`: the CA's certificate, and the server's
    certificate (signed by that CA) and private key."""

    __test__ = False  # not a pytest test class

    ca_cert: Path
    server_cert: Path
    server_key: Path
    hosts: tuple[str, ...]

    def server_context(self) -> ssl.SSLContext:
        """An `ssl` server context presenting the server certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_cert, self.server_key)
        return context


def make_certificates(
    directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> TestCertificates:
    """A new CA and a server certificate for `hosts` (IP addresses or DNS names), as PEM
    files in `directory` (created if missing; keys readable by their owner only)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command is needed to make test certificates")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    names = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in hosts)
    extensions = directory / "server.ext"
    extensions.write_text(
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature, keyEncipherment\n"
        "extendedKeyUsage = serverAuth\n"
        f"subjectAltName = {names}\n"
        "subjectKeyIdentifier = hash\n"
        "authorityKeyIdentifier = keyid, issuer\n",
        encoding="utf-8",
    )
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        openssl, "req", "-x509", *new_key, "-keyout", ca_key, "-out", ca_cert, "-days", _DAYS,
        "-subj", "/CN=quixsinks test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
    )  # fmt: skip
    _openssl(openssl, "req", *new_key, "-keyout", key, "-out", csr, "-subj", f"/CN={hosts[0]}")
    _openssl(
        openssl, "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
        "-CAcreateserial", "-out", cert, "-days", _DAYS, "-extfile", extensions,
    )  # fmt: skip
    for private in (ca_key, key):
        os.chmod(private, 0o600)
    return TestCertificates(ca_cert=ca_cert, server_cert=cert, server_key=key, hosts=hosts)


def _openssl(*argv: str | Path) -> None:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {argv[1]} failed: {result.stderr.strip()}")


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True


class TLSFront(Service):
    """Terminates TLS on 127.0.0.1:<port> and forwards the plain bytes to ``target``.

    ``handshakes`` counts the TLS handshakes completed; ``refused`` those that failed (the
    client hung up on our certificate, or spoke no TLS). ``start()``/``stop()`` or ``with``.
    """

    host = "127.0.0.1"

    def __init__(self, target_host: str, target_port: int, certificates: TestCertificates) -> None:
        self.target = (target_host, target_port)
        self.context = certificates.server_context()
        self.handshakes = 0
        self.refused = 0
        self.handshake_errors: list[str] = []
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = threading.Event()

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("TLSFront is not started")
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        """``https://127.0.0.1:<port>``."""
        return f"https://{self.host}:{self.port}"

    def start(self) -> TLSFront:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, name="tls-front", daemon=True).start()
        return self

    def stop(self) -> None:
        self._closed.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            _close(s)

    # -- internals ------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        """Handshake (in this connection's thread), then forward both ways."""
        client.settimeout(30)
        try:
            secure = self.context.wrap_socket(client, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            with self._lock:
                self.refused += 1
                self.handshake_errors.append(str(exc))
            _close(client)
            return
        with self._lock:
            self.handshakes += 1
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            _close(secure)
            return
        secure.settimeout(None)
        upstream.settimeout(None)
        with self._lock:
            if self._closed.is_set():
                _close(secure)
                _close(upstream)
                return
            self._sockets |= {secure, upstream}
        try:
            self._forward(secure, upstream)
        finally:
            for s in (secure, upstream):
                _close(s)
            with self._lock:
                self._sockets -= {secure, upstream}

    @staticmethod
    def _forward(secure: ssl.SSLSocket, upstream: socket.socket) -> None:
        """Both directions in one thread: an SSL socket is not safe to read and write from
        two threads at once. Ends when either side closes (or `stop()` shuts them down)."""
        with contextlib.suppress(OSError):
            while True:
                if secure.pending():  # decrypted bytes already buffered: select cannot see them
                    ready: list[socket.socket] = [secure]
                else:
                    ready, _, _ = select.select([secure, upstream], [], [])
                for source in ready:
                    data = source.recv(65536)
                    if not data:
                        return
                    (upstream if source is secure else secure).sendall(data)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
