"""core.files: reading only regular files, atomic writes, stale temporary files, the folder lock,
errors described for users."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest

from dmlviewer.core import files
from dmlviewer.core.files import (FolderBusy, FolderLock, GuardedWriter, RefusedFile, atomic_target, describe_os_error,
                                  read_regular, remove_stale_temp_files, sniff, stale_temp_files, temp_path)


def test_read_regular_refuses_what_is_not_a_regular_file_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # opening it for reading the usual way would wait for a writer forever
    os.symlink("/dev/zero", tmp_path / "zero")  # reading it the usual way never ends
    (tmp_path / "folder").mkdir()
    (tmp_path / "big").write_bytes(b"x" * 2000)
    cases = {"fifo": "FIFO", "zero": "device", "folder": "folder", "missing": "file not found",
             "big": "file too large"}
    start = time.monotonic()
    for name, reason in cases.items():
        with pytest.raises(RefusedFile, match=reason):
            read_regular(tmp_path / name, max_bytes=1000)
    assert time.monotonic() - start < 5
    assert read_regular(tmp_path / "big") == b"x" * 2000


def test_sniff_names_kinds_never_content():
    assert sniff(b"") == "an empty file"
    assert sniff(b"secret words\n") == "a text file"
    assert sniff(b"\x89HDF\r\n\x1a\n....") == "an HDF5 file"
    assert sniff(b"\x80\x02}q\x00.") == "a Python pickle"
    assert "secret" not in sniff(b"secret words\n")


def test_atomic_target_keeps_the_previous_file_on_failure(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_target(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    with atomic_target(target) as tmp:
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_stale_temp_files_are_those_of_dead_writers_only(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = temp_path(tmp_path / "f.h5")
    mine.write_bytes(b"")
    parts = mine.name.split("-")
    parts[-2] = str(dead.pid)
    stale = tmp_path / "-".join(parts)
    stale.write_bytes(b"")
    other_host = tmp_path / f".f.h5.tmp-ffffffff-{dead.pid}-0"  # another machine's writer: not ours to judge
    other_host.write_bytes(b"")
    assert stale_temp_files(tmp_path) == [stale]
    assert remove_stale_temp_files(tmp_path) == [stale]
    assert mine.exists() and other_host.exists() and not stale.exists()


def test_folder_lock_names_the_holder_and_is_released_when_it_dies(tmp_path):
    code = ("import sys, time; from dmlviewer.core.files import FolderLock; "
            "FolderLock(sys.argv[1], 'a test').acquire(); print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FolderBusy, match=f"process {holder.pid} on"):
            FolderLock(tmp_path).acquire()
    finally:
        holder.kill()  # SIGKILL: the operating system drops its lock
        holder.wait()
    with FolderLock(tmp_path):
        with pytest.raises(FolderBusy):  # one holder at a time, also within a process
            FolderLock(tmp_path).acquire()


def test_describe_os_error_names_the_folder_and_the_meant_file(tmp_path):
    tmp = temp_path(tmp_path / "f.h5")
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert describe_os_error(full) == f"no space left on {tmp_path} (writing {tmp_path / 'f.h5'})"
    assert "read-only file system" in describe_os_error(OSError(errno.EROFS, "x", str(tmp_path / "a")))
    assert describe_os_error(OSError(errno.EISDIR, "x", str(tmp_path))) == f"{tmp_path} is a folder, not a file"


def test_guarded_writer_records_the_first_write_error_and_swallows_the_rest(tmp_path, monkeypatch):
    writer = GuardedWriter(tmp_path / "f")
    writer.write(b"abc")
    calls = []

    def failing(data):
        calls.append(len(data))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "_f", type("F", (), {"write": staticmethod(failing), "seek": writer._f.seek,
                                                       "closed": False, "close": writer._f.close})())
    assert writer.write(b"defg") == 4 and writer.write(b"hi") == 2  # the library sees success
    assert calls == [4]  # nothing is written after the first failure
    with pytest.raises(OSError) as info:
        writer.raise_error()
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "f")
    writer.close()


def test_limits_come_from_the_environment_or_an_override(monkeypatch):
    from dmlviewer.core.limits import DEFAULTS, get_limit, set_limit

    assert get_limit("max_image_pixels") == DEFAULTS["max_image_pixels"] == 178_956_970
    monkeypatch.setenv("DMLVIEWER_MAX_IMAGE_PIXELS", "1000")
    assert get_limit("max_image_pixels") == 1000
    set_limit("max_image_pixels", 5)
    try:
        assert get_limit("max_image_pixels") == 5
    finally:
        set_limit("max_image_pixels", None)
    monkeypatch.setenv("DMLVIEWER_MAX_IMAGE_PIXELS", "-3")
    with pytest.raises(ValueError, match="DMLVIEWER_MAX_IMAGE_PIXELS"):
        get_limit("max_image_pixels")
    assert files.format_bytes(3 << 30) == "3.0 GiB"
