"""The app keeps a faiss index for large feature files: built as a job, used by the retrieval
panel, rebuilt when it belongs to another checkpoint."""

from __future__ import annotations

import pytest

from dmlviewer.core.evaluate import search as S

pytestmark = [pytest.mark.gui, pytest.mark.skipif(S.faiss_module() is None, reason="faiss not installed")]


def test_large_feature_files_get_an_index_that_retrieval_uses(window, demo_root, small_ckpt, qtbot, monkeypatch,
                                                              tmp_path, dialogs):
    from dmlviewer.core.evaluate import evaluate, open_features, retrieve, update_attrs
    from dmlviewer.core.progress import run_to_end
    from dmlviewer.gui.retrieval import search_index

    monkeypatch.setattr(search_index, "INDEX_MIN_ROWS", 10)  # the demo's features count as large
    path = tmp_path / "f.h5"
    run_to_end(evaluate(small_ckpt, demo_root, "all", path))
    assert window.open_dataset(demo_root) and window.open_features(path)
    panel = window.retrieval
    job = window.index_keeper.job
    assert job is not None and "Search index" in job.name
    qtbot.waitUntil(lambda: panel.index is not None, timeout=60000)
    assert S.index_state(open_features(path))[0] == "ready" and S.index_paths(path)[0].exists()
    assert "approximate search" in panel.source.text()
    panel.set_query(3)
    row = window.features.paths.index(window.dataset.paths[3])
    # few rows: the index is exact (flat), so it returns what exact search returns (faiss's
    # inner products may round differently in the last bits)
    exact = retrieve(window.features, row, panel.k_spin.value())
    qtbot.waitUntil(lambda: [r["index"] for r in panel.results] == [r["index"] for r in exact], timeout=10000)
    assert [r["similarity"] for r in panel.results] == pytest.approx([r["similarity"] for r in exact], abs=1e-5)

    # the same file re-evaluated by another checkpoint: the kept index is stale and rebuilt
    update_attrs(path, checkpoint_sha256="f" * 64)
    assert window.open_features(path)
    assert panel.index is None and window.index_keeper.job is not None
    qtbot.waitUntil(lambda: panel.index is not None, timeout=60000)
    assert S.index_state(open_features(path))[0] == "ready"
    assert not dialogs
