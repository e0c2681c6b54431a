"""Retrieval by a region of the query (seed 000 Sec. 5.4), cross-view aware (issue 25).

Apart from :mod:`.retrieval` because it needs :mod:`dmlviewer.core.explain.region`, which
itself ranks with :mod:`.retrieval`.
"""

from __future__ import annotations

import os

import numpy as np


def region_retrieve(model, image, region: tuple[float, float, float, float], features, k: int = 10,
                    device="cpu", index=None, query_row: int | None = None) -> list[dict]:
    """Top ``k`` stored images by cosine with the partial feature of ``region`` of ``image``
    (seed 000 Sec. 5.4; :func:`dmlviewer.core.explain.region_query`), the query's own row
    ``query_row`` (``None``: not a stored image) left out. With a two-branch model the partial
    feature comes from the query's branch (the stored row's; the query branch otherwise) at that
    branch's input shape, and a two-branch feature file is searched in the query's gallery
    (:func:`.retrieval.gallery_rows`; every split when the query is not stored)."""
    from dmlviewer.core.explain.region import region_feature, region_query

    from .extract import is_two_branch
    from .retrieval import branch_column, gallery_rows, neighbours

    if isinstance(features, (str, os.PathLike)):
        from .store import read_features

        features = read_features(features, include_raw=False, include_groups=False)
    if query_row is not None and not 0 <= int(query_row) < len(features.labels):
        raise IndexError(f"query row {query_row} out of range: the feature file has {len(features.labels)} items")
    column = branch_column(features)
    if not is_two_branch(model) and column is None:
        return region_query(model, image, region, features, k=k, device=device, index=index, exclude=query_row)
    code = int(column[int(query_row)]) if column is not None and query_row is not None else 0
    if is_two_branch(model):
        side = ("query", "reference")[code]
        feat = region_feature(model.branch(side), image, region, device, size=tuple(model.input_shapes[side]))
    else:
        feat = region_feature(model, image, region, device)
    if not float(np.linalg.norm(feat)) > 0:
        raise ValueError("the region's partial feature is zero: the region covers no contributing position")
    split = None if query_row is None else str(features.split[int(query_row)])
    rows = None if column is None else gallery_rows(features, code, split)
    return neighbours(features, feat, k, exclude=query_row, index=index, rows=rows)
