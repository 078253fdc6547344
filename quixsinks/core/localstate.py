"""State the sinks keep on this machine's local disk, in directories only this user can reach.

Two things live on local disk: the silence spool of the ``tsdatalake`` sink (per-key
last-seen times, i.e. record keys) and :class:`~quixsinks.core.clients.MachineSlots`' lock
files. Both sit by default under one directory per user, ``<tmp>/quixsinks-<uid>``
(``<tmp>`` is Python's ``tempfile.gettempdir()``, i.e. ``TMPDIR``). A directory in a shared
place like ``/tmp`` can be created first by another local user, who then owns what is
written and read there; so before use :func:`private_directory` creates a missing
directory with mode 0700 and checks an existing one:

* it is a directory, not a symbolic link;
* it is owned by this process's effective uid;
* neither its group nor others have any access (mode ``0o077`` bits clear);
* each directory above it (symbolic links resolved) is owned by root or by this uid
  and is not writable by group or others, unless its sticky bit is set (as on ``/tmp``):
  nobody else can rename it away and put another in its place.

Any failure raises :class:`~quixsinks.core.errors.LocalStateError`, which names the path,
what is wrong and how to fix it; nothing is read or written there. Files are created with
mode 0600, never through a symbolic link (``O_NOFOLLOW``), and temporary files
create-only (``O_EXCL``): see :func:`write_private_file` and :func:`open_private_file`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import uuid
from pathlib import Path

from .errors import LocalStateError

__all__ = [
    "default_state_directory",
    "open_private_file",
    "private_directory",
    "read_private_file",
    "state_root",
    "write_private_file",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def state_root() -> Path:
    """``<tmp>/quixsinks-<uid>``: where local state goes when no option names a place."""
    return Path(tempfile.gettempdir()) / f"quixsinks-{os.geteuid()}"


def default_state_directory(name: str) -> Path:
    """The checked directory ``<state_root>/<name>`` (both created 0700 when missing)."""
    remedy = "point TMPDIR at a directory of your own"
    root = private_directory(state_root(), remedy=remedy)
    return private_directory(root / name, remedy=remedy)


def private_directory(path: str | os.PathLike[str], *, remedy: str = "") -> Path:
    """``path``, created with mode 0700 when missing, after the checks of the module doc.

    Args:
        path: the directory.
        remedy: what else fixes a refusal besides removing the directory, e.g. ``"set
            the option stream_timeout_dir to a directory of your own"``.

    Raises:
        LocalStateError: the directory (or one above it) is not safe to use.
    """
    directory = Path(os.path.abspath(os.fspath(path)))
    _check_parents(directory, remedy)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise _refuse(directory, f"it cannot be created ({exc.strerror})", remedy) from None
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise _refuse(directory, f"it cannot be examined ({exc.strerror})", remedy) from None
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(directory)
        raise _refuse(directory, f"it is a symbolic link (to {target}), not a directory", remedy)
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(directory, "it is not a directory", remedy)
    uid = os.geteuid()
    if st.st_uid != uid:
        raise _refuse(
            directory, f"it is owned by uid {st.st_uid}, not by this user ({uid})", remedy
        )
    if st.st_mode & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        raise _refuse(
            directory,
            f"its mode is {mode:04o}: group or others can reach it (expected 0700; if only "
            "you ever used it, `chmod 700` it)",
            remedy,
        )
    return directory


def _check_parents(directory: Path, remedy: str) -> None:
    """Create missing parents (0700), then refuse a directory whose parents someone else
    could rename or replace it in."""
    missing: list[Path] = []
    parent = directory.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass  # made meanwhile: checked below like the others
        except OSError as exc:
            raise _refuse(
                directory, f"its parent {folder} cannot be created ({exc.strerror})", remedy
            ) from None
    resolved = Path(os.path.realpath(directory.parent))
    uid = os.geteuid()
    for folder in (resolved, *resolved.parents):
        try:
            st = os.stat(folder)
        except OSError as exc:
            raise _refuse(
                directory, f"its parent {folder} cannot be examined ({exc.strerror})", remedy
            ) from None
        if st.st_uid not in (0, uid):
            raise _refuse(
                directory,
                f"its parent {folder} is owned by uid {st.st_uid}, who could replace it",
                remedy,
            )
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            mode = stat.S_IMODE(st.st_mode)
            raise _refuse(
                directory,
                f"its parent {folder} is writable by group or others without the sticky bit "
                f"(mode {mode:04o}): they could replace it",
                remedy,
            )


def _refuse(directory: Path, reason: str, remedy: str) -> LocalStateError:
    fix = f"remove {directory} (quixsinks recreates it, private to you)"
    if remedy:
        fix += f", or {remedy}"
    return LocalStateError(
        f"quixsinks refuses to use the local state directory {directory}: {reason}. "
        f"Another local user could read or plant files there. To fix: {fix}.",
        path=str(directory),
        reason=reason,
    )


def open_private_file(path: str | os.PathLike[str], flags: int) -> int:
    """``os.open`` of a file in a checked directory: never through a symbolic link, created
    0600, and refused (LocalStateError) unless it is a regular file owned by this uid."""
    fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LocalStateError(
                f"quixsinks refuses to use {path}: it is not a regular file; remove it",
                path=os.fspath(path),
                reason="not a regular file",
            )
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise LocalStateError(
                f"quixsinks refuses to use {path}: it is owned by uid {st.st_uid} with mode "
                f"{stat.S_IMODE(st.st_mode):04o}, not a file of this user's (uid "
                f"{os.geteuid()}) that only it may write; remove it",
                path=os.fspath(path),
                reason="foreign or writable by others",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private_file(path: str | os.PathLike[str]) -> bytes:
    """The content of a file :func:`open_private_file` accepts (FileNotFoundError if none;
    OSError ELOOP for a symbolic link)."""
    fd = open_private_file(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def write_private_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: a new 0600 temporary file (create-only)
    next to it, then a rename over it."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
