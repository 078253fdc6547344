"""One contract, every Destination: local disk, S3 (moto_server), Azure Blob (Azurite), GCS.

The commit protocol of the file sinks relies on exactly these behaviours; each backend
runs the same cases against its real (test) server.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quixsinks.core.destinations import Destination, LocalDestination
from quixsinks.core.errors import DestinationNotFoundError

KINDS = ["local", "s3", "azure", "gcs"]


def make(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, *, missing: bool = False
) -> Destination:
    """A destination of ``kind`` on a fresh bucket/container (or one that does not exist)."""
    name = f"qs-{uuid.uuid4().hex[:12]}"
    if kind == "local":
        return LocalDestination(str(tmp_path / ("missing/x" if missing else "root")))
    if kind == "s3":
        from quixsinks.core.s3 import S3Destination

        server = request.getfixturevalue("s3_server")
        if not missing:
            server.create_bucket(name)
        return S3Destination(name, "prefix/p", **server.options())
    if kind == "azure":
        from quixsinks.core.azure import AzureDestination

        server = request.getfixturevalue("azurite")
        if not missing:
            server.create_container(name)
        return AzureDestination(name, "prefix/p", **server.options())
    from quixsinks.core.gcs import GCSDestination

    server = request.getfixturevalue("gcs_server")
    if not missing:
        server.create_bucket(name)
    return GCSDestination(name, "prefix/p", **server.options())


@pytest.fixture(params=KINDS)
def dest(request: pytest.FixtureRequest, tmp_path: Path) -> Destination:
    destination = make(request.param, request, tmp_path)
    destination.check()
    return destination


def test_write_read_exists_modified(dest: Destination) -> None:
    dest.write_bytes("a/b.txt", b"hello")
    assert dest.read_bytes("a/b.txt") == b"hello"
    assert dest.exists("a/b.txt")
    assert not dest.exists("a/c.txt")
    assert dest.modified("a/b.txt") is not None
    assert dest.modified("a/c.txt") is None
    with pytest.raises(DestinationNotFoundError):
        dest.read_bytes("a/c.txt")


def test_write_with_streams_a_large_object(dest: Destination) -> None:
    chunk = bytes(range(256)) * 4096  # 1 MiB
    size = dest.write_with("big.bin", lambda out: [out.write(chunk) for _ in range(12)])
    assert size == 12 * len(chunk)
    assert dest.read_bytes("big.bin") == chunk * 12


def test_create_exclusive_has_one_winner_among_concurrent_creators(dest: Destination) -> None:
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def create(i: int) -> None:
        barrier.wait()
        results.append(dest.create_exclusive("marker.json", f'{{"who": {i}}}'.encode()))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]
    assert dest.read_bytes("marker.json").startswith(b'{"who": ')


def test_move_replaces_the_target_and_removes_the_source(dest: Destination) -> None:
    dest.write_bytes("s/x", b"new")
    dest.write_bytes("d/x", b"old")
    dest.move("s/x", "d/x")
    assert dest.read_bytes("d/x") == b"new"
    assert not dest.exists("s/x")
    with pytest.raises(DestinationNotFoundError):
        dest.move("s/x", "d/y")


def test_move_many_moves_each_and_reports_only_what_is_lost(dest: Destination) -> None:
    """A commit's moves (side by side on object stores): one done by an earlier attempt
    is no error; one in neither place comes back."""
    for name in ("a", "b", "c"):
        dest.write_bytes(f"s/{name}", name.encode())
    dest.write_bytes("d/done", b"done")
    moves = [("s/a", "d/a"), ("s/b", "d/x/b"), ("s/c", "d/c"), ("s/done", "d/done")]
    assert dest.move_many([*moves, ("s/lost", "d/lost")]) == [("s/lost", "d/lost")]
    assert dest.list("d") == ["d/a", "d/c", "d/done", "d/x/b"]
    assert [dest.read_bytes(k) for k in ("d/a", "d/x/b", "d/c")] == [b"a", b"b", b"c"]
    assert dest.list("s") == []


def test_list_is_recursive_sorted_and_paginated(dest: Destination) -> None:
    keys = [f"many/{i:05d}" for i in range(1105)]
    _parallel(lambda key: dest.write_bytes(key, b""), keys)
    dest.write_bytes("many2/other", b"")
    dest.write_bytes("many/sub/deep", b"")
    listed = dest.list("many")
    assert listed == sorted([*keys, "many/sub/deep"])
    assert dest.list("nothing-here") == []


def test_delete_ignores_missing_keys_and_delete_prefix_clears(dest: Destination) -> None:
    dest.write_bytes("k/1", b"")
    dest.write_bytes("k/2", b"")
    dest.delete(["k/1", "k/does-not-exist"])
    assert dest.list("k") == ["k/2"]
    dest.delete_prefix("k")
    assert dest.list("k") == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_bucket_is_a_not_found_error_on_check(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with pytest.raises(DestinationNotFoundError):
        make(kind, request, tmp_path, missing=True).check()


def _parallel(fn: Callable[[str], Any], keys: list[str]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(fn, keys))
