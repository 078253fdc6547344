"""Specification of LocalDestination (quixsinks.core.destinations) on a real directory."""

from __future__ import annotations

import errno
import os
import pickle
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quixsinks.core.destinations import LocalDestination
from quixsinks.core.errors import (
    DestinationAccessDeniedError,
    DestinationError,
    DestinationNotFoundError,
)


@pytest.fixture
def dest(tmp_path: Path) -> LocalDestination:
    destination = LocalDestination(str(tmp_path / "out"))
    destination.check()
    return destination


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("this user (root?) ignores directory permissions")
        yield folder
    finally:
        folder.chmod(stat.S_IRWXU)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- check


def test_check_creates_the_last_level(tmp_path: Path) -> None:
    LocalDestination(str(tmp_path / "new")).check()
    assert (tmp_path / "new").is_dir()


def test_check_accepts_an_existing_directory(tmp_path: Path) -> None:
    LocalDestination(str(tmp_path)).check()


def test_check_refuses_a_missing_parent(tmp_path: Path) -> None:
    root = tmp_path / "missing" / "out"
    with pytest.raises(DestinationNotFoundError) as info:
        LocalDestination(str(root)).check()
    assert info.value.location == str(root)
    assert not (tmp_path / "missing").exists()


def test_check_refuses_a_root_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(DestinationError) as info:
        LocalDestination(str(tmp_path / "file")).check()
    assert type(info.value) is DestinationError
    assert info.value.location == str(tmp_path / "file")


def test_check_refuses_a_read_only_directory(read_only_dir: Path) -> None:
    with pytest.raises(DestinationAccessDeniedError):
        LocalDestination(str(read_only_dir)).check()


def test_check_refuses_to_create_in_a_read_only_parent(read_only_dir: Path) -> None:
    with pytest.raises(DestinationAccessDeniedError):
        LocalDestination(str(read_only_dir / "out")).check()


def test_check_refuses_a_directory_the_os_says_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # runs as root too, where chmod cannot make a directory read-only
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(DestinationAccessDeniedError) as info:
        LocalDestination(str(tmp_path)).check()
    assert info.value.location == str(tmp_path)


def test_root_is_absolute_with_home_expanded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert LocalDestination("~/data/../out").root == str(tmp_path / "out")


# ----------------------------------------------------------------------------- bytes


def test_written_bytes_read_back(dest: LocalDestination) -> None:
    dest.write_bytes("a/b/c.bin", b"\x00data\xff")
    assert dest.read_bytes("a/b/c.bin") == b"\x00data\xff"


def test_write_replaces_a_key(dest: LocalDestination) -> None:
    dest.write_bytes("k", b"first, longer")
    dest.write_bytes("k", b"second")
    assert dest.read_bytes("k") == b"second"


def test_key_with_a_leading_slash_stays_under_the_root(dest: LocalDestination) -> None:
    dest.write_bytes("/x.bin", b"1")
    assert os.path.isfile(os.path.join(dest.root, "x.bin"))


def test_reading_a_missing_key_is_not_found(dest: LocalDestination) -> None:
    with pytest.raises(DestinationNotFoundError) as info:
        dest.read_bytes("nope/x")
    assert info.value.location == os.path.join(dest.root, "nope", "x")


def test_exists(dest: LocalDestination) -> None:
    dest.write_bytes("a/x", b"")
    assert (dest.exists("a/x"), dest.exists("a/y")) == (True, False)


@pytest.mark.parametrize("key", ["../escape", "a/../../escape", "a/..", "./x", "a/./b"])
@pytest.mark.parametrize(
    "use",
    [
        lambda d, k: d.write_bytes(k, b"x"),
        lambda d, k: d.read_bytes(k),
        lambda d, k: d.exists(k),
        lambda d, k: d.delete([k]),
        lambda d, k: d.move("safe", k),
        lambda d, k: d.create_exclusive(k, b"x"),
        lambda d, k: d.list(k),
    ],
    ids=["write", "read", "exists", "delete", "move", "create_exclusive", "list"],
)
def test_keys_climbing_out_of_the_root_are_refused(
    dest: LocalDestination, key: str, use: Callable[[LocalDestination, str], object]
) -> None:
    dest.write_bytes("safe", b"x")
    with pytest.raises(DestinationError):
        use(dest, key)
    assert files_under(Path(dest.root).parent) == ["out/safe"]


