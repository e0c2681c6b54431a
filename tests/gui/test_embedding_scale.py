"""The embedding view on a large feature file: PCA over every row (streamed), t-SNE on a
sample it names, and a density image for all points when not all are drawn."""

from __future__ import annotations

import numpy as np
import pytest

from dmlviewer.core.evaluate import read_features, write_features
from dmlviewer.core.evaluate.store import FeatureFile
from dmlviewer.core.progress import run_to_end
from dmlviewer.gui.retrieval import embedding_view as EV

pytestmark = pytest.mark.gui


@pytest.fixture
def big_file(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    n = 3000
    x = rng.normal(size=(n, 16)).astype(np.float32) * np.linspace(3, 0.1, 16, dtype=np.float32)
    path = tmp_path / "f.h5"
    write_features(path, {"embeddings_raw": x, "labels": np.arange(n) % 7, "paths": [f"{i}.jpg" for i in range(n)],
                          "split": "test"})
    monkeypatch.setattr(EV, "SCATTER_MAX", 500)
    monkeypatch.setattr(FeatureFile, "CHUNK_ROWS", 256)  # many chunks
    return path


def test_pca_uses_every_row_streamed_and_draws_a_sample_over_the_density(qtbot, big_file):
    result = run_to_end(EV.projection_job(str(big_file), "pca"))
    emb = read_features(big_file).embeddings
    assert result["total"] == result["projected"] == 3000 and len(result["rows"]) == 500
    np.testing.assert_allclose(result["xy"], EV.pca_2d(emb)[result["rows"]], atol=1e-4)
    assert result["density"]["image"].sum() == 3000  # every point is in the density image
    # the streamed PCA is the SVD's, up to the sign of each axis
    centred = emb - emb.mean(0)
    _, _, vt = np.linalg.svd(centred.astype(np.float64), full_matrices=False)
    np.testing.assert_allclose(np.abs(EV.pca_2d(emb)), np.abs(centred @ vt[:2].T), atol=1e-4)

    view = EV.EmbeddingView(runner=_NoRunner())
    qtbot.addWidget(view)
    view.show_projection(result)
    assert "PCA of all 3,000 images, shaded by density; 500 drawn as points" in view.status.text()
    assert view.density.isVisible() and len(view.scatter.data) == 500


def test_tsne_says_it_used_a_sample(qtbot, big_file):
    result = run_to_end(EV.projection_job(str(big_file), "tsne", max_points=60))
    assert result["projected"] == 60 and result["total"] == 3000 and result["xy"].shape == (60, 2)
    assert "density" not in result
    view = EV.EmbeddingView(runner=_NoRunner())
    qtbot.addWidget(view)
    view.show_projection(result)
    assert "t-SNE of 60 of the 3,000 images (a seeded random sample" in view.status.text()
    assert not view.density.isVisible()


class _NoRunner:
    """Stands in for the JobRunner: these tests call the job and show its result directly."""
