"""The HDF5 feature store: one file per extraction (schema in DESIGN.md, "HDF5 feature store").

Datasets: ``embeddings`` (N x D float32, L2-normalized), ``embeddings_raw`` (N x D, before
normalization), ``labels`` (N int64), ``paths`` (N utf-8, relative to the dataset root),
``split`` (N utf-8), ``boxes`` (N x 4 float32 x, y, w, h, NaN when unknown; always written,
NaN-filled when not given), optional ``groups`` (N x P x Dg). Root attributes:
``format_version`` (:data:`FORMAT_VERSION`), ``checkpoint_sha256``, ``model_config`` (JSON
text), ``dataset_root``, ``dataset_format``, ``created`` (ISO 8601, UTC), ``class_names`` (JSON
list, index = label; written by extraction, absent in older files), ``dataset_fingerprint``
(the listing's sha256 that binds the file to its dataset, ``core.data.identity``; empty or
absent in older files), ``image_decoder`` (``nvjpeg`` or ``opencv``: what decoded the JPEGs,
``core.evaluate.extract.image_decoder``; absent in older files, which OpenCV decoded) and,
after evaluation, the metrics (:func:`update_attrs`). Attributes
the caller does not give are written empty (``""``, ``model_config`` ``"{}"``), meaning
unknown. Further per-row numeric datasets (e.g.
``grad_weights`` for grad-weight transfer, seed 002) may be stored beside the schema's; they
are read into ``Features.extra``, and ``write_features(path, features.arrays, features.attrs)``
rewrites a file with everything it held.

Layout: every dataset is chunked along N with chunks of about 1 MiB (512 rows at D = 512) and
resizable, so batches are appended as they come. Float arrays are stored uncompressed:
embeddings are close to incompressible (a 120,053 x 512 float32 pair shrank 7 % with
lzf+shuffle and 14 % with gzip-1+shuffle while writing took 9x / 19x longer; numbers in the
project report), and extraction should not wait for the compressor. The small ``labels`` /
``boxes`` arrays use gzip level 1; strings are variable-length UTF-8.

Atomicity: :class:`FeatureWriter` writes ``.<name>.tmp-<host>-<pid>-<n>`` in the target's
folder (:mod:`dmlviewer.core.files`); closing it normally flushes, fsyncs and ``os.replace``-s
it onto the target (then fsyncs the folder), while an exception, :meth:`FeatureWriter.abort`
or cancellation deletes it (with ``background=True``, used by extraction, the HDF5 writes run
on a writer thread; closing waits for it, aborting stops it first). A process killed outright leaves only its temporary file, never a
half target; the next writer in that folder deletes temporary files whose process is gone
(POSIX). HDF5 writes through a :class:`~dmlviewer.core.files.GuardedWriter`, so a full disk
ends in one ``OSError`` (ENOSPC) instead of errors inside HDF5's cache (which crash it).

Files from elsewhere are checked by :mod:`.h5safety` before anything in them is read:
no external links, external storage or virtual datasets; dtypes, shapes and sizes as the
schema says; finite, normalized embeddings. :func:`update_attrs` is
atomic the same way: it copies the file to a temporary name, edits the copy and replaces the
original. Editing in place would be cheaper, but HDF5 has no journal, and a crash while it
rewrites the root object header could leave the features unreadable; a copy costs about one
second per 500 MB.

Reading (:func:`read_features`) is eager: the arrays are loaded and the file is closed before
returning, so no handle stays open (the file can be replaced at once, also on Windows).
``include_raw=False`` / ``include_groups=False`` skip the two large optional arrays.

For files too large to load (a million rows of 512-d embeddings and their raw copy are 4 GB),
:func:`open_features` is the lazy reader beside it: a :class:`FeatureFile` checks the schema
when opened, reads the per-row labels, split and paths when first asked for them, and reads
embeddings by rows or in chunks of rows (:meth:`FeatureFile.iter_chunks`), never the raw
embeddings or groups unless asked. Every read opens the HDF5 file and closes it again, so here
too no handle stays open between reads.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import queue
import shutil
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import h5py
import numpy as np

from dmlviewer.core.files import (GuardedWriter, RefusedFile, check_regular, commit, remove, remove_stale_temp_files,
                                  stale_temp_files as _stale_in, temp_path)

from . import h5safety

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
REQUIRED_DATASETS = ("embeddings", "embeddings_raw", "labels", "paths", "split")
OPTIONAL_DATASETS = ("groups", "boxes")
DEFAULT_ATTRS = {"checkpoint_sha256": "", "model_config": "{}", "dataset_root": "", "dataset_format": "",
                 "dataset_fingerprint": ""}
CHUNK_BYTES = 1 << 20
NORM_TOLERANCE = 1e-3

_STR = h5py.string_dtype("utf-8")


def class_names(attrs: dict) -> list[str]:
    """The ``class_names`` attribute as a list (empty when the file has none or it is not a
    list of strings: the file is not trusted)."""
    try:
        names = json.loads(attrs.get("class_names") or "[]")
    except (TypeError, ValueError):
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


class ClassNames:
    """The class names of a feature file's ``attrs`` (shared by :class:`Features` and
    :class:`FeatureFile`)."""

    attrs: dict[str, Any]

    @property
    def class_names(self) -> list[str]:
        return class_names(self.attrs)

    def class_name(self, label: int) -> str:
        """The name of class ``label`` from the ``class_names`` attribute (a JSON list, written
        since feature files carry it), else ``"class <label>"``."""
        names = self.class_names
        return names[label] if 0 <= label < len(names) else f"class {label}"


class StoreError(ValueError):
    """A feature file that cannot be read or written as this schema: not HDF5, truncated,
    another ``format_version``, missing or inconsistent datasets, bad arrays or attributes."""


@dataclass
class Features(ClassNames):
    """The content of one feature file (loaded eagerly; the file is closed)."""

    path: Path
    embeddings: np.ndarray
    labels: np.ndarray
    paths: list[str]
    split: np.ndarray
    boxes: np.ndarray
    embeddings_raw: np.ndarray | None = None
    groups: np.ndarray | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def arrays(self) -> dict[str, Any]:
        """Every loaded array by dataset name, as :func:`write_features` takes them."""
        out = {"embeddings": self.embeddings, "labels": self.labels, "paths": self.paths,
               "split": self.split, "boxes": self.boxes}
        if self.embeddings_raw is not None:
            out["embeddings_raw"] = self.embeddings_raw
        if self.groups is not None:
            out["groups"] = self.groups
        return {**out, **self.extra}

    @property
    def model_config(self) -> dict:
        """The ``model_config`` attribute parsed from JSON (``{}`` when unknown)."""
        return json.loads(self.attrs.get("model_config") or "{}")

    def indices(self, split: str | None = None) -> np.ndarray:
        """Rows whose ``split`` is ``split`` (all rows for ``None`` or ``"all"``)."""
        if split in (None, "all"):
            return np.arange(len(self), dtype=np.int64)
        return np.flatnonzero(self.split == split)


# ------------------------------------------------------------------------------ attributes


def _attr_value(key: str, value: Any) -> Any:
    """A value h5py stores as an attribute: dicts become JSON text, None is refused."""
    if value is None:
        raise StoreError(f"attribute {key!r} is None; store '' or leave it out")
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, (str, bool, int, float, np.generic)):
        return value
    if isinstance(value, Path):
        return str(value)
    array = np.asarray(value)
    if array.dtype.kind in "biuf":
        return array
    if array.dtype.kind == "U":
        return array.astype(object).astype(_STR)
    raise StoreError(f"attribute {key!r} has unsupported type {type(value).__name__}")


def _plain(value: Any) -> Any:
    """Attribute as read by h5py -> plain Python value."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()] if value.dtype.kind in "OS" else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _attr_values(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _attr_value(key, value) for key, value in attrs.items()}


