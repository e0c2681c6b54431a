"""Metrics against pytorch-metric-learning's AccuracyCalculator and brute-force definitions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from pytorch_metric_learning.distances import CosineSimilarity
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
from pytorch_metric_learning.utils.inference import CustomKNN

from dmlviewer.core.evaluate.metrics import (
    compute_metrics,
    nearest_neighbors,
    pairwise_f1,
    retrieval_metrics,
)

PML_KEYS = {"recall@1": "precision_at_1", "r_precision": "r_precision", "map@r": "mean_average_precision_at_r"}


def _embeddings(n: int, d: int, classes: int, spread: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Continuous random data (no ties): clustered when ``spread`` is small."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centers = rng.normal(size=(classes, d))
    emb = (centers[labels] + spread * rng.normal(size=(n, d))).astype(np.float32)
    return emb / np.linalg.norm(emb, axis=1, keepdims=True), labels


def _pml(query, q_labels, reference=None, r_labels=None):
    calc = AccuracyCalculator(
        include=tuple(PML_KEYS.values()), k="max_bin_count", device=torch.device("cpu"),
        knn_func=CustomKNN(CosineSimilarity()),
    )
    return calc.get_accuracy(query, q_labels, reference, r_labels, ref_includes_query=False)


@pytest.mark.parametrize("spread", [0.3, 1.0, 5.0], ids=["clustered", "overlapping", "random"])
def test_matches_accuracy_calculator(spread):
    emb, labels = _embeddings(500, 24, 13, spread, seed=1)
    labels[0] = 1000  # a class of one: no query there, but still a reference item
    ours = retrieval_metrics(emb, labels, chunk_size=37)  # chunks that do not divide N
    theirs = _pml(emb, labels)
    for key, pml_key in PML_KEYS.items():
        assert ours[key] == pytest.approx(theirs[pml_key], abs=1e-6), key
    assert ours["num_queries"] == 499


def test_query_gallery_matches_accuracy_calculator():
    emb, labels = _embeddings(400, 16, 9, 1.0, seed=2)
    queries = np.zeros(400, bool)
    queries[::3] = True
    ours = retrieval_metrics(emb, labels, queries=queries, gallery=~queries)
    theirs = _pml(emb[queries], labels[queries], emb[~queries], labels[~queries])
    for key, pml_key in PML_KEYS.items():
        assert ours[key] == pytest.approx(theirs[pml_key], abs=1e-6), key


def _brute_force(emb: np.ndarray, labels: np.ndarray, ks) -> dict:
    """The definitions of DESIGN.md evaluated query by query on the full similarity matrix."""
    sim = emb @ emb.T
    out = {f"recall@{k}": [] for k in ks} | {"map@r": [], "r_precision": [], "knn_acc": []}
    for q in range(len(labels)):
        order = [i for i in np.argsort(-sim[q], kind="stable") if i != q]
        rel = labels[order] == labels[q]
        r = int(rel.sum())
        if r == 0:
            continue
        for k in ks:
            out[f"recall@{k}"].append(float(rel[:k].any()))
        out["r_precision"].append(rel[:r].sum() / r)
        out["map@r"].append(sum(rel[:i + 1].sum() / (i + 1) for i in range(r) if rel[i]) / r)
        out["knn_acc"].append(float(rel[:5].sum() >= 3))
    return {k: float(np.mean(v)) for k, v in out.items()}


def test_matches_brute_force_definitions_for_any_k():
    emb, labels = _embeddings(150, 8, 6, 0.8, seed=3)
    ks = (1, 3, 10, 30)
    ours = retrieval_metrics(emb, labels, ks=ks)
    for key, value in _brute_force(emb, labels, ks).items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key


def test_nearest_neighbors_exclude_self_and_are_sorted():
    emb, _ = _embeddings(90, 8, 4, 1.0, seed=4)
    sims, idx = nearest_neighbors(emb, 7, chunk_size=16)
    full = emb @ emb.T
    np.fill_diagonal(full, -np.inf)
    expected = np.argsort(-full, axis=1)[:, :7]
    np.testing.assert_array_equal(idx, expected)
    np.testing.assert_allclose(sims, np.take_along_axis(full, expected, 1), atol=1e-6)


def test_pairwise_f1_equals_pair_enumeration():
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 5, 60)
    clusters = rng.integers(0, 6, 60)
    tp = fp = fn = 0
    for a, b in itertools.combinations(range(60), 2):
        same_class, same_cluster = labels[a] == labels[b], clusters[a] == clusters[b]
        tp += same_class and same_cluster
        fp += same_cluster and not same_class
        fn += same_class and not same_cluster
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    assert pairwise_f1(labels, clusters) == pytest.approx(2 * precision * recall / (precision + recall))


def test_clustering_metrics_separate_clustered_from_random():
    tight = compute_metrics(*_embeddings(300, 16, 5, 0.1, seed=6))
    loose = compute_metrics(*_embeddings(300, 16, 5, 10.0, seed=6))
    assert tight["nmi"] == pytest.approx(1.0) and tight["f1"] == pytest.approx(1.0)
    assert loose["nmi"] < 0.2 and loose["f1"] < 0.4
    expected = {"recall@1", "recall@2", "recall@4", "recall@8", "nmi", "f1", "map@r", "r_precision",
                "knn_acc", "num_queries"}
    assert set(tight) == expected
