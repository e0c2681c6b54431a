"""The HDF5 feature store: one file per extraction (schema in DESIGN.md, "HDF5 feature store").

Datasets: ``embeddings`` (N x D float32, L2-normalized), ``embeddings_raw`` (N x D, before
normalization), ``labels`` (N int64), ``paths`` (N utf-8, relative to the dataset root),
``split`` (N utf-8), ``boxes`` (N x 4 float32 x, y, w, h, NaN when unknown; always written,
NaN-filled when not given), optional ``groups`` (N x P x Dg). Root attributes:
``format_version`` (:data:`FORMAT_VERSION`), ``checkpoint_sha256``, ``model_config`` (JSON
text), ``dataset_root``, ``dataset_format``, ``created`` (ISO 8601, UTC), ``class_names`` (JSON
list, index = label; written by extraction, absent in older files) and, after evaluation,
the metrics (:func:`update_attrs`). Attributes the caller does not give are written empty
(``""``, ``model_config`` ``"{}"``), meaning unknown. Further per-row numeric datasets (e.g.
``grad_weights`` for grad-weight transfer, seed 002) may be stored beside the schema's; they
are read into ``Features.extra``, and ``write_features(path, features.arrays, features.attrs)``
rewrites a file with everything it held.

Layout: every dataset is chunked along N with chunks of about 1 MiB (512 rows at D = 512) and
resizable, so batches are appended as they come. Float arrays are stored uncompressed:
embeddings are close to incompressible (a 120,053 x 512 float32 pair shrank 7 % with
lzf+shuffle and 14 % with gzip-1+shuffle while writing took 9x / 19x longer; numbers in the
project report), and extraction should not wait for the compressor. The small ``labels`` /
``boxes`` arrays use gzip level 1; strings are variable-length UTF-8.

Atomicity: :class:`FeatureWriter` writes ``.<name>.tmp-<pid>-<n>`` in the target's folder;
closing it normally flushes, fsyncs and ``os.replace``-s it onto the target (then fsyncs the
folder), while an exception, :meth:`FeatureWriter.abort` or cancellation deletes it. A process
killed outright leaves only its temporary file, never a half target; the next writer for the
same target deletes temporary files whose process is gone (POSIX). :func:`update_attrs` is
atomic the same way: it copies the file to a temporary name, edits the copy and replaces the
original. Editing in place would be cheaper, but HDF5 has no journal, and a crash while it
rewrites the root object header could leave the features unreadable; a copy costs about one
second per 500 MB.

Reading (:func:`read_features`) is eager: the arrays are loaded and the file is closed before
returning, so no handle stays open (the file can be replaced at once, also on Windows).
``include_raw=False`` / ``include_groups=False`` skip the two large optional arrays.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import h5py
import numpy as np

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
REQUIRED_DATASETS = ("embeddings", "embeddings_raw", "labels", "paths", "split")
OPTIONAL_DATASETS = ("groups", "boxes")
DEFAULT_ATTRS = {"checkpoint_sha256": "", "model_config": "{}", "dataset_root": "", "dataset_format": ""}
CHUNK_BYTES = 1 << 20
NORM_TOLERANCE = 1e-3

_STR = h5py.string_dtype("utf-8")
_sequence = itertools.count()


class StoreError(ValueError):
    """A feature file that cannot be read or written as this schema: not HDF5, truncated,
    another ``format_version``, missing or inconsistent datasets, bad arrays or attributes."""


@dataclass
class Features:
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

    def class_name(self, label: int) -> str:
        """The name of class ``label`` from the ``class_names`` attribute (a JSON list, written
        since feature files carry it), else ``"class <label>"``."""
        names = self.class_names
        return names[label] if 0 <= label < len(names) else f"class {label}"

    @property
    def class_names(self) -> list[str]:
        """The ``class_names`` attribute as a list (empty when the file has none or it is not a
        list of strings: the file is not trusted)."""
        try:
            names = json.loads(self.attrs.get("class_names") or "[]")
        except (TypeError, ValueError):
            return []
        return [str(n) for n in names] if isinstance(names, list) else []

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


# ----------------------------------------------------------------------------- temp files


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{next(_sequence)}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_temp_files(path: str | Path) -> list[Path]:
    """Temporary files left beside ``path`` by writers that no longer run (POSIX; elsewhere
    process liveness cannot be checked safely and the list is empty)."""
    path = Path(path)
    if os.name != "posix" or not path.parent.is_dir():
        return []
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.tmp-(\d+)-\d+$")
    stale = []
    for entry in os.scandir(path.parent):
        m = pattern.match(entry.name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            stale.append(Path(entry.path))
    return stale


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit(tmp: Path, path: Path) -> None:
    _fsync_file(tmp)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


# --------------------------------------------------------------------------------- writer


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
    """

    def __init__(self, path: str | Path, attrs: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.tmp_path: Path | None = None
        self.rows = 0
        self._file: h5py.File | None = None
        self._names: set[str] | None = None  # datasets created by the first batch

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
        for stale in stale_temp_files(self.path):
            log.info("removing %s left by an interrupted writer", stale)
            _remove(stale)
        self.tmp_path = _temp_name(self.path)
        self._file = h5py.File(self.tmp_path, "w", rdcc_nbytes=32 * CHUNK_BYTES)

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
            for name, array in batch.items():
                compression = "gzip" if name in ("labels", "boxes") else None
                self._create(name, array, compression)
        elif self._names != set(batch):
            raise StoreError(
                f"every batch must hold the same arrays: first {sorted(self._names)}, now {sorted(batch)}"
            )
        start, n = self.rows, len(batch["labels"])
        for name, array in batch.items():
            ds = self._file[name]
            if ds.shape[1:] != array.shape[1:]:
                raise StoreError(f"{name}: batch rows have shape {array.shape[1:]}, earlier ones {ds.shape[1:]}")
            ds.resize(start + n, axis=0)
            ds[start:] = array
        self.rows = start + n

    def abort(self) -> None:
        """Discard the temporary file; the target is left as it was."""
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None
                _remove(self.tmp_path)
                log.debug("discarded unfinished feature file %s", self.tmp_path)

    def close(self) -> None:
        """Finish the file and move it into place (atomic)."""
        if self._file is None:
            return
        try:
            if self._names is None:
                raise StoreError(f"{self.path}: nothing was appended")
            attrs = {**DEFAULT_ATTRS, **self.attrs}
            attrs.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
            attrs["format_version"] = FORMAT_VERSION
            self._file.attrs.update(_attr_values(attrs))
            self._file.flush()
            self._file.close()
            self._file = None
            _commit(self.tmp_path, self.path)
        except BaseException:
            if self._file is not None:
                self.abort()
            else:
                _remove(self.tmp_path)
            raise
        log.info("wrote %d feature rows to %s", self.rows, self.path)


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
    if not path.exists():
        raise FileNotFoundError(errno.ENOENT, "feature file not found", str(path))
    if path.is_dir():
        raise StoreError(f"{path}: is a folder, not a feature file")
    if not h5py.is_hdf5(path):
        raise StoreError(f"{path}: not an HDF5 file")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise StoreError(f"{path}: truncated or corrupt HDF5 file ({exc})") from None
    try:
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
        n = len(f["labels"])
        shapes = {name: f[name].shape for name in f if isinstance(f[name], h5py.Dataset)}
        if any(not s or s[0] != n for s in shapes.values()) or len(shapes["embeddings"]) != 2 or (
            shapes["embeddings_raw"] != shapes["embeddings"]
        ):
            raise StoreError(f"{path}: inconsistent dataset shapes {shapes}")
    except StoreError:
        f.close()
        raise
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
            return Features(
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
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise StoreError(f"{path}: corrupt feature file ({exc})") from None


def update_attrs(path: str | Path, **attrs: Any) -> None:
    """Add or replace root attributes (e.g. metrics after evaluation), atomically (copy, edit,
    replace; see the module docstring). ``format_version`` cannot be changed."""
    path = Path(path)
    if "format_version" in attrs:
        raise StoreError("format_version is set by the store and cannot be changed")
    values = _attr_values(attrs)
    _open_checked(path).close()
    tmp = _temp_name(path)
    try:
        shutil.copyfile(path, tmp)
        with h5py.File(tmp, "r+") as f:
            f.attrs.update(values)
        _commit(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
