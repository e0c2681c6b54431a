"""Interactive retrieval with a region of the query (seed 000 Sec. 5.4).

The partial feature of a region is the sum of the position contributions ``C_ij`` (Eq. 3,
"the equivalent partial feature W_ij A_ij") over the grid cells the region covers, each cell
weighted by the fraction of its area inside the region (:func:`.grid.region_cell_weights`;
a region covering the whole image gives ``E - B``). The bias belongs to no position and is
left out. Stored embeddings are ranked by their cosine with the partial feature.

``region = (y0, x0, y1, x1)`` in pixel-edge coordinates of the original query image (the
``retrieve --region`` order): ``(0, 0, H, W)`` is the whole image.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dmlviewer.core.explain.decomposition import forward_decomposed
from dmlviewer.core.explain.grid import region_cell_weights
from dmlviewer.core.explain.inputs import ImageLike, as_device, as_rgb, eval_mode


def region_feature(
    model: torch.nn.Module,
    image: ImageLike,
    region: tuple[float, float, float, float],
    device: str | torch.device = "cpu",
    size: int | None = None,
) -> np.ndarray:
    """Partial feature (D float32, not normalized) of ``region`` of ``image``."""
    rgb = as_rgb(image)
    x = model.preprocess(rgb, size)[None].to(as_device(device))
    with eval_mode(model):
        _, lin = forward_decomposed(model, x)
    weights = region_cell_weights(region, rgb.shape[:2], lin.grid).reshape(-1)
    contrib = lin.contributions[0].float().cpu().numpy()
    return (weights @ contrib).astype(np.float32)


def region_query(
    model: torch.nn.Module,
    image: ImageLike,
    region: tuple[float, float, float, float],
    features,
    k: int = 10,
    device: str | torch.device = "cpu",
    index=None,
    exclude: int | None = None,
) -> list[dict]:
    """Top ``k`` stored images by cosine with the region's partial feature.

    ``features``: a :class:`dmlviewer.core.evaluate.Features`, a lazily opened ``FeatureFile``
    or the path of a feature file; ``index``: an approximate index of that file (exact search
    without one). ``exclude``: the row of the query image itself in ``features``, left out of
    the results as :func:`dmlviewer.core.evaluate.retrieve` leaves it out of whole-image
    retrieval (None when the query is not a stored image). Returns dicts ``index path label
    similarity`` (as ``retrieve``), most similar first.
    """
    from dmlviewer.core.evaluate.retrieval import neighbours

    if isinstance(features, (str, Path)):
        from dmlviewer.core.evaluate import read_features

        features = read_features(features, include_raw=False, include_groups=False)
    feat = region_feature(model, image, region, device)
    if not float(np.linalg.norm(feat)) > 0:
        raise ValueError("the region's partial feature is zero: the region covers no contributing position")
    if exclude is not None and not 0 <= int(exclude) < len(features.labels):
        raise IndexError(f"exclude={exclude} out of range: the feature file has {len(features.labels)} items")
    return neighbours(features, feat, k, exclude=None if exclude is None else int(exclude), index=index)
