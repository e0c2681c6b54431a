"""Reading files we did not write, and writing files so that nothing is ever half-written.

Reading: only regular files are opened (a FIFO would block forever, ``/dev/zero`` never ends),
up to a size limit; :func:`read_regular` opens without blocking and checks the opened file
itself, so a path cannot be swapped between the check and the read. Refusals are
:class:`RefusedFile` (path, reason); callers turn them into their own error types.

Writing: :func:`atomic_target` writes a temporary file in the target's folder, named
``.<name>.tmp-<host>-<pid>-<n>``; on success it is flushed, fsynced and renamed onto the target,
on failure (an exception, a full disk) it is removed and the target keeps its previous
content. A process killed outright leaves only its temporary file, which
:func:`remove_stale_temp_files` deletes when the next run or extraction starts in that folder
(only files of our naming whose process, on this host, no longer runs).

Errors of the operating system are described for users by :func:`describe_os_error` ("no
space left on <folder>"). :class:`FolderLock` keeps two processes out of one run folder.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import itertools
import json
import logging
import os
import re
import shutil
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Iterator

from dmlviewer.core.limits import format_bytes

log = logging.getLogger(__name__)

_sequence = itertools.count()


class RefusedFile(Exception):
    """A file that is not read: not a regular file, too large, or unreadable."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


# --------------------------------------------------------------------------------- reading


def _mode_problem(st: os.stat_result, max_bytes: int | None) -> str | None:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        if max_bytes is not None and st.st_size > max_bytes:
            return f"file too large ({format_bytes(st.st_size)}; the limit is {format_bytes(max_bytes)})"
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "is a named pipe (FIFO), not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    return "is not a regular file"


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError) or exc.errno == errno.ENOTDIR:
        return "file not found"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return f"cannot read ({exc.strerror or exc})"


def file_problem(path: str | os.PathLike, max_bytes: int | None = None) -> str | None:
    """Why ``path`` cannot be read as a regular file of at most ``max_bytes`` (following
    symbolic links), or ``None`` when it can. For files handed to libraries that open them
    by name (HDF5, torch); :func:`read_regular` is safer where we read the bytes ourselves."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:  # ValueError: embedded NUL byte
        return _os_reason(exc) if isinstance(exc, OSError) else "invalid file name"
    return _mode_problem(st, max_bytes)


def check_regular(path: str | os.PathLike, max_bytes: int | None = None) -> None:
    """:class:`RefusedFile` unless :func:`file_problem` finds nothing; a missing file is
    ``FileNotFoundError``."""
    problem = file_problem(path, max_bytes)
    if problem == "file not found":
        raise FileNotFoundError(errno.ENOENT, "file not found", str(path))
    if problem:
        raise RefusedFile(path, problem)


def read_regular(path: str | os.PathLike, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; :class:`RefusedFile` otherwise
    (``reason`` says why: missing, a folder, a FIFO, a device, too large, unreadable)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise RefusedFile(path, "is a folder, not a file") from None
    except (OSError, ValueError) as exc:
        raise RefusedFile(path, _os_reason(exc) if isinstance(exc, OSError) else "invalid file name") from None
    try:
        st = os.fstat(fd)
        problem = _mode_problem(st, max_bytes)
        if problem:
            raise RefusedFile(path, problem)
        limit = st.st_size if max_bytes is None else max_bytes
        chunks, total = [], 0
        while True:  # read to the end, but never past the limit (the file may grow meanwhile)
            chunk = os.read(fd, min(1 << 24, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if max_bytes is not None and total > max_bytes:
                raise RefusedFile(path, f"file too large (more than {format_bytes(max_bytes)})")
        return b"".join(chunks)
    except OSError as exc:
        raise RefusedFile(path, _os_reason(exc)) from None
    finally:
        os.close(fd)


def sniff(data: bytes) -> str:
    """What the first bytes of a file look like, in words, for messages about a file that is
    not what was asked for (never its content)."""
    if not data:
        return "an empty file"
    signatures = (
        (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
        (b"\x89PNG", "a PNG image"),
        (b"\xff\xd8\xff", "a JPEG image"),
        (b"GIF8", "a GIF image"),
        (b"BM", "a BMP image"),
        (b"%PDF", "a PDF document"),
        (b"\x1f\x8b", "a gzip archive"),
        (b"PK\x03\x04", "a zip archive"),
        (b"\x7fELF", "an executable program"),
        (b"\x93NUMPY", "a numpy array file (.npy)"),
    )
    for magic, name in signatures:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "a WebP image"
    if data[:1] == b"\x80" and len(data) > 1 and data[1] <= 5:
        return "a Python pickle"
    head = data[:4096]
    try:
        head.decode("utf-8")
        text = True
    except UnicodeDecodeError as exc:
        text = exc.start > len(head) - 4  # a character cut at the end of the sample
    if text and b"\x00" not in head:
        stripped = head.lstrip()
        if stripped[:1] in (b"{", b"["):
            return "a text file (JSON)"
        return "a text file"
    return "a binary file of unknown kind"


# --------------------------------------------------------------------------------- writing

_HOST = hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]
_TEMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?:(?P<host>[0-9a-f]{8})-)?(?P<pid>\d+)-\d+$")


def temp_path(target: str | os.PathLike) -> Path:
    """A temporary file name beside ``target``, of the naming :func:`remove_stale_temp_files`
    recognises (host, process id and a counter)."""
    target = Path(target)
    return target.with_name(f".{target.name}.tmp-{_HOST}-{os.getpid()}-{next(_sequence)}")


def pid_alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # cannot tell safely: keep the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_temp_files(folder: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Temporary files of our naming in ``folder`` (for target ``name`` only, when given)
    whose writer on this host no longer runs. Empty where liveness cannot be checked."""
    folder = Path(folder)
    if os.name != "posix" or not folder.is_dir():
        return []
    stale = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        m = _TEMP.match(entry.name)
        if not m or (name is not None and m.group("name") != name):
            continue
        pid = int(m.group("pid"))
        if m.group("host") not in (None, _HOST) or pid == os.getpid() or pid_alive(pid):
            continue
        stale.append(Path(entry.path))
    return stale


