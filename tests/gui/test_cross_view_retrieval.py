"""Cross-view retrieval in the app (issue 25): with a CVUSA-layout set and a two-branch model open,
features are computed with each image through its own branch, a street query's neighbours are
the aerial images of its split (its own aerial among them, framed green), a dragged region of
the street searches the same aerial images, and a two-branch model on other data says in one
line why it does not retrieve. Random-weight two-branch small_cnn; expected embeddings come from
running each branch directly on its preprocessed image."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt
from tiny_two_branch import tiny_two_branch_checkpoint

pytestmark = pytest.mark.gui

PANORAMA, AERIAL = (32, 128), 64


@pytest.fixture(scope="module")
def cross_view_root(tmp_path_factory):
    from dmlviewer.core.data.cross_view import make_cross_view_data

    return make_cross_view_data(tmp_path_factory.mktemp("cvr") / "data", pairs=8, seed=1, aerial_size=AERIAL,
                                panorama_shape=PANORAMA, test_fraction=0.5)


@pytest.fixture(scope="module")
def two_branch_ckpt(tmp_path_factory):
    return tiny_two_branch_checkpoint(tmp_path_factory.mktemp("ckpt2"), PANORAMA, AERIAL)


def test_a_street_query_lists_the_aerial_images_of_its_split(window, cross_view_root, two_branch_ckpt, wait_ready,
                                                            qtbot):
    from dmlviewer.core.data import load_dataset_image
    from dmlviewer.core.evaluate.region_retrieval import region_retrieve
    from dmlviewer.core.evaluate.retrieval import retrieve

    assert window.open_checkpoint(two_branch_ckpt) and window.open_dataset(cross_view_root)
    wait_ready(window.pair_view)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    ds, feats, model, panel = window.dataset, window.features, window.model, window.retrieval

    # extraction ran each image through its own branch at its own input shape
    for i in (0, 1, 10, 11):
        side = ds.image_branch(i)
        with torch.no_grad():
            want = model.branch(side)(model.preprocess_of(side)(load_dataset_image(ds, i))[None]).embedding[0]
        row = feats.paths.index(ds.paths[i])
        np.testing.assert_allclose(feats.embeddings[row], want.numpy(), atol=1e-5)

    street = int(np.flatnonzero((ds.split == "test") & (ds.branches == "query"))[1])
    aerial = street + 1  # pair k: street 2k, aerial 2k + 1
    window.set_pair(street, aerial)
    wait_ready(window.pair_view)
    test_aerials = {ds.paths[i] for i in np.flatnonzero((ds.split == "test") & (ds.branches == "reference"))}
    qtbot.waitUntil(lambda: len(panel.results) == len(test_aerials) and not panel.searching, timeout=10000)
    assert {r["path"] for r in panel.results} == test_aerials
    assert "street query searches the aerial images" in panel.source.text()
    row = feats.paths.index(ds.paths[street])
    assert panel.results == retrieve(feats, row, panel.k_spin.value())
    own = [r["path"] for r in panel.results].index(ds.paths[aerial])
    assert panel.list.item(own).data(Qt.UserRole + 2) is True  # the pair's own aerial is framed green
    assert sum(bool(panel.list.item(i).data(Qt.UserRole + 2)) for i in range(panel.list.count())) == 1

    # a region of the street searches the same aerial images, embedded by the query branch
    image = window.pair_view.images.query
    region = (0.0, 0.0, image.shape[0] / 2, image.shape[1] / 4)
    window._on_region(region)
    want = region_retrieve(model, image, region, feats, k=panel.k_spin.value(), query_row=row)
    qtbot.waitUntil(lambda: panel.results == want and not panel.searching, timeout=10000)
    assert {r["path"] for r in panel.results} == test_aerials
    assert not window.dialogs

    # however large, a cross-view file gets no approximate index (a query searches a subset, exactly)
    from dmlviewer.gui.retrieval import search_index

    search_index.INDEX_MIN_ROWS, large = 1, search_index.INDEX_MIN_ROWS
    try:
        window.index_keeper.set_features(feats)
    finally:
        search_index.INDEX_MIN_ROWS = large
    assert window.index_keeper.job is None and panel.index is None


def test_a_two_branch_model_on_data_without_branches_says_why_it_does_not_retrieve(window, demo_root,
                                                                                   two_branch_ckpt, wait_ready,
                                                                                   qtbot):
    assert window.open_checkpoint(two_branch_ckpt) and window.open_dataset(demo_root)
    qtbot.wait(300)
    panel = window.retrieval
    assert panel.cross_view_problem() and "cross-view data" in panel.source.text()
    assert not panel.extract_button.isVisible() and panel.results == []
    assert window.jobs.extract_job is None and window.features is None
