"""Destinations: where file-writing sinks put bytes (local disk, S3, Azure Blob, GCS).

A :class:`Destination` (the contract, in :mod:`quixsinks.core.storage`) is a flat key space
under a root (``a/b/c.parquet``) with the few operations the commit protocol needs:

* ``write_bytes`` (overwrites), ``read_bytes``, ``exists``, ``list``, ``delete``;
* ``move`` to a fixed final name (rename on disk, copy+delete on object stores), and
  ``move_many``, a commit's moves (side by side on object stores; on disk, renames in turn
  and one fsync per folder);
* ``create_exclusive``: create a small object only if it does not exist yet
  (``O_EXCL``/link on disk, ``If-None-Match: *`` on S3, ``overwrite=False`` on Azure),
  the primitive that lets exactly one driver publish a micro-batch.

Library errors are translated at one boundary per backend into
:class:`~quixsinks.core.errors.DestinationNotFoundError`,
:class:`~quixsinks.core.errors.DestinationAccessDeniedError` or
:class:`~quixsinks.core.errors.DestinationError`. Destinations hold no open clients
when pickled. This module holds local disk, the object stores' credential options and
:func:`destination_for`, which picks the backend a ``path`` names.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from .errors import DestinationAccessDeniedError, DestinationError, DestinationNotFoundError
from .options import SinkOptions, option
from .storage import DEFAULT_STORAGE_TIMEOUT, Destination, Move

__all__ = [
    "DEFAULT_STORAGE_TIMEOUT",
    "Destination",
    "LocalDestination",
    "StorageOptions",
    "absolute_local_path",
    "destination_for",
]


@dataclass(frozen=True, kw_only=True)
class StorageOptions(SinkOptions):
    """Credentials of the object stores a ``path`` URL may name (Quix's names).

    Read on the driver when the options are parsed (environment variables included) and
    carried to the executors as secrets. Unset credentials fall back to each client's
    default chain (boto3's, Azure's, Google's application-default credentials).
    """

    aws_access_key_id: str | None = option(
        None, secret=True, env="AWS_ACCESS_KEY_ID", doc="S3: access key id"
    )
    aws_secret_access_key: str | None = option(
        None, secret=True, env="AWS_SECRET_ACCESS_KEY", doc="S3: secret access key"
    )
    aws_session_token: str | None = option(
        None, secret=True, env="AWS_SESSION_TOKEN", doc="S3: session token"
    )
    region_name: str | None = option(
        None, env="AWS_REGION", doc="S3: region (else AWS_DEFAULT_REGION or the profile's)"
    )
    endpoint_url: str | None = option(
        None, doc="S3: endpoint of an S3-compatible store (MinIO...), e.g. http://host:9000"
    )
    azure_connection_string: str | None = option(
        None,
        secret=True,
        env="AZURE_STORAGE_CONNECTION_STRING",
        aliases=("connection_string",),
        doc="Azure Blob: connection string",
    )
    azure_account_key: str | None = option(
        None, secret=True, env="AZURE_STORAGE_KEY", doc="Azure Blob: account key"
    )
    azure_sas_token: str | None = option(None, secret=True, doc="Azure Blob: SAS token")
    azure_container: str | None = option(
        None, doc="Azure Blob: the container, when the path URL does not name one"
    )
    service_account_json: str | None = option(
        None, secret=True, doc="GCS: service account key, JSON text or a file path"
    )
    gcs_endpoint: str | None = option(
        None,
        env="STORAGE_EMULATOR_HOST",
        doc="GCS: endpoint of an emulator or a private endpoint (anonymous credentials)",
    )
    storage_timeout_seconds: float = option(
        DEFAULT_STORAGE_TIMEOUT,
        positive=True,
        doc="S3, Azure Blob, GCS: seconds to wait for an answer to one request (and, at most "
        "5 of them, 10 on Azure, to connect); a hung store fails the request, which is "
        "retried under the retry options",
    )


@contextlib.contextmanager
def _translate(location: str) -> Iterator[None]:
    """Map OS errors to quixsinks destination errors (one boundary for local disk)."""
    try:
        yield
    except FileNotFoundError as exc:
        raise DestinationNotFoundError(
            f"{location}: no such file or directory", location=location
        ) from exc
    except PermissionError as exc:
        raise DestinationAccessDeniedError(
            f"{location}: permission denied", location=location
        ) from exc
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise DestinationError(f"{location}: {reason}", location=location) from exc


class LocalDestination(Destination):
    """A directory on a local (or shared, mounted) filesystem.

    On a cluster the directory must be on storage that the driver and every executor
    see at the same path (NFS, a FUSE mount...), as for Spark's own file writers.

    Args:
        root: the directory. It is created if missing, but its parent must exist, so a
            mistyped parent path is an error instead of a new directory tree.
    """

    supports_append = True

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))

    def __repr__(self) -> str:
        return f"LocalDestination({self.root!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalDestination) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    @property
    def url(self) -> str:
        return self.root

    def path(self, key: str) -> str:
        """The absolute path of ``key``; keys cannot climb out of the root."""
        parts = [p for p in key.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise DestinationError(f"invalid key {key!r}", location=self.root)
        return os.path.join(self.root, *parts)

    def check(self) -> None:
        if os.path.isdir(self.root):
            target = self.root
        else:
            parent = os.path.dirname(self.root)
            if not os.path.isdir(parent):
                raise DestinationNotFoundError(
                    f"{self.root}: the parent directory {parent} does not exist; "
                    "create it first (quixsinks creates only the last level)",
                    location=self.root,
                )
            if os.path.exists(self.root):
                raise DestinationError(
                    f"{self.root} exists and is not a directory", location=self.root
                )
            target = parent
        if not os.access(target, os.W_OK | os.X_OK):
            raise DestinationAccessDeniedError(
                f"{target}: this user may not write here", location=target
            )
        with _translate(self.root):
            os.makedirs(self.root, exist_ok=True)

    def _write(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def write_bytes(self, key: str, data: bytes) -> None:
        path = self.path(key)
        with _translate(path):
            self._write(path, data)

    def write_with(self, key: str, produce: Callable[[BinaryIO], None]) -> int:
        path = self.path(key)
        with _translate(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                produce(f)
                f.flush()
                os.fsync(f.fileno())
                return f.tell()

    def read_bytes(self, key: str) -> bytes:
        path = self.path(key)
        with _translate(path), open(path, "rb") as f:
            return f.read()

    def exists(self, key: str) -> bool:
        return os.path.exists(self.path(key))

    def modified(self, key: str) -> float | None:
        try:
            return os.path.getmtime(self.path(key))
        except FileNotFoundError:
            return None

    def list(self, prefix: str = "") -> list[str]:
        base = self.path(prefix) if prefix else self.root
        if not os.path.isdir(base):
            return []
        keys = []
        with _translate(base):
            for folder, _dirs, files in os.walk(base):
                rel = os.path.relpath(folder, self.root)
                for name in files:
                    keys.append(name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}")
        return sorted(keys)

    def delete(self, keys: Iterable[str]) -> None:
        folders = set()
        for key in keys:
            path = self.path(key)
            with _translate(path), contextlib.suppress(FileNotFoundError):
                os.remove(path)
            folders.add(os.path.dirname(path))
        for folder in sorted(folders, key=len, reverse=True):
            self._prune_empty(folder)

    def _prune_empty(self, folder: str) -> None:
        """Remove now-empty folders up to (not including) the root."""
        while folder.startswith(self.root + os.sep):
            try:
                os.rmdir(folder)
            except OSError:
                return
            folder = os.path.dirname(folder)

    def delete_prefix(self, prefix: str) -> None:
        path = self.path(prefix)
        if os.path.isdir(path):
            with _translate(path), contextlib.suppress(FileNotFoundError):
                shutil.rmtree(path)
        self._prune_empty(os.path.dirname(path))

    def move(self, src: str, dst: str) -> None:
        _fsync_dir(self._rename(src, dst))

    def move_many(self, moves: Sequence[Move]) -> builtins.list[Move]:
        """The renames in turn (each a local metadata call: threads would only add their
        start-up), then one fsync per folder that received a file, not one per file."""
        missing: builtins.list[Move] = []
        folders: set[str] = set()
        for src, dst in moves:
            try:
                folders.add(self._rename(src, dst))
            except DestinationNotFoundError:
                if not self.exists(dst):
                    missing.append((src, dst))
                    continue
                folders.add(os.path.dirname(self.path(dst)))  # moved, maybe not yet durably
        for folder in sorted(folders):
            _fsync_dir(folder)
        return missing

    def _rename(self, src: str, dst: str) -> str:
        """Rename ``src`` to ``dst`` (not yet durable); the folder that holds it now."""
        source, target = self.path(src), self.path(dst)
        with _translate(source):
            for attempt in range(3):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                try:
                    os.replace(source, target)
                    break
                except FileNotFoundError:
                    # another writer's cleanup removed the (empty) target folder between
                    # the two calls: make it again; a missing source still raises
                    if attempt == 2 or not os.path.exists(source):
                        raise
        return os.path.dirname(target)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        # Write the content under a unique name, then link it into place: the link is
        # atomic and fails if the key exists, so readers never see a partial marker.
        path = self.path(key)
        temp = f"{path}.{uuid.uuid4().hex}.tmp"
        with _translate(path):
            self._write(temp, data)
            try:
                os.link(temp, path)
                _fsync_dir(os.path.dirname(path))
                return True
            except FileExistsError:
                return False
            except OSError as exc:  # filesystems without hard links
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
                    raise
                return self._create_exclusive_open(path, data)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(temp)

    @staticmethod
    def _create_exclusive_open(path: str, data: bytes) -> bool:
        """Without hard links: O_EXCL. A crash between create and write can leave the file
        empty; readers of markers treat an empty one as torn (see publish.read_marker)."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(os.path.dirname(path))
        return True


#: what fsync of a directory raises where the file system cannot sync directories
_NO_DIRECTORY_FSYNC = {errno.EINVAL, errno.EBADF, errno.ENOTSUP, errno.EOPNOTSUPP}


def _fsync_dir(folder: str) -> None:
    """Make a rename or link in ``folder`` durable (a no-op where directories cannot be
    opened or synced); an I/O error of the sync (EIO, ENOSPC...) is raised: the commit
    must not be reported durable."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _NO_DIRECTORY_FSYNC:
            raise
    finally:
        os.close(fd)


def absolute_local_path(path: str, *, option_name: str = "path") -> str:
    """``path`` with ``~`` expanded (on the driver), or OptionError if it is relative.

    A relative path would be resolved by whichever process uses it: each executor inside
    its own work directory on a cluster, and under Spark Connect inside the session's
    temporary directory on the server, which Spark deletes when the session ends. The
    data would land where nobody looks, so a relative path is refused.
    """
    from .errors import OptionError

    expanded = os.path.expanduser(path)
    if not os.path.isabs(expanded):
        raise OptionError(
            f"option {option_name!r} must be an absolute path, got {path!r}: a relative path "
            "is resolved differently by each executor and, under Spark Connect, inside a "
            f"temporary session directory; write e.g. {os.path.join('/data', path)!r}",
            option=option_name,
            value=path,
            allowed=("an absolute path", "~/...", "file:///..."),
        )
    return os.path.normpath(expanded)


def destination_for(
    path: str, storage: StorageOptions | None = None, *, option_name: str = "path"
) -> Destination:
    """The Destination a ``path`` option names: an absolute local path (``~`` expanded
    here, once, on the driver), ``file://``, ``s3://``, ``abfs[s]://``, ``az://`` or ``gs://``.
    """
    from .errors import OptionError

    scheme, sep, rest = path.partition("://")
    if not sep:
        return LocalDestination(absolute_local_path(path, option_name=option_name))
    scheme = scheme.lower()
    if scheme == "file":
        return LocalDestination(rest if rest.startswith("/") else "/" + rest)
    creds = storage or StorageOptions()
    if scheme in ("s3", "s3a"):
        from .s3 import S3Destination

        return S3Destination.from_url(
            path,
            endpoint_url=creds.endpoint_url,
            region_name=creds.region_name,
            aws_access_key_id=creds.aws_access_key_id,
            aws_secret_access_key=creds.aws_secret_access_key,
            aws_session_token=creds.aws_session_token,
            timeout=creds.storage_timeout_seconds,
        )
    if scheme in ("abfs", "abfss", "az"):
        from .azure import AzureDestination

        if scheme == "az" and rest.startswith("/") and creds.azure_container:
            path = f"az://{creds.azure_container}{rest}"  # az:///prefix: container from options
        return AzureDestination.from_url(
            path,
            connection_string=creds.azure_connection_string,
            account_key=creds.azure_account_key,
            sas_token=creds.azure_sas_token,
            timeout=creds.storage_timeout_seconds,
        )
    if scheme == "gs":
        from .gcs import GCSDestination

        return GCSDestination.from_url(
            path,
            service_account_json=creds.service_account_json,
            endpoint=creds.gcs_endpoint,
            timeout=creds.storage_timeout_seconds,
        )
    raise OptionError(
        f"option {option_name!r}: unknown URL scheme {scheme!r} in {path!r}; use an absolute "
        "local path, file://, s3://, abfs[s]://, az:// or gs://",
        option=option_name,
        value=path,
        allowed=("an absolute path", "file://", "s3://", "abfs[s]://", "az://", "gs://"),
    )