def remove(path: str | os.PathLike) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def remove_stale_temp_files(folder: str | os.PathLike, name: str | None = None,
                            also: str | None = None) -> list[Path]:
    """Delete :func:`stale_temp_files` (and, when given, files matching the regular
    expression ``also``: names of an older temp-file scheme that only the caller can judge
    stale, e.g. under a run-folder lock). Returns what was deleted."""
    found = stale_temp_files(folder, name)
    if also and Path(folder).is_dir():
        pattern = re.compile(also)
        with contextlib.suppress(OSError):
            found += [Path(e.path) for e in os.scandir(folder) if pattern.match(e.name) and e.is_file()]
    for path in found:
        try:
            os.unlink(path)
            log.info("removed %s left by an interrupted writer", path)
        except OSError as exc:
            log.warning("cannot remove stale temporary file %s: %s", path, exc.strerror or exc)
    return found


def fsync_file(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY if os.name == "nt" else os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename in ``folder`` durable (POSIX; a no-op elsewhere)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def commit(tmp: str | os.PathLike, target: str | os.PathLike) -> None:
    """fsync ``tmp``, rename it onto ``target`` (atomic) and fsync the folder."""
    fsync_file(tmp)
    os.replace(tmp, target)
    fsync_dir(Path(target).parent)


def output_problem(path: str | os.PathLike, what: str = "output") -> str | None:
    """Why a file cannot be written at ``path`` (as a new file or replacing a regular file), or
    ``None``: the folder must exist, the path must not be a folder, a device or a FIFO."""
    path = Path(path)
    parent = path.parent
    if not parent.exists():
        return f"{what} folder not found: {parent}"
    if not parent.is_dir():
        return f"{what} folder is not a folder: {parent}"
    if path.is_dir():
        return f"{what} {path} is a folder; give a file name"
    if path.exists() or path.is_symlink():
        try:
            st = os.stat(path)
        except OSError:
            return f"{what} {path} is a broken link"
        if not stat.S_ISREG(st.st_mode):
            return f"{what} {path} exists and is not a regular file"
    return None


@contextlib.contextmanager
def atomic_target(path: str | os.PathLike) -> Iterator[Path]:
    """``with atomic_target(path) as tmp:`` write ``tmp``; on success it replaces ``path``
    atomically, on any exception it is removed (the target keeps its previous content)."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        commit(tmp, path)
    except OSError as exc:
        remove(tmp)
        if exc.filename or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(tmp)) from exc  # say which file failed
    except BaseException:
        remove(tmp)
        raise


class GuardedWriter(io.RawIOBase):
    """An unbuffered binary file for libraries that cannot survive a failed write (HDF5 writes
    from its chunk cache when objects are freed, where an error cannot propagate, and then
    crashes). The first write error (a full disk) is recorded in :attr:`error` and every later
    write is skipped as if it succeeded; the owner checks :meth:`raise_error` after each
    operation and discards the file."""

    def __init__(self, path: str | os.PathLike, mode: str = "w+b") -> None:
        super().__init__()
        self.path = str(path)
        self._f = open(path, mode, buffering=0)  # noqa: SIM115 - closed by close()
        self.error: OSError | None = None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._f.seek(pos, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readinto(self, buffer) -> int:
        return self._f.readinto(buffer)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        if self.error is None:
            try:
                written = 0
                while written < size:  # a short write is followed by the write that says why
                    count = self._f.write(view[written:])
                    if not count:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
                    written += count
                return size
            except OSError as exc:
                self.error = exc if exc.filename else OSError(exc.errno, exc.strerror, self.path)
                self._f.seek(size - written, 1)  # past the failed write, as if it had succeeded
        self._f.seek(size, 1)
        return size

    def truncate(self, size: int | None = None) -> int:
        try:
            return self._f.truncate(size)
        except OSError as exc:
            self.error = self.error or exc
            return self.tell() if size is None else size

    def flush(self) -> None:
        pass  # unbuffered

    def close(self) -> None:
        if not self._f.closed:
            try:
                self._f.close()
            except OSError as exc:
                self.error = self.error or exc
        super().close()

    def raise_error(self) -> None:
        """Raise the recorded write error, if any."""
        if self.error is not None:
            raise self.error


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    with atomic_target(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


# --------------------------------------------------------------------------------- errors


_ERRNO_MESSAGES = {errno.EISDIR: "{} is a folder, not a file", errno.ENOTDIR: "{}: a part of this path is not a folder",
                   errno.ENOENT: "file not found: {}", errno.EEXIST: "{} already exists",
                   errno.EFBIG: "{}: file too large for this file system"}


def describe_os_error(exc: OSError, path: str | os.PathLike | None = None) -> str:
    """One line for users: what failed and where (the folder for a full disk). ``path``
    names the file meant when the error does not (or names only a temporary file)."""
    name = str(path) if path is not None else (exc.filename or "")
    shown = name
    if exc.filename and _TEMP.match(Path(exc.filename).name):
        shown = str(Path(exc.filename).parent / _TEMP.match(Path(exc.filename).name).group("name"))
        name = name or shown
    folder = str(Path(shown).parent) if shown else "the output folder"
    code = exc.errno
    if code == errno.ENOSPC:
        return f"no space left on {folder}" + (f" (writing {shown})" if shown else "")
    if code == getattr(errno, "EDQUOT", -1):
        return f"disk quota exceeded on {folder}"
    if code == errno.EROFS:
        return f"cannot write {shown or folder}: read-only file system"
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied: {shown}" if shown else "permission denied"
    if code == errno.EIO:
        return f"input/output error on {shown or folder} (disk or network file system failure)"
    if code in _ERRNO_MESSAGES and shown:
        return _ERRNO_MESSAGES[code].format(shown)
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{shown}: {reason}" if shown else reason


# ----------------------------------------------------------------------------------- lock


class FolderBusy(RuntimeError):
    """Another process holds the folder's lock."""


class FolderLock:
    """An exclusive lock on a folder (``<folder>/.dmlviewer.lock``), released when the
    holder ends, however it ends (the operating system drops the lock of a killed process).
    The lock file records who holds it, for the message another process gets."""

    NAME = ".dmlviewer.lock"

    def __init__(self, folder: str | os.PathLike, what: str = "folder") -> None:
        self.folder = Path(folder)
        self.what = what
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.folder / self.NAME

    def _holder(self) -> str:
        try:
            info = json.loads(read_regular(self.path, 1 << 16).decode("utf-8") or "{}")
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info.get("since", 0))))
            return f"process {int(info['pid'])} on {str(info.get('host'))[:64]} since {since}"
        except Exception:  # noqa: BLE001 - an unreadable record still means "busy"
            return "another process"

    def acquire(self) -> "FolderLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            _lock_fd(fd)
        except OSError:
            os.close(fd)
            raise FolderBusy(f"{self.folder} is in use by {self._holder()} ({self.what}); "
                             "wait for it to end or choose another folder") from None
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                             "command": " ".join(sys.argv[:8])[:300]})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(), 0) if hasattr(os, "pwrite") else os.write(fd, record.encode())
        except OSError:
            pass  # the lock holds even when the record cannot be written (full disk)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the lock
            self._fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _lock_fd(fd: int) -> None:
    if os.name == "nt":  # pragma: no cover - Windows
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


@contextlib.contextmanager
def new_folder(out: str | os.PathLike) -> Iterator[Path]:
    """Write a whole folder atomically: yields a sibling temporary folder to fill, renamed to
    ``out`` when the block ends, removed when it raises (an interrupted run leaves no half
    folder). ``out`` must not exist or be an empty folder (``FileExistsError`` otherwise)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"output folder exists and is not empty: {out}")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        yield tmp
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
