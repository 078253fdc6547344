"""Every use of pyiceberg's private API, in one module (the ``iceberg`` extra pins the
pyiceberg releases it is proven on: ``pyiceberg<0.13``; ``tests/unit/test_iceberg_sink.py``
checks each hook below exists in the installed release).

* **Commits with our own requirements.** pyiceberg's ``Transaction.commit_transaction``
  sends the transaction's updates with its requirements and nothing else; the table layer
  adds its own (the table's UUID; for snapshot expiry, "main has not moved") and drives
  its own retry (:mod:`.commit`), so it sends ``tx._requirements`` and ``tx._updates``
  itself (:func:`commit_transaction`).
* **A schema update's result before it is committed** (``UpdateSchema._apply``:
  :func:`evolved_schema`), to tell "nothing to change" and ``schema_mode=freeze`` apart.
* **Data files written from Arrow** without a commit (``pyiceberg.io.pyarrow.
  _dataframe_to_data_files``: :func:`write_data_files`): executors write, the driver
  commits.
* **A transaction whose metadata is built once per change** (:func:`transaction`):
  pyiceberg's ``Transaction.table_metadata`` replays the staged updates onto a deep copy
  of the table's whole metadata, every snapshot included, on every read, and an append
  reads it about 18 times; a table's commit then grows with its history (an append to a
  local table took 79 ms at 5 snapshots and 526 ms at 300; with the cache 40 ms and
  153 ms). :class:`CachingTransaction` keeps the last result while neither the table's
  metadata nor the staged updates (an immutable tuple pyiceberg replaces on each change)
  have changed, and with nothing staged it is the table's own metadata (an append stages
  its snapshot only when it commits, so it copies nothing: 3.9 ms saved per commit at
  200 snapshots); the metadata models are frozen, so sharing one is safe. It goes when
  pyiceberg caches it itself (apache/iceberg-python pull request 3784).
* **A timeout on every REST catalog call** (:class:`TimeoutRestCatalog`): pyiceberg (0.12)
  gives its REST calls no timeout and has no property for one, and ``requests`` waits
  forever by default: a catalog that accepts the connection and never answers hung the
  sink's planning and the driver's commit for good. Its HTTP sessions pass a (connect,
  read) timeout to every call made without one: each adapter mounted on a session (HTTP,
  HTTPS, and the request signer of ``rest.sigv4-enabled``) is wrapped in a
  :class:`TimeoutAdapter`. Headers, TLS settings and authentication stay pyiceberg's. The
  hooks are ``RestCatalog._create_session`` (every session the catalog uses, the
  configuration fetch of the constructor included) and
  ``_create_legacy_oauth2_auth_manager`` (its token request with a ``credential`` is sent
  while the session is being built); they go when pyiceberg has a timeout property
  (apache/iceberg-python issue 2772). Not covered: the token requests of
  ``auth.type=oauth2``, which pyiceberg sends with a module-level ``requests.post``.

Imported only once :func:`quixsinks.core.tables.catalog.import_pyiceberg` found pyiceberg.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Transaction
from requests import PreparedRequest, Response, Session
from requests.adapters import BaseAdapter

from quixsinks.core.clients import connect_timeout

from .catalog import TIMEOUT_PROPERTY

__all__ = [
    "PRIVATE_HOOKS",
    "TRANSACTION_ATTRIBUTES",
    "CachingTransaction",
    "TimeoutAdapter",
    "TimeoutRestCatalog",
    "commit_transaction",
    "evolved_schema",
    "nest_ssl",
    "transaction",
    "with_timeout",
    "write_data_files",
]

#: (module, attribute path) of every private pyiceberg name this module relies on, but the
#: attributes of a Transaction object (:data:`TRANSACTION_ATTRIBUTES`)
PRIVATE_HOOKS = (
    ("pyiceberg.table.update.schema", "UpdateSchema._apply"),
    ("pyiceberg.io.pyarrow", "_dataframe_to_data_files"),
    ("pyiceberg.catalog.rest", "RestCatalog._create_session"),
    ("pyiceberg.catalog.rest", "RestCatalog._create_legacy_oauth2_auth_manager"),
)

#: the private attributes of a ``pyiceberg.table.Transaction`` that :func:`commit_transaction`
#: and :class:`CachingTransaction` read
TRANSACTION_ATTRIBUTES = ("_requirements", "_updates", "_table")


class CachingTransaction(Transaction):
    """pyiceberg's ``Transaction`` whose ``table_metadata`` is computed once per change."""

    _built: tuple[Any, tuple[Any, ...], Any] | None = None

    @property
    def table_metadata(self) -> Any:
        if not self._updates:
            # nothing staged: pyiceberg would return a deep copy of the table's metadata
            # (the one copy an append made, growing with the history); it is frozen
            return self._table.metadata
        built = self._built
        if built is None or built[0] is not self._table.metadata or built[1] is not self._updates:
            built = (self._table.metadata, self._updates, super().table_metadata)
            self._built = built
        return built[2]


def transaction(table: Any) -> Transaction:
    """``table.transaction()``, as a :class:`CachingTransaction`."""
    return CachingTransaction(table)


def commit_transaction(table: Any, tx: Any, *requirements: Any) -> Any:
    """Send ``tx``'s updates to ``table``'s catalog with its requirements and these, once
    (no retry); the table object is updated to the committed metadata. Raises what the
    catalog raises (``CommitFailedException`` on a conflict)."""
    response = table.catalog.commit_table(table, (*tx._requirements, *requirements), tx._updates)
    table.metadata = response.metadata
    table.metadata_location = response.metadata_location
    return table


def evolved_schema(update: Any) -> Any:
    """The schema a pending ``UpdateSchema`` would commit (raises on an unsafe change)."""
    return update._apply()


def write_data_files(metadata: Any, rows: Any, io: Any) -> list[Any]:
    """Parquet data files (field ids, split by partition) of ``rows`` under the table's
    data location, named uniquely to this call; their ``DataFile`` entries, uncommitted."""
    import uuid

    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    return list(_dataframe_to_data_files(metadata, rows, io, uuid.uuid4()))


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
