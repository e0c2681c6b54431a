"""Model A's and model B's neighbours side by side in the Retrieval panel (issue 41): model B's
own feature file, computed through File ▸ Compute Features for Model B, a query chosen by a
mouse click in the dataset browser, and each neighbour marked right or wrong by the label
equality computed here from the dataset."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

pytestmark = pytest.mark.gui

_CORRECT = Qt.UserRole + 2  # the retrieval panel's right/wrong role


@pytest.fixture(scope="module")
def other_ckpt(tmp_path_factory):
    """small_ckpt's architecture (gui conftest) with other random weights (seed 1)."""
    import torch

    from dmlviewer.core.models import build_model, default_config, save_checkpoint

    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("ckpt-b") / "other.pt"
    save_checkpoint(path, build_model(default_config(backbone="small_cnn", dim=32, image_size=64)))
    return path


def _marks(results) -> list[bool]:
    return [bool(results.item(i).data(_CORRECT)) for i in range(results.count())]


def test_model_bs_neighbours_show_beside_model_as_each_marked_right_or_wrong(window, demo_root, small_ckpt,
                                                                               other_ckpt, wait_ready, qtbot):
    from dmlviewer.core.evaluate import retrieve

    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)  # A's, extracted for a small dataset
    panel, session, dataset = window.retrieval, window.session, window.dataset
    compute_b, open_b = window.compare.compute_features_action, window.compare.open_features_action
    # without model B nothing changes: one column, no B actions
    assert not panel.column_b.isVisible() and not panel.source_b.isVisible()
    assert not compute_b.isEnabled() and not open_b.isEnabled()
    assert compute_b in window.menuBar().actions()[0].menu().actions()  # File ▸ Compute Features for Model B

    window.open_compare(other_ckpt)
    qtbot.waitUntil(lambda: session.slot("compare") is not None, timeout=30000)
    assert compute_b.isEnabled() and open_b.isEnabled()
    assert panel.column_b.isVisible() and panel.extract_b_button.isVisible()
    assert "no features" in panel.source_b.text()
    compute_b.trigger()
    qtbot.waitUntil(lambda: session.features_ready("compare"), timeout=60000)
    b_features = session.slot_features["compare"].features
    assert b_features.attrs["checkpoint_sha256"] == session.slot("compare").sha256 != session.model_sha
    assert session.features is not b_features and session.features_ready("primary")

    # a query chosen as a user does: a click on its thumbnail in the dataset browser
    browser = window.browser
    query = next(i for i in range(len(dataset)) if i != window.query_index
                 and browser.position_rect(i).intersects(browser.view.viewport().rect()))
    QTest.mouseClick(browser.view.viewport(), Qt.LeftButton, Qt.NoModifier, browser.position_rect(query).center())
    assert window.query_index == query
    k, path = panel.k_spin.value(), dataset.paths[query]
    want_results = retrieve(session.features, session.features.paths.index(path), k)
    want_results_b = retrieve(b_features, b_features.paths.index(path), k)
    qtbot.waitUntil(lambda: not panel.searching and panel.results == want_results
                    and panel.results_b == want_results_b, timeout=20000)
    assert [r["path"] for r in panel.results] != [r["path"] for r in panel.results_b]  # two models, two lists

    # right or wrong: the neighbour's class (read from the dataset by its path) is the query's
    def expected(results) -> list[bool]:
        return [int(dataset.labels[dataset.paths.index(r["path"])]) == int(dataset.labels[query]) for r in results]

    want_a, want_b = expected(panel.results), expected(panel.results_b)
    assert _marks(panel.list) == want_a and _marks(panel.list_b) == want_b
    assert True in want_a + want_b and False in want_a + want_b  # both marks are exercised
    assert panel.list.count() == panel.list_b.count() == k

    # a click on one of B's neighbours makes it model B's own reference
    target = dataset.paths.index(panel.results_b[1]["path"])
    QTest.mouseClick(panel.list_b.viewport(), Qt.LeftButton, Qt.NoModifier,
                     panel.list_b.visualItemRect(panel.list_b.item(1)).center())
    expected_b = None if target == window.reference_index else target
    assert window.query_index == query and session.reference_b == expected_b

    # Stop Comparing: one column again
    window.compare.stop_action.trigger()
    assert not panel.column_b.isVisible() and not compute_b.isEnabled()


def test_a_feature_file_of_model_a_opened_for_model_b_is_flagged_naming_model_b(window, demo_root, small_ckpt,
                                                                              other_ckpt, wait_ready, qtbot):
    """Open Features for Model B with model A's file: B's column stays empty and says why,
    naming model B; model A's neighbours are unaffected."""
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    window.open_compare(other_ckpt)
    qtbot.waitUntil(lambda: window.session.slot("compare") is not None, timeout=30000)
    panel = window.retrieval
    assert window.open_features(window.features_path, "compare")
    qtbot.waitUntil(lambda: not panel.searching, timeout=10000)
    assert panel.list_b.count() == 0 and panel.list.count() == panel.k_spin.value()
    assert "model B" in panel.source_b.text() and "Features of another model." in panel.source_b.text()
    assert panel.extract_b_button.isVisible()
    assert window.session.features_chosen is False  # model A's file is still A's computed one
