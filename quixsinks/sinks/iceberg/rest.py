"""pyiceberg's REST catalog with a timeout on every HTTP call.

pyiceberg (0.12) gives its REST calls no timeout and has no property for one, and
``requests`` waits forever by default: a catalog that accepts the connection and never
answers hung the sink's planning and the driver's commit for good. :class:`TimeoutRestCatalog`
is pyiceberg's ``RestCatalog`` whose HTTP sessions pass a (connect, read) timeout to every
call made without one: each adapter mounted on a session (HTTP, HTTPS, and the request signer
of ``rest.sigv4-enabled``) is wrapped in a :class:`TimeoutAdapter`. Headers, TLS settings and
authentication stay pyiceberg's.

The hooks are pyiceberg's session factory ``RestCatalog._create_session`` (every session the
catalog uses, the configuration fetch of the constructor included) and
``_create_legacy_oauth2_auth_manager`` (its token request with a ``credential`` is sent while
the session is being built). They are private: this module goes when pyiceberg has a timeout
property (apache/iceberg-python issue 2772). Not covered: the token requests of
``auth.type=oauth2``, which pyiceberg sends with a module-level ``requests.post``.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.catalog.rest import RestCatalog
from requests import PreparedRequest, Response, Session
from requests.adapters import BaseAdapter

from quixsinks.core.clients import connect_timeout

from .catalog import TIMEOUT_PROPERTY

__all__ = ["TimeoutAdapter", "TimeoutRestCatalog", "nest_ssl"]


class TimeoutAdapter(BaseAdapter):
    """A transport adapter that gives every request without a timeout this one."""

    def __init__(
        self, inner: BaseAdapter, timeout: tuple[float, float], verify: bool | str | None = None
    ) -> None:
        super().__init__()
        self.inner = inner
        self.timeout = timeout
        #: the catalog's own verification (``ssl.cabundle``), which wins over requests'
        #: environment: with ``REQUESTS_CA_BUNDLE`` set, requests replaces a session's
        #: ``verify`` by the environment's bundle (psf/requests issue 3829)
        self.verify = verify

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> Response:
        return self.inner.send(
            request,
            stream=stream,
            timeout=self.timeout if timeout is None else timeout,
            verify=verify if self.verify is None else self.verify,
            cert=cert,
            proxies=proxies,
        )

    def close(self) -> None:
        self.inner.close()


def with_timeout(
    session: Session, timeout: tuple[float, float], verify: bool | str | None = None
) -> Session:
    """``session`` with every mounted adapter wrapped in a :class:`TimeoutAdapter` (once);
    ``verify``, when given, is the verification of every request (see
    :attr:`TimeoutAdapter.verify`)."""
    for prefix, adapter in list(session.adapters.items()):
        if not isinstance(adapter, TimeoutAdapter):
            session.mount(prefix, TimeoutAdapter(adapter, timeout, verify))
        elif verify is not None:  # wrapped already, while pyiceberg built the session
            adapter.verify = verify
    return session


#: the flat ``catalog.*`` properties of the catalog's TLS settings, and where pyiceberg reads
#: them: its nested ``ssl`` property (``.pyiceberg.yaml``'s ``ssl: {cabundle, client: ...}``)
SSL_PROPERTIES = {
    "ssl.cabundle": ("cabundle",),
    "ssl.client.cert": ("client", "cert"),
    "ssl.client.key": ("client", "key"),
}


def nest_ssl(properties: dict[str, Any]) -> dict[str, Any]:
    """``properties`` with the flat TLS properties (``ssl.cabundle``, ``ssl.client.cert``,
    ``ssl.client.key``) nested into the ``ssl`` property pyiceberg's REST catalog reads.

    Through the sink's options every property is a flat string (``catalog.ssl.cabundle``);
    pyiceberg ignores a flat ``ssl.cabundle`` without a word, so a private CA failed with
    CERTIFICATE_VERIFY_FAILED. An ``ssl.cabundle`` of ``false`` turns verification off."""
    out = {k: v for k, v in properties.items() if k not in SSL_PROPERTIES}
    ssl: dict[str, Any] = {}
    for name, path in SSL_PROPERTIES.items():
        value: Any = properties.get(name)
        if value is None:
            continue
        if path == ("cabundle",) and str(value).lower() == "false":
            value = False
        node = ssl
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    if ssl:
        out["ssl"] = ssl
    return out


class TimeoutRestCatalog(RestCatalog):
    """pyiceberg's RestCatalog; every HTTP call has a timeout (property
    ``quixsinks.timeout-seconds``: the read timeout; the connect timeout is at most 10 s).
    The flat TLS properties are nested as pyiceberg reads them (:func:`nest_ssl`)."""

    def __init__(self, name: str, **properties: Any) -> None:
        super().__init__(name, **nest_ssl(properties))

    def _timeout(self) -> tuple[float, float]:
        seconds = float(self.properties[TIMEOUT_PROPERTY])
        return (connect_timeout(seconds), seconds)

    def _create_session(self) -> Session:
        session = super()._create_session()
        ssl = self.properties.get("ssl")
        pinned = session.verify if isinstance(ssl, dict) and "cabundle" in ssl else None
        return with_timeout(session, self._timeout(), pinned)

    def _create_legacy_oauth2_auth_manager(self, session: Session) -> Any:
        return super()._create_legacy_oauth2_auth_manager(with_timeout(session, self._timeout()))
