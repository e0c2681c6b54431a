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


def test_the_last_session_reopens_model_bs_feature_file_and_skips_one_deleted_since(window, demo_root, small_ckpt,
                                                                                 other_ckpt, wait_ready, qtbot,
                                                                                 tmp_path, dialogs):
    """Model B's feature file, computed in one run, is remembered with the last session: a new
    window reopening it gets the file back in the compare slot, and B's neighbours, without
    extracting again; a remembered file deleted since is skipped without a dialog."""
    import json
    from pathlib import Path

    from dmlviewer.core.evaluate import retrieve
    from dmlviewer.gui.window import settings
    from dmlviewer.gui.window.main_window import MainWindow

    settings.set_output_dir(tmp_path / "outputs")
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    window.open_compare(other_ckpt)
    qtbot.waitUntil(lambda: window.session.slot("compare") is not None, timeout=30000)
    window.compare.compute_features_action.trigger()
    qtbot.waitUntil(lambda: window.session.features_ready("compare"), timeout=60000)
    b_path, a_path = window.session.slot_features["compare"].path, window.features_path
    assert b_path != a_path
    window.close()
    assert json.loads(settings.session_values()["last"])["compare_features"] == b_path

    def reopen():
        again = MainWindow()
        qtbot.addWidget(again)
        again.show()
        jobs: list = []  # (kind, slot) of every job the new window starts
        again.session.events.jobs.connect(lambda: jobs.extend((e.kind, e.stamp.slot)
                                                              for e in again.session.jobs.values()))
        again.open_in_background(last_session=settings.session_values())
        qtbot.waitUntil(lambda: not again.loading, timeout=120000)
        return again, jobs

    second, jobs = reopen()
    session = second.session
    assert session.slot("compare").source.path == str(other_ckpt) and second.features_path == a_path
    held = session.slot_features["compare"]
    assert held.path == b_path and session.features_ready("compare")
    assert held.features.attrs["checkpoint_sha256"] == session.slot("compare").sha256
    wait_ready(second.pair_view, timeout=120000)
    panel, query = second.retrieval, second.query_index
    want_b = retrieve(held.features, list(held.features.paths).index(second.dataset.paths[query]),
                      panel.k_spin.value())
    qtbot.waitUntil(lambda: not panel.searching and panel.results_b == want_b, timeout=20000)
    assert panel.list_b.count() == panel.k_spin.value()
    assert ("extract", "compare") not in jobs  # B's neighbours from the remembered file, not extracted again
    assert dialogs == []
    second.close()

    Path(b_path).unlink()
    third, jobs = reopen()
    assert third.session.slot("compare") is not None and third.features_path == a_path  # the rest reopens
    assert third.session.slot_features["compare"].features is None
    assert "Cannot" not in third.statusBar().currentMessage()
    assert dialogs == [] and ("extract", "compare") not in jobs
    third.shutdown()


@pytest.mark.parametrize("content", [None, b"not an HDF5 file\n" * 4, b"\x89HDF\r\n\x1a\n" + b"\xff" * 512])
def test_a_missing_or_hostile_feature_file_for_model_b_is_one_dialog_and_changes_nothing(
        window, demo_root, small_ckpt, other_ckpt, tmp_path, qtbot, content):
    """File ▸ Open Features for Model B… on a file that is not there, is text, or is a broken
    HDF5 file: one dialog naming the file, no traceback, model B's features as they were."""
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    window.open_compare(other_ckpt)
    qtbot.waitUntil(lambda: window.session.slot("compare") is not None, timeout=30000)
    path = tmp_path / "b.h5"
    if content is not None:
        path.write_bytes(content)
    before = len(window.dialogs)
    assert window.open_features(path, "compare") is False
    assert len(window.dialogs) == before + 1
    title, message, _details = window.dialogs[-1]
    assert title == "Cannot open features" and "Traceback" not in message
    assert window.session.slot_features["compare"].features is None