# --------------------------------------------------------------------------------- writer


def stale_temp_files(path: str | Path) -> list[Path]:
    """Temporary files left beside ``path`` by writers that no longer run (see
    :func:`dmlviewer.core.files.stale_temp_files`)."""
    path = Path(path)
    return _stale_in(path.parent, path.name)


def _chunk_rows(row_bytes: int) -> int:
    return int(min(8192, max(64, CHUNK_BYTES // max(row_bytes, 1))))


class FeatureWriter:
    """Append feature batches to a new feature file; atomic (see the module docstring).

    ::

        with FeatureWriter(path, attrs={"dataset_root": ...}) as writer:
            for batch in batches:
                writer.append(embeddings_raw=..., labels=..., paths=..., split=...)

    ``embeddings`` may be given (it must then be L2-normalized) or is computed from
    ``embeddings_raw``. ``boxes`` default to NaN; ``groups`` must be given in every batch or
    in none. Leaving the block by an exception (cancellation included) or calling
    :meth:`abort` discards everything; the target keeps its previous content.

    ``background``: the HDF5 writes run on a writer thread of their own (:class:`_AppendThread`,
    at most :data:`QUEUED_APPENDS` batches waiting), so that the caller (an extraction's loop)
    goes on at once; each batch is checked in the caller's thread, and an error of a write is
    raised by the next :meth:`append` or by :meth:`close`. :meth:`close` waits for the writes
    before moving the file into place; :meth:`abort` drops the waiting ones.
    """

    def __init__(self, path: str | Path, attrs: Mapping[str, Any] | None = None, background: bool = False) -> None:
        self.path = Path(path)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.tmp_path: Path | None = None
        self.rows = 0
        self.background = background
        self._file: h5py.File | None = None
        self._guard: GuardedWriter | None = None
        self._names: set[str] | None = None  # the arrays of the first batch
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._appends: _AppendThread | None = None

    def __enter__(self) -> "FeatureWriter":
        self.open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def open(self) -> None:
        if self._file is not None:
            return
        if not self.path.parent.is_dir():
            raise FileNotFoundError(errno.ENOENT, "output folder not found", str(self.path.parent))
        if self.path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(self.path))
        remove_stale_temp_files(self.path.parent)  # of any target: interrupted extractions
        self.tmp_path = temp_path(self.path)
        self._guard = GuardedWriter(self.tmp_path)
        try:
            self._file = h5py.File(self._guard, "w", rdcc_nbytes=32 * CHUNK_BYTES)
        except BaseException:
            self._guard.close()
            remove(self.tmp_path)
            raise
        if self.background:
            self._appends = _AppendThread(self._write, self.path.name)

    def set_attrs(self, **attrs: Any) -> None:
        """Attributes to write on close (added to / replacing those given to the constructor)."""
        self.attrs.update(attrs)

    def _create(self, name: str, array: np.ndarray, compression: str | None = None) -> None:
        row_bytes = int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize
        self._file.create_dataset(
            name,
            shape=(0, *array.shape[1:]),
            maxshape=(None, *array.shape[1:]),
            chunks=(_chunk_rows(row_bytes), *array.shape[1:]),
            dtype=array.dtype,
            compression=compression,
        )

    def append(
        self,
        *,
        embeddings_raw: np.ndarray,
        labels: np.ndarray,
        paths: list[str] | np.ndarray,
        split: list[str] | np.ndarray | str,
        embeddings: np.ndarray | None = None,
        groups: np.ndarray | None = None,
        boxes: np.ndarray | None = None,
        **extra: np.ndarray,
    ) -> None:
        """Append one batch of ``n`` rows (``split`` may be one string for the whole batch).

        ``extra``: further per-row numeric arrays stored under their own names; like
        ``groups``, each must come in every batch or in none.
        """
        if self._file is None:
            raise StoreError("FeatureWriter is not open (use it in a with block)")
        batch = _batch_arrays(embeddings_raw, labels, paths, split, embeddings, groups, boxes, extra)
        if self._names is None:
            self._names = set(batch)
            self._shapes = {name: array.shape[1:] for name, array in batch.items()}
        elif self._names != set(batch):
            raise StoreError(
                f"every batch must hold the same arrays: first {sorted(self._names)}, now {sorted(batch)}"
            )
        for name, array in batch.items():
            if self._shapes[name] != array.shape[1:]:
                raise StoreError(f"{name}: batch rows have shape {array.shape[1:]}, earlier ones {self._shapes[name]}")
        start = self.rows
        self.rows = start + len(batch["labels"])
        if self._appends is not None:
            self._appends.submit(start, batch)
        else:
            self._write(start, batch)

    def _write(self, start: int, batch: dict[str, np.ndarray]) -> None:
        """Write a checked batch at rows ``start ..`` (the datasets made by the first one)."""
        n = len(batch["labels"])
        for name, array in batch.items():
            if name not in self._file:
                self._create(name, array, "gzip" if name in ("labels", "boxes") else None)
            ds = self._file[name]
            ds.resize(start + n, axis=0)
            ds[start:] = array
        self._guard.raise_error()  # a full disk, seen by a write from HDF5's cache

    def abort(self) -> None:
        """Discard the temporary file; the target is left as it was."""
        if self._appends is not None:
            self._appends.stop()
            self._appends = None
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None
                self._guard.close()
                remove(self.tmp_path)
                log.debug("discarded unfinished feature file %s", self.tmp_path)

    def close(self) -> None:
        """Finish the file and move it into place (atomic)."""
        if self._file is None:
            return
        try:
            if self._appends is not None:
                self._appends.finish()  # every queued batch written (or its error raised)
                self._appends = None
            if self._names is None:
                raise StoreError(f"{self.path}: nothing was appended")
            attrs = {**DEFAULT_ATTRS, **self.attrs}
            attrs.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
            attrs["format_version"] = FORMAT_VERSION
            self._file.attrs.update(_attr_values(attrs))
            self._file.flush()
            self._guard.raise_error()
            self._file.close()
            self._file = None
            self._guard.close()
            self._guard.raise_error()
            commit(self.tmp_path, self.path)
        except BaseException:
            if self._file is not None:
                self.abort()
            else:
                self._guard.close()
                remove(self.tmp_path)
            raise
        log.info("wrote %d feature rows to %s", self.rows, self.path)


#: batches a background :class:`FeatureWriter` holds waiting for its writer thread
QUEUED_APPENDS = 2


class _AppendThread:
    """A writer thread running ``write(start, batch)`` for each submitted batch in order; the
    first error stops it and is raised by the next :meth:`submit` or by :meth:`finish`."""

    _END = object()

    def __init__(self, write, name: str) -> None:
        self._write = write
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUED_APPENDS)
        self._error: BaseException | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"feature-writer {name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._END or self._stopped.is_set():
                return
            try:
                self._write(*item)
            except BaseException as exc:  # raised in the caller's thread
                self._error = exc
                self._stopped.set()
                return

    def _put(self, item) -> None:
        while True:
            if self._error is not None:
                raise self._error
            if self._stopped.is_set() or not self._thread.is_alive():
                return
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def submit(self, start: int, batch: dict[str, np.ndarray]) -> None:
        self._put((start, batch))

    def finish(self) -> None:
        """Wait until every submitted batch is written; the first write's error, if any."""
        self._put(self._END)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Drop the waiting batches and end the thread (after the write in progress)."""
        self._stopped.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(self._END)
        self._thread.join()


def _batch_arrays(embeddings_raw, labels, paths, split, embeddings, groups, boxes, extra) -> dict[str, np.ndarray]:
    raw = np.asarray(embeddings_raw, dtype=np.float32)
    if raw.ndim != 2:
        raise StoreError(f"embeddings_raw must be N x D, got shape {raw.shape}")
    n = len(raw)
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iu":
        raise StoreError(f"labels must be integers, got {labels.dtype}")
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    if embeddings is None:
        emb = raw / np.maximum(norms, np.finfo(np.float32).tiny)
    else:
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.shape != raw.shape:
            raise StoreError(f"embeddings shape {emb.shape} differs from embeddings_raw {raw.shape}")
        norm = np.linalg.norm(emb, axis=1)
        if np.any((np.abs(norm - 1) > NORM_TOLERANCE) & (norm > 0)):
            raise StoreError("embeddings are not L2-normalized (pass embeddings_raw only to normalize)")
    split_arr = np.full(n, split, dtype=object) if isinstance(split, str) else np.asarray(split, dtype=object)
    out = {
        "embeddings": emb,
        "embeddings_raw": raw,
        "labels": labels.astype(np.int64),
        "paths": np.asarray([str(p) for p in paths], dtype=object).reshape(-1).astype(_STR),
        "split": split_arr.reshape(-1).astype(_STR),
        "boxes": np.full((n, 4), np.nan, np.float32) if boxes is None else np.asarray(boxes, dtype=np.float32),
    }
    if groups is not None:
        out["groups"] = np.asarray(groups, dtype=np.float32)
        if out["groups"].ndim != 3:
            raise StoreError(f"groups must be N x P x Dg, got shape {out['groups'].shape}")
    if out["boxes"].shape != (n, 4):
        raise StoreError(f"boxes must be N x 4, got shape {out['boxes'].shape}")
    for name, value in extra.items():
        array = np.asarray(value)
        if array.dtype.kind not in "biuf" or array.ndim < 1 or "/" in name or not name:
            raise StoreError(f"extra array {name!r} must be numeric, one row per image, named without '/'")
        out[name] = array
    wrong = {k: len(v) for k, v in out.items() if len(v) != n}
    if wrong:
        raise StoreError(f"batch arrays disagree in length: {n} embedding rows but {wrong}")
    return out


def write_features(path: str | Path, arrays: Mapping[str, Any], attrs: Mapping[str, Any] | None = None) -> Path:
    """Write a whole feature file at once (atomic); ``arrays`` as :meth:`FeatureWriter.append`
    takes them (names beyond the schema are stored as extra per-row arrays)."""
    missing = [name for name in ("embeddings_raw", "labels", "paths", "split") if name not in arrays]
    if missing:
        raise StoreError(f"missing feature arrays {', '.join(missing)}")
    with FeatureWriter(path, attrs) as writer:
        writer.append(**arrays)
    return Path(path)


# --------------------------------------------------------------------------------- reader


def _open_checked(path: Path) -> h5py.File:
    """Open ``path`` for reading and check the schema version and datasets."""
    try:
        check_regular(path)  # never open a FIFO or a device: it would block or never end
    except RefusedFile as exc:
        raise StoreError(f"{path}: {exc.reason}; not a feature file") from None
    if not h5py.is_hdf5(path):
        raise StoreError(f"{path}: not an HDF5 file")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise StoreError(f"{path}: truncated or corrupt HDF5 file ({exc})") from None
    try:
        h5safety.check_links(f)  # before any member is opened: links are not followed
        version = f.attrs.get("format_version")
        if version is None:
            raise StoreError(f"{path}: no format_version attribute; not a dmlviewer feature file")
        if int(version) != FORMAT_VERSION:
            raise StoreError(
                f"{path}: feature file format_version {int(version)}; this dmlviewer reads version {FORMAT_VERSION}"
            )
        missing = [name for name in REQUIRED_DATASETS if name not in f]
        if missing:
            raise StoreError(f"{path}: missing datasets {', '.join(missing)}")
        h5safety.check_file(f)
        n = len(f["labels"])
        shapes = {name: f[name].shape for name in f if isinstance(f[name], h5py.Dataset)}
        if any(not s or s[0] != n for s in shapes.values()) or len(shapes["embeddings"]) != 2 or (
            shapes["embeddings_raw"] != shapes["embeddings"]
        ):
            raise StoreError(f"{path}: inconsistent dataset shapes {shapes}")
    except StoreError:
        f.close()
        raise
    except h5safety.UnsafeFile as exc:
        f.close()
        raise StoreError(f"{path}: {exc}; the file is not read") from None
    except (OSError, KeyError, ValueError, TypeError) as exc:
        f.close()
        raise StoreError(f"{path}: corrupt feature file ({exc})") from None
    return f


def read_features(path: str | Path, include_raw: bool = True, include_groups: bool = True) -> Features:
    """Load a feature file; :class:`StoreError` for files that are not this schema (not
    HDF5, truncated, another ``format_version``, missing datasets). Eager; see the module
    docstring."""
    path = Path(path)
    with _open_checked(path) as f:
        try:
            features = Features(
                path=path,
                embeddings=f["embeddings"][()],
                labels=f["labels"][()].astype(np.int64),
                paths=f["paths"].asstr()[()].tolist(),
                split=f["split"].asstr()[()].astype(object),
                boxes=f["boxes"][()] if "boxes" in f else np.full((len(f["labels"]), 4), np.nan, np.float32),
                embeddings_raw=f["embeddings_raw"][()] if include_raw else None,
                groups=f["groups"][()] if include_groups and "groups" in f else None,
                attrs={key: _plain(value) for key, value in f.attrs.items()},
                extra={
                    name: f[name][()] for name in f
                    if name not in REQUIRED_DATASETS and name not in OPTIONAL_DATASETS
                    and isinstance(f[name], h5py.Dataset)
                },
            )
            h5safety.check_embeddings(features.embeddings)
            if features.embeddings_raw is not None:
                h5safety.check_embeddings(features.embeddings_raw, "embeddings_raw", normalized=False)
        except h5safety.UnsafeFile as exc:
            raise StoreError(f"{path}: {exc}; the file is not read") from None
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise StoreError(f"{path}: corrupt feature file ({exc})") from None
    return features


class FeatureFile(ClassNames):
    """A feature file read lazily (see the module docstring); ``len()`` is the number of rows.

    ``labels``, ``split`` and ``paths`` are read on first use and kept (for a million rows
    about 8 MB, 8 MB and the paths' text); ``boxes``, ``embeddings``, ``embeddings_raw``,
    ``groups`` and extra arrays are read on request only (:meth:`read`, :meth:`iter_chunks`).
    The file is expected not to change while it is open: :attr:`created` and the row count
    identify the version that was opened, and a read of a file that changed raises
    :class:`StoreError`."""

    #: rows per chunk of :meth:`iter_chunks` (about 64 MB of 512-d float32)
    CHUNK_ROWS = 32768

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with _open_checked(self.path) as f:
            try:
                self.attrs: dict[str, Any] = {key: _plain(value) for key, value in f.attrs.items()}
                self.dim = int(f["embeddings"].shape[1])
                self._n = int(f["labels"].shape[0])
                self.datasets = tuple(name for name in f if isinstance(f[name], h5py.Dataset))
            except (OSError, KeyError, ValueError, TypeError) as exc:
                raise StoreError(f"{self.path}: corrupt feature file ({exc})") from None
        self._cache: dict[str, Any] = {}

    def __len__(self) -> int:
        return self._n

    @property
    def created(self) -> str:
        return str(self.attrs.get("created", ""))

    @property
    def model_config(self) -> dict:
        """The ``model_config`` attribute parsed from JSON (``{}`` when unknown)."""
        return json.loads(self.attrs.get("model_config") or "{}")

    def _open(self) -> h5py.File:
        f = _open_checked(self.path)
        if len(f["labels"]) != self._n or str(_plain(f.attrs.get("created", ""))) != self.created:
            f.close()
            raise StoreError(f"{self.path}: the feature file changed after it was opened; open it again")
        return f

    def _read(self, f: h5py.File, name: str, rows: Any) -> np.ndarray:
        """``rows``: a slice, or sorted unique indices. Numeric rows are read as one slice per
        storage chunk they touch (an h5py point selection of 50,000 labels took 4x longer);
        strings by point selection (a slice would decode every string of the chunk)."""
        if name not in self.datasets:
            raise KeyError(f"{self.path} has no dataset {name!r}")
        ds = f[name]
        block = ds.chunks[0] if ds.chunks else 4096
        if name in ("paths", "split"):
            ds = ds.asstr()
        if name in ("embeddings", "embeddings_raw"):  # as read_features checks them (h5safety)
            out = self._read_rows(ds, name, rows, block)
            h5safety.check_embeddings(out, name, normalized=name == "embeddings")
            return out
        return self._read_rows(ds, name, rows, block)

    @staticmethod
    def _read_rows(ds, name: str, rows: Any, block: int) -> np.ndarray:
        if isinstance(rows, slice):
            return ds[rows]
        if len(rows) == 0:
            return ds[0:0]
        if name in ("paths", "split"):
            return ds[rows]
        blocks = rows // block
        starts = np.flatnonzero(np.diff(blocks, prepend=-1))
        ends = np.append(starts[1:], len(rows))
        parts = []
        for a, b in zip(starts, ends):
            lo, hi = int(rows[a]), int(rows[b - 1]) + 1
            parts.append(np.asarray(ds[lo:hi])[rows[a:b] - lo])
        return np.concatenate(parts)

    def read(self, name: str, rows: slice | np.ndarray | list[int] | None = None) -> np.ndarray:
        """Dataset ``name`` at ``rows`` (a slice, any index array, or all rows for ``None``;
        an index array is read in sorted order and returned in the given order)."""
        try:
            with self._open() as f:
                if rows is None or isinstance(rows, slice):
                    return self._read(f, name, slice(None) if rows is None else rows)
                rows = np.asarray(rows, dtype=np.int64).reshape(-1)
                if len(rows) and (rows.min() < 0 or rows.max() >= self._n):
                    raise IndexError(f"rows out of range 0..{self._n - 1}")
                unique, inverse = np.unique(rows, return_inverse=True)
                return self._read(f, name, unique)[inverse.reshape(-1)]
        except h5safety.UnsafeFile as exc:
            raise StoreError(f"{self.path}: {exc} (among the rows read)") from None
        except (OSError, ValueError, TypeError) as exc:
            raise StoreError(f"{self.path}: cannot read {name} ({exc})") from None

    def iter_chunks(self, name: str = "embeddings", chunk_rows: int | None = None,
                    stop: int | None = None) -> Any:
        """Yield ``(start, array)`` for consecutive row chunks of dataset ``name`` (rows
        ``0 .. stop``), the file open only while a chunk is read."""
        step = max(1, int(chunk_rows or self.CHUNK_ROWS))
        end = self._n if stop is None else min(self._n, int(stop))
        for start in range(0, end, step):
            yield start, self.read(name, slice(start, min(end, start + step)))

    def _cached(self, name: str) -> Any:
        if name not in self._cache:
            value = self.read(name)
            if name == "labels":
                value = value.astype(np.int64)
            elif name == "split":
                value = value.astype(object)
            elif name == "paths":
                value = value.tolist()
            self._cache[name] = value
        return self._cache[name]

    @property
    def labels(self) -> np.ndarray:
        return self._cached("labels")

    @property
    def split(self) -> np.ndarray:
        return self._cached("split")

    @property
    def paths(self) -> list[str]:
        return self._cached("paths")

    def indices(self, split: str | None = None) -> np.ndarray:
        """Rows whose ``split`` is ``split`` (all rows for ``None`` or ``"all"``)."""
        if split in (None, "all"):
            return np.arange(len(self), dtype=np.int64)
        return np.flatnonzero(self.split == split)

    def load(self, include_raw: bool = True, include_groups: bool = True) -> Features:
        """Everything, eagerly (as :func:`read_features`)."""
        return read_features(self.path, include_raw, include_groups)


def open_features(path: str | Path) -> FeatureFile:
    """Open a feature file lazily (:class:`FeatureFile`); the same errors as
    :func:`read_features` for files that are not this schema."""
    return FeatureFile(path)


def update_attrs(path: str | Path, **attrs: Any) -> None:
    """Add or replace root attributes (e.g. metrics after evaluation), atomically (copy, edit,
    replace; see the module docstring). ``format_version`` cannot be changed."""
    path = Path(path)
    if "format_version" in attrs:
        raise StoreError("format_version is set by the store and cannot be changed")
    values = _attr_values(attrs)
    _open_checked(path).close()
    tmp = temp_path(path)
    try:
        shutil.copyfile(path, tmp)
        guard = GuardedWriter(tmp, "r+b")
        try:
            with h5py.File(guard, "r+") as f:
                f.attrs.update(values)
        finally:
            guard.close()
        guard.raise_error()
        commit(tmp, path)
    except BaseException:
        remove(tmp)
        raise


def split_embeddings(path: str | Path, sha256: str, dataset, indices: np.ndarray) -> tuple[np.ndarray | None, str]:
    """``(embeddings, "")``: the rows of the feature file at ``path`` for the dataset images
    ``indices``, in their order, when the file belongs to the model with checkpoint hash
    ``sha256`` and holds every one of those images (by path); ``(None, reason)`` otherwise, the
    reason a phrase after the file's name (``belongs to another model ...``)."""
    features = read_features(path, include_raw=False, include_groups=False)
    stored = str(features.attrs.get("checkpoint_sha256", "") or "")
    if not sha256 or stored != sha256:
        return None, f"belongs to another model (checkpoint_sha256 {stored[:12] or '?'})"
    where = {p: i for i, p in enumerate(features.paths)}
    rows = [where.get(dataset.paths[i]) for i in indices]
    missing = sum(r is None for r in rows)
    if missing:
        return None, (f"lacks {missing} of the split's {len(rows)} images (features of another dataset or "
                      "split)")
    return np.asarray(features.embeddings[np.asarray(rows, dtype=np.int64)], dtype=np.float32), ""
