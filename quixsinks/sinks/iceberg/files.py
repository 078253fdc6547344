"""Data files of the ``iceberg`` sink that no snapshot names: those of an attempt that lost
(a replay, an abort) and orphans of task attempts that died before their receipt reached
the driver. Every deletion spares the files the table names."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["delete_files", "referenced", "sweep"]

logger = logging.getLogger("quixsinks.sinks.iceberg")


def sweep(io: Any, location: str, load_table: Callable[[], Any], cutoff: float) -> list[str]:
    """Delete the ``.parquet`` files under ``<location>/data`` older than ``cutoff`` (epoch
    seconds) that no snapshot of the table names; the paths deleted."""
    from pyarrow import fs as pafs

    if not hasattr(io, "fs_by_scheme"):
        return []  # a FileIO without a listing (not pyarrow's)
    scheme, netloc, path = io.parse_location(f"{location.rstrip('/')}/data")
    filesystem = io.fs_by_scheme(scheme, netloc)
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(path, recursive=True))
    except FileNotFoundError:
        return []
    old = {
        info.path
        for info in infos
        if info.type == pafs.FileType.File
        and info.path.endswith(".parquet")
        and info.mtime is not None
        and info.mtime.timestamp() < cutoff
    }
    if not old:
        return []
    names = {io.parse_location(path)[2] for path in referenced(load_table())}
    orphans = sorted(old - names)
    for orphan in orphans:
        filesystem.delete_file(orphan)
    return orphans


def delete_files(io: Any, files: list[Any], keep: set[str] | None = None) -> None:
    """Delete data files (``DataFile`` entries) but those named in ``keep``; best effort."""
    for data_file in files:
        if keep is not None and data_file.file_path in keep:
            continue
        try:
            io.delete(data_file.file_path)
        except FileNotFoundError:
            pass
        except Exception as exc:
            logger.warning("iceberg: could not delete %s: %s", data_file.file_path, exc)


def referenced(table: Any) -> set[str]:
    """The data files any snapshot of the table names (never deleted by a cleanup: a file
    another writer has since rewritten is still read by time travel and by readers of an
    older snapshot). Each manifest is read once, however many snapshots list it."""
    paths: set[str] = set()
    seen: set[str] = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                paths.add(entry.data_file.file_path)
    return paths
