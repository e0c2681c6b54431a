"""Checks that make a feature file from elsewhere safe to read (called by :mod:`.store`).

HDF5 can make a file read other files: external links and virtual datasets point into other
HDF5 files, and external raw storage makes a dataset's bytes those of any local file (e.g.
``/etc/passwd`` as the ``paths``). None of these appear in files dmlviewer writes, so they are
refused in every file read, before any of its objects is opened (:func:`check_links`,
:func:`check_dataset`). A file can also claim far more rows than it stores (unallocated chunks
read as fill values) or hide a compressed bomb, so the size each dataset would take in memory
is checked against what the file stores and against the machine's memory before reading.
Dtypes and shapes are checked against the schema (no bytes or compound embeddings, no N x 2
labels), and read embeddings must be finite and L2-normalized.

Rewriting a file (adding ``grad_weights``) copies only the schema's datasets and the known
extras (:data:`KNOWN_EXTRAS`), never an unknown dataset.
"""

from __future__ import annotations

import os

import h5py
import numpy as np

#: per-row datasets beyond the schema that dmlviewer itself writes (and carries when rewriting)
KNOWN_EXTRAS = ("grad_weights", "branch")
#: the largest compression ratio a stored dataset may claim (deflate cannot exceed about 1032:1)
MAX_COMPRESSION_RATIO = 1100
#: datasets smaller than this are not checked against their stored size
SMALL_BYTES = 1 << 20
#: how many objects the root group may hold
MAX_ROOT_OBJECTS = 10_000
NORM_TOLERANCE = 1e-3

#: name -> (dtype kinds, number of dimensions, fixed trailing shape or None)
SCHEMA = {
    "embeddings": ("f", 2, None),
    "embeddings_raw": ("f", 2, None),
    "labels": ("iu", 1, None),
    "paths": ("str", 1, None),
    "split": ("str", 1, None),
    "boxes": ("f", 2, (4,)),
    "groups": ("f", 3, None),
    "grad_weights": ("f", 2, None),
    "branch": ("iu", 1, None),  # two-branch models: 0 query branch, 1 reference branch
}


class UnsafeFile(ValueError):
    """A feature file using an HDF5 feature dmlviewer does not read (the store turns it into
    a ``StoreError`` naming the file)."""


def check_links(f: h5py.File) -> None:
    """Refuse external and soft links among the root group's members (checked without
    following them)."""
    names = list(f.keys())
    if len(names) > MAX_ROOT_OBJECTS:
        raise UnsafeFile(f"holds {len(names)} objects at its root; a feature file holds a few")
    for name in names:
        link = f.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            raise UnsafeFile(f"{name!r} is an external link to another file; external links are not followed")
        if isinstance(link, h5py.SoftLink):
            raise UnsafeFile(f"{name!r} is a soft link; feature files hold plain datasets")


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def check_dataset(ds: h5py.Dataset, name: str) -> None:
    """Refuse external storage, virtual layouts, dtypes and shapes outside the schema, and
    sizes the file cannot back."""
    dcpl = ds.id.get_create_plist()
    if dcpl.get_layout() == h5py.h5d.VIRTUAL:
        raise UnsafeFile(f"dataset {name!r} is a virtual dataset (data from other files)")
    if dcpl.get_external_count() > 0:
        raise UnsafeFile(f"dataset {name!r} keeps its data in an external file")
    kinds, ndim, trailing = SCHEMA.get(name, ("biuf", None, None))
    dtype = ds.dtype
    if kinds == "str":
        if h5py.check_string_dtype(dtype) is None:
            raise UnsafeFile(f"dataset {name!r} must hold text, not {dtype}")
    elif dtype.kind not in kinds or dtype.fields is not None or dtype.subdtype is not None:
        wanted = {"f": "floating-point numbers", "iu": "integers"}.get(kinds, "numbers")
        raise UnsafeFile(f"dataset {name!r} must hold {wanted}, not {dtype}")
    if ndim is not None and ds.ndim != ndim:
        raise UnsafeFile(f"dataset {name!r} must have {ndim} dimension(s), has shape {ds.shape}")
    if trailing is not None and tuple(ds.shape[1:]) != trailing:
        raise UnsafeFile(f"dataset {name!r} must have shape N x {' x '.join(map(str, trailing))}, has {ds.shape}")
    logical = int(np.prod(ds.shape, dtype=np.float64) * dtype.itemsize)
    if logical <= SMALL_BYTES:
        return
    stored = ds.id.get_storage_size()
    filtered = dcpl.get_nfilters() > 0
    if not filtered and stored < logical:
        raise UnsafeFile(f"dataset {name!r} claims {ds.shape[0]:,} rows ({logical:,} bytes) but stores only "
                         f"{stored:,} bytes")
    if filtered and logical > stored * MAX_COMPRESSION_RATIO:
        raise UnsafeFile(f"dataset {name!r} claims {logical:,} bytes from {stored:,} stored (compression bomb)")
    if logical > _memory_bytes() // 2:
        raise UnsafeFile(f"dataset {name!r} needs {logical / 2**30:.1f} GiB in memory, more than half of this "
                         "machine's memory")


def check_file(f: h5py.File) -> list[str]:
    """:func:`check_links`, then :func:`check_dataset` for every dataset at the root; returns
    the names of the root's datasets (groups and other objects are never read)."""
    check_links(f)
    names = []
    for name in f:
        obj = f[name]
        if isinstance(obj, h5py.Dataset):
            check_dataset(obj, name)
            names.append(name)
    return names


def check_embeddings(embeddings: np.ndarray, name: str = "embeddings", normalized: bool = True) -> None:
    """Read embeddings must be finite and, for ``embeddings``, of norm 1 (or 0 for an image
    whose raw embedding was 0)."""
    finite = np.isfinite(embeddings).all(axis=1) if embeddings.ndim == 2 else np.isfinite(embeddings)
    if not finite.all():
        rows = np.flatnonzero(~finite)
        raise UnsafeFile(f"{name} has {len(rows)} row(s) with NaN or infinite values (first: row {int(rows[0])})")
    if normalized and embeddings.ndim == 2 and len(embeddings):
        norms = np.linalg.norm(embeddings.astype(np.float64), axis=1)
        bad = np.flatnonzero((np.abs(norms - 1) > NORM_TOLERANCE) & (norms > 0))
        if len(bad):
            raise UnsafeFile(f"{name} are not L2-normalized (row {int(bad[0])} has norm {norms[bad[0]]:.4g})")


def rewrite_arrays(arrays: dict) -> dict:
    """The arrays a rewrite of a feature file may carry: the schema's and the known extras."""
    return {k: v for k, v in arrays.items() if k in SCHEMA or k in KNOWN_EXTRAS}
