"""Nearest neighbours of one stored item or of any vector (``dmlviewer retrieve``, the app's
retrieval dock, region retrieval).

Feature files are given as a path (read eagerly), a ``Features`` or a lazily opened
``FeatureFile`` (large files: embeddings streamed in chunks). Search is exact unless an
approximate ``index`` (``search.load_index``) is given; see ``search.py``.
"""

from __future__ import annotations

import os

import numpy as np


def _dim(features) -> int:
    return int(features.dim) if hasattr(features, "dim") else int(np.shape(features.embeddings)[1])


def neighbours(features, vector: np.ndarray, k: int = 10, exclude: int | None = None,
               index=None) -> list[dict]:
    """The ``k`` stored items most similar (cosine) to ``vector`` (normalized here), best first
    (ties by index), ``exclude`` left out. Each: ``{"index", "path", "label", "similarity"}``."""
    from .search import search

    vector = np.asarray(vector, dtype=np.float32).reshape(-1)
    if len(vector) != _dim(features):
        raise ValueError(f"the feature file holds {_dim(features)}-d embeddings, the query is {len(vector)}-d")
    norm = float(np.linalg.norm(vector))
    if not norm > 0:
        raise ValueError("the query vector is zero")
    k = max(0, min(int(k), len(features.labels) - (exclude is not None)))
    if k == 0:
        return []
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
    return neighbours(features, query_vector(features, query_index), k, exclude=int(query_index), index=index)
