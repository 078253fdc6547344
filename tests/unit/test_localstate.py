"""Specification of local state (quixsinks.core.localstate): directories only this user can
reach, files 0600, and a refusal that names the path, the reason and the fix.

The tests run as root: "another user" is uid 65534 (nobody), set with os.chown.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from quixsinks.core.clients import MachineSlots
from quixsinks.core.errors import LocalStateError
from quixsinks.core.localstate import (
    default_state_directory,
    open_private_file,
    private_directory,
    read_private_file,
    state_root,
    write_private_file,
)

OTHER_UID = 65534


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private temp folder that also stands in for the system's (``<tmp>``)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.fixture
def zero_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_a_missing_directory_is_created_private(tmp: Path, zero_umask: None) -> None:
    made = private_directory(tmp / "a" / "b" / "state")
    assert made == tmp / "a" / "b" / "state"
    assert [mode(p) for p in (tmp / "a", tmp / "a" / "b", made)] == [0o700] * 3


def test_an_existing_private_directory_is_used(tmp: Path) -> None:
    (tmp / "state").mkdir(mode=0o700)
    assert private_directory(tmp / "state") == tmp / "state"


def test_the_default_state_directory_is_per_user(tmp: Path) -> None:
    assert state_root() == tmp / f"quixsinks-{os.geteuid()}"
    made = default_state_directory("silence")
    assert made == state_root() / "silence"
    assert (mode(state_root()), mode(made)) == (0o700, 0o700)


def test_a_symlinked_directory_is_refused(tmp: Path) -> None:
    hostile = tmp / "hostile"
    hostile.mkdir(mode=0o777)
    (tmp / "state").symlink_to(hostile)
    with pytest.raises(LocalStateError) as caught:
        private_directory(tmp / "state", remedy="set the option stream_timeout_dir")
    error = caught.value
    assert error.path == str(tmp / "state")
    assert "symbolic link" in error.reason
    assert f"remove {tmp / 'state'}" in error.message
    assert "stream_timeout_dir" in error.message


def test_a_world_writable_directory_is_refused(tmp: Path) -> None:
    (tmp / "state").mkdir()
    os.chmod(tmp / "state", 0o777)
    with pytest.raises(LocalStateError, match=r"mode is 0777: group or others"):
        private_directory(tmp / "state")


def test_a_group_readable_directory_is_refused(tmp: Path) -> None:
    (tmp / "state").mkdir()
    os.chmod(tmp / "state", 0o750)
    with pytest.raises(LocalStateError, match="0750"):
        private_directory(tmp / "state")


def test_a_directory_of_another_user_is_refused(tmp: Path) -> None:
    (tmp / "state").mkdir(mode=0o700)
    os.chown(tmp / "state", OTHER_UID, OTHER_UID)
    with pytest.raises(LocalStateError, match=f"owned by uid {OTHER_UID}, not by this user"):
        private_directory(tmp / "state")


def test_a_file_in_place_of_the_directory_is_refused(tmp: Path) -> None:
    (tmp / "state").write_text("")
    with pytest.raises(LocalStateError, match="not a directory"):
        private_directory(tmp / "state")


def test_a_parent_others_can_write_without_the_sticky_bit_is_refused(tmp: Path) -> None:
    (tmp / "shared").mkdir()
    os.chmod(tmp / "shared", 0o777)
    with pytest.raises(LocalStateError, match=r"parent .*shared is writable by group or others"):
        private_directory(tmp / "shared" / "state")
    os.chmod(tmp / "shared", 0o1777)  # like /tmp: nobody else can rename our directory
    assert mode(private_directory(tmp / "shared" / "state")) == 0o700


def test_a_parent_of_another_user_is_refused(tmp: Path) -> None:
    (tmp / "theirs").mkdir(mode=0o755)
    os.chown(tmp / "theirs", OTHER_UID, OTHER_UID)
    with pytest.raises(LocalStateError, match=f"parent .*theirs is owned by uid {OTHER_UID}"):
        private_directory(tmp / "theirs" / "state")


def test_a_pre_created_default_state_root_is_refused(tmp: Path) -> None:
    """Another local user creates <tmp>/quixsinks-<uid> first: refused, and the message
    says how to get out (remove it, or another TMPDIR)."""
    root = state_root()
    root.mkdir(mode=0o777)
    os.chown(root, OTHER_UID, OTHER_UID)
    with pytest.raises(LocalStateError) as caught:
        default_state_directory("silence")
    assert caught.value.path == str(root)
    assert "TMPDIR" in caught.value.message
    assert not (root / "silence").exists()


def test_files_are_written_0600_and_replaced_atomically(tmp: Path, zero_umask: None) -> None:
    directory = private_directory(tmp / "state")
    write_private_file(directory / "f.json", b"one")
    write_private_file(directory / "f.json", b"two")
    assert mode(directory / "f.json") == 0o600
    assert read_private_file(directory / "f.json") == b"two"
    assert sorted(p.name for p in directory.iterdir()) == ["f.json"]


def test_a_symlinked_file_is_never_followed(tmp: Path) -> None:
    directory = private_directory(tmp / "state")
    (tmp / "elsewhere").write_text("secret")
    (directory / "f.json").symlink_to(tmp / "elsewhere")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        read_private_file(directory / "f.json")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        open_private_file(directory / "f.json", os.O_RDWR | os.O_CREAT)
    write_private_file(directory / "f.json", b"mine")  # replaces the link, not its target
    assert (tmp / "elsewhere").read_text() == "secret"
    assert not (directory / "f.json").is_symlink()


def test_a_file_of_another_user_is_refused(tmp: Path) -> None:
    directory = private_directory(tmp / "state")
    (directory / "f.json").write_text("{}")
    os.chown(directory / "f.json", OTHER_UID, OTHER_UID)
    with pytest.raises(LocalStateError, match=f"owned by uid {OTHER_UID}"):
        read_private_file(directory / "f.json")


def test_machine_slots_lock_files_are_private(tmp: Path, zero_umask: None) -> None:
    slots = MachineSlots("pg", "db:5432", 1)
    with slots.held():
        folder = Path(slots.folder)
        assert folder.parent == state_root()
        assert mode(folder) == 0o700
        assert mode(folder / "0.lock") == 0o600


def test_machine_slots_refuse_a_hostile_lock_folder(tmp: Path) -> None:
    slots = MachineSlots("pg", "db:5432", 1)
    hostile = tmp / "hostile"
    hostile.mkdir(mode=0o777)
    private_directory(state_root())
    Path(slots.folder).symlink_to(hostile)
    with pytest.raises(LocalStateError, match="symbolic link"):
        slots.acquire(timeout=0)
    assert list(hostile.iterdir()) == []
