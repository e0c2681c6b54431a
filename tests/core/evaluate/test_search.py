"""Search at scale: chunked exact search (the reference), the lazy feature file, and the
optional faiss index (built with progress, tied to its feature file, rebuilt when stale)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dmlviewer.core.evaluate import open_features, read_features, retrieve, update_attrs, write_features
from dmlviewer.core.evaluate import search as S
from dmlviewer.core.progress import CancelToken, Cancelled, run_to_end


def _clustered(n: int, dim: int = 32, clusters: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(clusters, size=n)
    centres = rng.normal(size=(clusters, dim)).astype(np.float32)
    x = centres[labels] + 0.7 * rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True), labels


def _write(path, emb, labels, sha="a" * 64):
    write_features(path, {"embeddings_raw": emb, "labels": labels, "paths": [f"c{l}/{i}.jpg" for i, l in enumerate(labels)],
                          "split": "test"}, {"checkpoint_sha256": sha})
    return path


def _reference(emb: np.ndarray, q: np.ndarray, k: int, exclude: int) -> tuple[np.ndarray, np.ndarray]:
    """Full sort by (-similarity, row): what retrieve always did."""
    sims = emb @ q
    sims[exclude] = -np.inf
    order = np.lexsort((np.arange(len(sims)), -sims))[:k]
    return sims[order], order


def test_chunked_exact_search_equals_a_full_sort_with_ties_and_exclusion(tmp_path):
    emb, labels = _clustered(1000)
    emb[500:520] = emb[3]  # twenty exact ties with row 3, across chunk borders below
    path = _write(tmp_path / "f.h5", emb, labels)
    stored = read_features(path).embeddings  # normalized by the store
    lazy = open_features(path)
    for q in (3, 510, 999):
        want_s, want_r = _reference(stored, stored[q], 15, q)
        for source, chunk in ((stored, 1000), (stored, 7), (lazy, 64), (lazy, 333)):
            sims, rows = S.exact_search(source, stored[q], 15, exclude=np.array([q]), chunk_rows=chunk)
            assert rows[0].tolist() == want_r.tolist()
            np.testing.assert_allclose(sims[0], want_s, rtol=0, atol=1e-6)
    # several queries at once, k beyond the rows left
    sims, rows = S.exact_search(stored[:4], stored[:2], 10, exclude=np.array([0, 1]))
    assert rows.shape == (2, 3) and 0 not in rows[0] and 1 not in rows[1]


def test_lazy_feature_file_reads_rows_without_loading_everything(tmp_path):
    emb, labels = _clustered(300)
    path = _write(tmp_path / "f.h5", emb, labels)
    eager, lazy = read_features(path), open_features(path)
    assert len(lazy) == 300 and lazy.dim == 32 and lazy.attrs["checkpoint_sha256"] == "a" * 64
    assert lazy._cache == {}  # nothing per-row read on opening
    np.testing.assert_array_equal(lazy.read("embeddings", [7, 2, 7]), eager.embeddings[[7, 2, 7]])
    np.testing.assert_array_equal(np.concatenate([c for _, c in lazy.iter_chunks(chunk_rows=64)]), eager.embeddings)
    assert lazy.paths == eager.paths and np.array_equal(lazy.labels, eager.labels)
    assert np.array_equal(lazy.indices("test"), eager.indices("test"))
    for q in (0, 17, 299):
        assert retrieve(lazy, q, 8) == retrieve(eager, q, 8)
    with pytest.raises(IndexError, match="out of range"):
        retrieve(lazy, 300, 3)
    update_attrs(path, checkpoint_sha256="b" * 64)  # same rows, but a rewritten file ...
    _write(path, emb[:200], labels[:200])  # ... then another extraction replaces it
    with pytest.raises(ValueError, match="changed after it was opened"):
        lazy.read("embeddings", [0])


needs_faiss = pytest.mark.skipif(S.faiss_module() is None, reason="faiss (the search extra) is not installed")


@needs_faiss
def test_faiss_index_is_built_with_progress_tuned_saved_and_rebuilt_when_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "MIN_IVF_ROWS", 1000)  # an IVF index on a small file
    monkeypatch.setattr(S, "CHUNK_ROWS", 700)
    emb, labels = _clustered(4000, dim=32, clusters=60)
    path = _write(tmp_path / "f.h5", emb, labels)
    lazy = open_features(path)
    assert S.index_state(lazy)[0] == "missing" and S.load_index(lazy) is None

    events = list(S.build_index(path))
    steps = [e.current for e in events if e.kind == "step"]
    assert steps == sorted(steps) and len(steps) >= 12 and steps[-1] == 2 * 4000  # two passes of 6 chunks
    result = events[-1].data["result"]
    assert result["kind"] == "IVF64,Flat" and result["recall"] >= S.TARGET_RECALL
    assert 1 <= result["nprobe"] <= 64
    assert S.index_state(lazy)[0] == "ready"
    index = S.load_index(lazy)
    assert len(index) == 4000 and index.nprobe == result["nprobe"]

    # recall against exact search on rows the tuning did not choose, through retrieve()
    stored = read_features(path).embeddings
    hits = []
    for q in range(0, 4000, 97):
        approx = [r["index"] for r in retrieve(lazy, q, 10, index=index)]
        assert q not in approx and len(approx) == 10
        hits.append(len(set(approx) & set(_reference(stored, stored[q], 10, q)[1].tolist())) / 10)
    assert np.mean(hits) >= 0.9
    sims = [r["similarity"] for r in retrieve(lazy, 5, 10, index=index)]
    assert sims == sorted(sims, reverse=True)

    # another checkpoint's metrics pass: the same rows, but the hash differs -> stale, rebuilt
    update_attrs(path, checkpoint_sha256="c" * 64)
    lazy = open_features(path)
    assert S.index_state(lazy) == ("stale", "built for another checkpoint")
    assert S.load_index(lazy) is None
    run_to_end(S.build_index(path))
    assert S.index_state(lazy)[0] == "ready"
    # a re-extraction with other embeddings (same checkpoint): stale
    _write(path, _clustered(4000, dim=32, clusters=60, seed=1)[0], labels, sha="c" * 64)
    assert S.index_state(open_features(path))[0] == "stale"


@needs_faiss
def test_an_index_file_that_is_not_the_one_described_is_not_parsed(tmp_path):
    emb, labels = _clustered(500)
    path = _write(tmp_path / "f.h5", emb, labels)
    run_to_end(S.build_index(path))
    lazy = open_features(path)
    assert S.load_index(lazy) is not None
    index_file, _ = S.index_paths(path)
    data = bytearray(index_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    index_file.write_bytes(bytes(data))
    assert S.load_index(lazy) is None  # the hash differs: faiss's reader never sees it


@needs_faiss
def test_cancelling_the_build_leaves_no_index(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "CHUNK_ROWS", 100)
    emb, labels = _clustered(1000)
    path = _write(tmp_path / "f.h5", emb, labels)
    cancel = CancelToken()
    job = S.build_index(path, cancel=cancel)
    next(e for e in job if e.kind == "step")
    cancel.cancel()
    with pytest.raises(Cancelled):
        list(job)
    assert not any(p.exists() for p in S.index_paths(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.h5"]


def test_without_faiss_search_is_exact_and_the_index_says_why(tmp_path, monkeypatch):
    emb, labels = _clustered(300)
    path = _write(tmp_path / "f.h5", emb, labels)
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss -> ImportError
    assert S.faiss_module() is None
    lazy = open_features(path)
    state, reason = S.index_state(lazy)
    assert state == "unavailable" and "dmlviewer[search]" in reason
    assert S.load_index(lazy) is None
    with pytest.raises(RuntimeError, match="needs faiss"):
        run_to_end(S.build_index(path))
    stored = read_features(path).embeddings
    assert [r["index"] for r in retrieve(lazy, 4, 6)] == _reference(stored, stored[4], 6, 4)[1].tolist()


@needs_faiss
def test_retrieve_cli_with_index_builds_it_once_and_agrees_with_exact(tmp_path, capsys):
    import json

    from dmlviewer.cli import main

    emb, labels = _clustered(600)
    path = _write(tmp_path / "f.h5", emb, labels)
    assert main(["retrieve", "--features", str(path), "--query", "3", "-k", "5", "--json"]) == 0
    exact = json.loads(capsys.readouterr().out)
    assert main(["retrieve", "--features", str(path), "--query", "3", "-k", "5", "--json", "--index"]) == 0
    approx = json.loads(capsys.readouterr().out)
    assert S.index_paths(path)[0].exists()
    # 600 rows: below MIN_IVF_ROWS the index is exact (flat), so the lists agree
    assert [r["index"] for r in approx["results"]] == [r["index"] for r in exact["results"]]
    stored = read_features(path).embeddings
    assert [r["index"] for r in exact["results"]] == _reference(stored, stored[3], 5, 3)[1].tolist()


def test_lazy_reads_of_scattered_rows_across_storage_chunks(tmp_path):
    emb, labels = _clustered(20_000, dim=32)  # 8,192-row storage chunks: three of them
    path = _write(tmp_path / "f.h5", emb, labels)
    eager, lazy = read_features(path), open_features(path)
    rows = np.random.default_rng(1).integers(0, 20_000, size=3000)  # unsorted, with repeats
    rows[:3] = [19_999, 0, 8192]
    np.testing.assert_array_equal(lazy.read("embeddings", rows), eager.embeddings[rows])
    np.testing.assert_array_equal(lazy.read("labels", rows), eager.labels[rows])
    assert lazy.read("paths", rows).tolist() == [eager.paths[i] for i in rows]
    assert lazy.read("embeddings", []).shape == (0, 32)