# ----------------------------------------------------------------------------- list


def test_list_is_recursive_sorted_and_relative_to_the_root(dest: LocalDestination) -> None:
    for key in ["b/2", "a", "b/1", "c/d/e", "_state/x"]:
        dest.write_bytes(key, b"")
    assert dest.list() == ["_state/x", "a", "b/1", "b/2", "c/d/e"]


def test_list_under_a_prefix_gives_full_keys(dest: LocalDestination) -> None:
    for key in ["b/2", "b/1", "bb/3", "c"]:
        dest.write_bytes(key, b"")
    assert dest.list("b") == ["b/1", "b/2"]


def test_list_ignores_empty_folders(dest: LocalDestination) -> None:
    os.makedirs(os.path.join(dest.root, "empty", "deeper"))
    assert dest.list() == []


def test_list_of_a_missing_prefix_is_empty(dest: LocalDestination) -> None:
    assert dest.list("nothing/here") == []


# ----------------------------------------------------------------------------- delete


def test_delete_removes_keys(dest: LocalDestination) -> None:
    dest.write_bytes("a", b"")
    dest.write_bytes("b", b"")
    dest.delete(["a"])
    assert dest.list() == ["b"]


def test_delete_ignores_missing_keys(dest: LocalDestination) -> None:
    dest.delete(["never/was", "nor/this"])


def test_delete_prunes_emptied_folders_but_not_the_root(dest: LocalDestination) -> None:
    dest.write_bytes("a/b/c/x", b"")
    dest.write_bytes("a/keep", b"")
    dest.delete(["a/b/c/x"])
    assert not os.path.exists(os.path.join(dest.root, "a", "b"))
    assert dest.list() == ["a/keep"]
    dest.delete(["a/keep"])
    assert os.listdir(dest.root) == []


def test_delete_prefix_removes_a_subtree(dest: LocalDestination) -> None:
    for key in ["s/1/a", "s/1/b", "s/2/c", "t"]:
        dest.write_bytes(key, b"")
    dest.delete_prefix("s/1")
    assert dest.list() == ["s/2/c", "t"]


def test_delete_prefix_prunes_emptied_parents(dest: LocalDestination) -> None:
    dest.write_bytes("s/1/a", b"")
    dest.write_bytes("t", b"")
    dest.delete_prefix("s/1")
    assert sorted(os.listdir(dest.root)) == ["t"]


def test_delete_prefix_of_a_missing_prefix_does_nothing(dest: LocalDestination) -> None:
    dest.write_bytes("t", b"")
    dest.delete_prefix("nothing")
    assert dest.list() == ["t"]


# ----------------------------------------------------------------------------- move


def test_move_renames_into_new_folders(dest: LocalDestination) -> None:
    dest.write_bytes("staging/x", b"data")
    dest.move("staging/x", "final/deep/x")
    assert (dest.read_bytes("final/deep/x"), dest.exists("staging/x")) == (b"data", False)


def test_move_replaces_the_target(dest: LocalDestination) -> None:
    dest.write_bytes("src", b"new")
    dest.write_bytes("dst", b"old")
    dest.move("src", "dst")
    assert dest.list() == ["dst"]
    assert dest.read_bytes("dst") == b"new"


def test_move_of_a_missing_source_is_not_found(dest: LocalDestination) -> None:
    with pytest.raises(DestinationNotFoundError):
        dest.move("nope", "dst")


