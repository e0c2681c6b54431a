"""Nearest neighbours of one stored item (``dmlviewer retrieve``)."""

from __future__ import annotations

import os

import numpy as np


def retrieve(features, query_index: int, k: int = 10) -> list[dict]:
    """The ``k`` items most similar (cosine) to item ``query_index`` of ``features`` (a
    ``Features`` or a feature file path), the query itself excluded, best first (ties by
    index). Each: ``{"index", "path", "label", "similarity"}``."""
    from .store import read_features

    if isinstance(features, (str, os.PathLike)):
        features = read_features(features, include_raw=False, include_groups=False)
    n = len(features)
    if not 0 <= int(query_index) < n:
        raise IndexError(f"query index {query_index} out of range: the feature file has {n} items (0..{n - 1})")
    emb = np.asarray(features.embeddings, dtype=np.float32)
    sims = emb @ emb[query_index]
    sims[query_index] = -np.inf
    k = max(0, min(int(k), n - 1))
    if k == 0:
        return []
    top = np.lexsort((np.arange(n), -sims))[:k]
    return [
        {"index": int(i), "path": features.paths[i], "label": int(features.labels[i]), "similarity": float(sims[i])}
        for i in top
    ]
