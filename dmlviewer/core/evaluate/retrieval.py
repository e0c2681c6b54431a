"""Nearest neighbours of one stored item or of any vector (``dmlviewer retrieve``, the app's
retrieval dock, region retrieval).

Feature files are given as a path (read eagerly), a ``Features`` or a lazily opened
``FeatureFile`` (large files: embeddings streamed in chunks). Search is exact unless an
approximate ``index`` (``search.load_index``) is given; see ``search.py``.

**Cross-view** (issue 25): a feature file of a two-branch model holds a per-row ``branch``
(0: embedded by the query branch, e.g. a street panorama; 1: by the reference branch, an aerial
image; written by extraction). A query then searches only the other branch's images of its own
split (:func:`cross_view_gallery`): a street panorama the aerial images, as CVUSA's protocol
retrieves; exactly, over those rows (an approximate index covers every row and is not used).
Region retrieval (:func:`.region_retrieval.region_retrieve`) computes the region's partial
feature with the query's own branch at that branch's input shape.
"""

from __future__ import annotations

import os

import numpy as np


def _dim(features) -> int:
    return int(features.dim) if hasattr(features, "dim") else int(np.shape(features.embeddings)[1])


def branch_column(features) -> np.ndarray | None:
    """The per-row ``branch`` of a two-branch model's feature file (int8: 0 query branch, 1
    reference branch), ``None`` when the file has none (one branch embedded every row).
    ``StoreError`` (a ``ValueError``) when a file from elsewhere holds other values."""
    if hasattr(features, "extra"):
        column = features.extra.get("branch")
    elif "branch" in getattr(features, "datasets", ()):
        column = features._cached("branch")  # read once, kept (as labels and split are)
    else:
        column = None
    if column is None:
        return None
    column = np.asarray(column).reshape(-1)
    if len(column) != len(features.labels) or not np.isin(column, (0, 1)).all():
        from .store import StoreError

        raise StoreError(f"{getattr(features, 'path', 'the feature file')}: its 'branch' must hold 0 (query branch) "
                         "or 1 (reference branch) per row")
    return column.astype(np.int8)


def gallery_rows(features, branch: int, split: str | None) -> np.ndarray | None:
    """The rows a query embedded by ``branch`` (0 query, 1 reference) searches in a two-branch
    feature file: the other branch's rows of ``split`` (every split for ``None``); ``None``
    for a one-branch file (every row)."""
    column = branch_column(features)
    if column is None:
        return None
    keep = column != int(branch)
    if split is not None:
        keep &= np.asarray(features.split, dtype=object) == split
    return np.flatnonzero(keep)


def cross_view_gallery(features, query_row: int) -> np.ndarray | None:
    """The rows stored item ``query_row`` searches (:func:`gallery_rows` of its branch and
    split): for a street panorama the aerial images of its split; ``None`` for one-branch files."""
    column = branch_column(features)
    if column is None:
        return None
    return gallery_rows(features, int(column[int(query_row)]), str(features.split[int(query_row)]))


def _gallery_search(features, vector: np.ndarray, k: int, exclude: int | None,
                    rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact search over ``rows`` only; rows of the whole file back."""
    from .search import exact_search

    if hasattr(features, "read"):
        sub = features.read("embeddings", rows)
    else:
        sub = np.asarray(features.embeddings[rows], dtype=np.float32)
    local = np.flatnonzero(rows == exclude) if exclude is not None else np.zeros(0, np.int64)
    sims, found = exact_search(sub, vector, k, np.array([local[0]]) if len(local) else None)
    return sims, rows[found]


def neighbours(features, vector: np.ndarray, k: int = 10, exclude: int | None = None,
               index=None, rows: np.ndarray | None = None) -> list[dict]:
    """The ``k`` stored items most similar (cosine) to ``vector`` (normalized here), best first
    (ties by index), ``exclude`` left out. Each: ``{"index", "path", "label", "similarity"}``.
    ``rows``: search only these rows (a cross-view gallery, :func:`gallery_rows`), exactly."""
    from .search import search

    vector = np.asarray(vector, dtype=np.float32).reshape(-1)
    if len(vector) != _dim(features):
        raise ValueError(f"the feature file holds {_dim(features)}-d embeddings, the query is {len(vector)}-d")
    norm = float(np.linalg.norm(vector))
    if not norm > 0:
        raise ValueError("the query vector is zero")
    available = len(features.labels) if rows is None else len(rows)
    inside = exclude is not None and (rows is None or bool(np.isin(exclude, rows)))
    k = max(0, min(int(k), available - inside))
    if k == 0:
        return []
    if rows is not None:
        sims, rows = _gallery_search(features, vector / norm, k, exclude, np.asarray(rows, dtype=np.int64))
    else:
        sims, rows = search(features, vector / norm, k, None if exclude is None else np.array([exclude]), index)
    paths, labels = features.paths, features.labels
    return [{"index": int(i), "path": paths[i], "label": int(labels[i]), "similarity": float(s)}
            for s, i in zip(sims[0], rows[0])]


def query_vector(features, query_index: int) -> np.ndarray:
    """The stored embedding of row ``query_index`` (IndexError naming the range when out of it)."""
    n = len(features)
    if not 0 <= int(query_index) < n:
        raise IndexError(f"query index {query_index} out of range: the feature file has {n} items (0..{n - 1})")
    if hasattr(features, "read"):
        return features.read("embeddings", [int(query_index)])[0]
    return np.asarray(features.embeddings[int(query_index)], dtype=np.float32)


def retrieve(features, query_index: int, k: int = 10, index=None) -> list[dict]:
    """The ``k`` items most similar (cosine) to item ``query_index`` of ``features`` (a
    ``Features``, a ``FeatureFile`` or a feature file path), the query itself excluded, best
    first (ties by index). Each: ``{"index", "path", "label", "similarity"}``. ``index``: an
    approximate index of the same file (``search.load_index``); exact search without one."""
    from .store import read_features

    if isinstance(features, (str, os.PathLike)):
        features = read_features(features, include_raw=False, include_groups=False)
    vector = query_vector(features, query_index)
    return neighbours(features, vector, k, exclude=int(query_index), index=index,
                      rows=cross_view_gallery(features, query_index))