def test_move_many_moves_in_turn_and_syncs_each_folder_once(
    dest: LocalDestination, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit's moves: the ones already done are no error, a lost one is reported, and
    every folder that received a file (also one moved earlier) is made durable once."""
    import quixsinks.core.destinations as destinations

    synced: list[str] = []
    monkeypatch.setattr(destinations, "_fsync_dir", synced.append)
    for name in ("a", "b", "c"):
        dest.write_bytes(f"staging/{name}", name.encode())
    dest.write_bytes("final/hour=1/d", b"d")  # moved by an earlier attempt
    missing = dest.move_many(
        [
            ("staging/a", "final/hour=0/a"),
            ("staging/b", "final/hour=0/b"),
            ("staging/c", "final/hour=1/c"),
            ("staging/d", "final/hour=1/d"),
            ("staging/e", "final/hour=1/e"),  # lost: in neither place
        ]
    )
    assert missing == [("staging/e", "final/hour=1/e")]
    assert dest.list("final") == [
        "final/hour=0/a",
        "final/hour=0/b",
        "final/hour=1/c",
        "final/hour=1/d",
    ]
    assert dest.list("staging") == []
    assert synced == [os.path.join(dest.root, "final", f"hour={h}") for h in (0, 1)]


# ----------------------------------------------------------------------------- create_exclusive


def test_create_exclusive_creates_once(dest: LocalDestination) -> None:
    assert dest.create_exclusive("ledger/1.json", b"first") is True
    assert dest.create_exclusive("ledger/1.json", b"second") is False
    assert dest.read_bytes("ledger/1.json") == b"first"


def test_create_exclusive_leaves_no_temporary_files(dest: LocalDestination) -> None:
    dest.create_exclusive("ledger/1.json", b"first")
    dest.create_exclusive("ledger/1.json", b"second")
    assert dest.list() == ["ledger/1.json"]


def test_create_exclusive_has_one_winner_among_threads(dest: LocalDestination) -> None:
    barrier = threading.Barrier(8)
    results: list[bool] = []

    def contend(n: int) -> None:
        barrier.wait()
        results.append(dest.create_exclusive("marker", str(n).encode()))

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 7 + [True]
    assert dest.list() == ["marker"]


# ----------------------------------------------------------------------------- identity


def test_destination_pickles_and_works_after(dest: LocalDestination) -> None:
    dest.write_bytes("a", b"1")
    copy = pickle.loads(pickle.dumps(dest))
    assert copy == dest
    assert hash(copy) == hash(dest)
    copy.write_bytes("b", b"2")
    assert (copy.read_bytes("a"), dest.read_bytes("b")) == (b"1", b"2")


def test_url_is_the_root(dest: LocalDestination) -> None:
    assert dest.url == dest.root


def test_local_destination_supports_append() -> None:
    assert LocalDestination.supports_append is True


# ----------------------------------------------------------------------------- path options


@pytest.mark.parametrize("relative", ["out", "./out", "data/out"])
def test_a_relative_path_is_refused_before_anything_runs(relative: str) -> None:
    from quixsinks.core.destinations import destination_for
    from quixsinks.core.errors import OptionError

    with pytest.raises(OptionError, match="must be an absolute path") as raised:
        destination_for(relative)
    assert raised.value.option == "path"


def test_home_and_file_urls_resolve_to_local_directories(tmp_path: Path) -> None:
    from quixsinks.core.destinations import destination_for

    assert destination_for("~/x").url == os.path.join(os.path.expanduser("~"), "x")
    assert destination_for(f"file://{tmp_path}/x").url == f"{tmp_path}/x"


def test_an_unknown_scheme_names_what_is_allowed() -> None:
    from quixsinks.core.destinations import destination_for
    from quixsinks.core.errors import OptionError

    with pytest.raises(OptionError, match="unknown URL scheme 'ftp'"):
        destination_for("ftp://host/x")


@pytest.mark.parametrize("path", ["s3://bucket/out.csv", "gs://bucket/out.csv"])
def test_csvfile_refuses_an_object_store(path: str) -> None:
    from quixsinks.core.errors import OptionError
    from quixsinks.sinks.csvfile import CSVFileOptions, CSVFileSink

    with pytest.raises(OptionError, match="use the 'file' sink"):
        CSVFileSink(CSVFileOptions.from_options({"path": path}))


def test_csvfile_refuses_a_relative_path() -> None:
    from quixsinks.core.errors import OptionError
    from quixsinks.sinks.csvfile import CSVFileOptions, CSVFileSink

    with pytest.raises(OptionError, match="absolute"):
        CSVFileSink(CSVFileOptions.from_options({"path": "out.csv"}))


def test_storage_timeout_reaches_every_object_store_client() -> None:
    from quixsinks.core.destinations import StorageOptions, destination_for

    opts = StorageOptions.from_options(
        {
            "storage_timeout_seconds": "7",
            "aws_access_key_id": "AKIA",
            "aws_secret_access_key": "s3cr3t",
            "region_name": "eu-west-1",
            "azure_connection_string": "DefaultEndpointsProtocol=http;AccountName=a;"
            "AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:9/a;",
        }
    )
    s3 = destination_for("s3://bucket/p", opts)
    config = s3._make_client().meta.config  # no request is sent yet
    assert (config.connect_timeout, config.read_timeout) == (5.0, 7.0)
    azure = destination_for("az://container/p", opts)
    transport = azure._new_client()._config.transport
    assert (transport.connection_config.timeout, transport.connection_config.read_timeout) == (
        7.0,
        7.0,
    )
    gcs = destination_for("gs://bucket/p", opts)
    assert gcs._timeout == (5.0, 7.0)
    for dest in (s3, azure, gcs):
        assert pickle.loads(pickle.dumps(dest)).timeout == 7.0


@pytest.mark.parametrize("value", ["0", "-5", "inf", "nan"])
def test_storage_timeout_must_be_a_finite_number_above_zero(value: str) -> None:
    from quixsinks.core.destinations import StorageOptions
    from quixsinks.core.errors import OptionError

    with pytest.raises(OptionError) as info:
        StorageOptions.from_options({"storage_timeout_seconds": value})
    assert info.value.option == "storage_timeout_seconds"


@pytest.mark.parametrize(
    ("error", "raised"), [(errno.EINVAL, False), (errno.EIO, True), (errno.ENOSPC, True)]
)
def test_a_folder_sync_that_fails_with_an_io_error_is_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int, raised: bool
) -> None:
    """A file system that cannot sync folders (EINVAL) is no error; an I/O error is: the
    rename may not be durable, so the commit must not be reported done."""
    import quixsinks.core.destinations as destinations

    def failing(fd: int) -> None:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(os, "fsync", failing)
    if raised:
        with pytest.raises(OSError, match=os.strerror(error)) as caught:
            destinations._fsync_dir(str(tmp_path))
        assert caught.value.errno == error
    else:
        destinations._fsync_dir(str(tmp_path))


def test_a_target_folder_another_writer_prunes_mid_move_is_made_again(
    dest: LocalDestination, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's cleanup removes the empty target folder between the move's
    makedirs and its rename: the move makes it again instead of reporting the file lost."""
    real = os.makedirs
    pruned: list[str] = []

    def makedirs_then_pruned(path: str, *args: object, **kwargs: object) -> None:
        real(path, *args, **kwargs)  # type: ignore[arg-type]
        if path.endswith("hour=1") and not pruned:
            pruned.append(path)
            os.rmdir(path)

    dest.write_bytes("staging/x", b"x")
    monkeypatch.setattr(os, "makedirs", makedirs_then_pruned)
    assert dest.move_many([("staging/x", "table/hour=1/x")]) == []
    assert pruned
    assert dest.read_bytes("table/hour=1/x") == b"x"
