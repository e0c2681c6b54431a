"""Retrieval and clustering metrics of an embedding (DESIGN.md, "Metrics JSON keys").

Retrieval metrics (seed 001 Sec. 4.1, seed 003 Sec. 5, Musgrave et al. 2020), every item a
query against all the others, the query itself excluded:

- ``recall@K``: share of queries with at least one same-class item among their K nearest
  neighbours (cosine similarity), for any list of K.
- ``r_precision``: with R = number of other items of the query's class, the share of the R
  nearest neighbours that are of the query's class.
- ``map@r``: MAP@R = (1/R) sum_{i<=R} P(i) rel(i), P(i) the precision at rank i.
- ``knn_acc``: at least 3 of the 5 nearest neighbours share the query's label (seed 003).

Queries whose class has no other item (R = 0) are left out of the retrieval metrics (as
pytorch-metric-learning's AccuracyCalculator does) but stay in the reference set;
``num_queries`` counts the queries used. Where a dataset divides its test images into queries
and a gallery (In-Shop), queries are ranked against the gallery only.

Clustering metrics: k-means on all items with as many clusters as classes (k-means++ seeding
with fixed seeds, then scikit-learn's Lloyd iterations); ``nmi`` is the normalized mutual
information between classes and clusters, ``f1`` the pairwise F1 (a pair of items is a
positive prediction when both fall in one cluster, a true positive when they also share a
class), counted from the contingency table.

Nearest neighbours are computed in chunks of queries on the device (chunked matrix product
and ``topk``), so memory stays O(chunk x N), never N x N: 60,000 x 512 fits on a laptop.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

#: bytes one chunk of the similarity matrix may take
CHUNK_BYTES = 256 * 2**20
#: k of the kNN accuracy (seed 003): correct when at least KNN_VOTES of KNN_K agree
KNN_K, KNN_VOTES = 5, 3


def _as_tensor(x: np.ndarray | torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))
    return t.to(device=device, dtype=dtype)


def _positions(selection: np.ndarray | None, n: int) -> np.ndarray:
    """Indices from a boolean mask, an index array or ``None`` (every item)."""
    if selection is None:
        return np.arange(n, dtype=np.int64)
    selection = np.asarray(selection)
    return np.flatnonzero(selection) if selection.dtype == bool else selection.astype(np.int64)


def iter_nearest_neighbors(
    queries: torch.Tensor, reference: torch.Tensor, k: int,
    self_index: torch.Tensor | None = None, chunk_size: int | None = None,
):
    """Yield ``(start, similarities, indices)`` per chunk of queries: the ``k`` reference rows
    with the largest dot product with queries ``start:start+len(chunk)``, best first.
    ``self_index[q]`` is the reference row of query q itself (excluded), or -1.
    Both matrices live on the device where the work should run."""
    n = reference.shape[0]
    if chunk_size is None:
        chunk_size = max(1, min(len(queries), CHUNK_BYTES // max(1, 4 * n)))
    for start in range(0, len(queries), chunk_size):
        stop = min(len(queries), start + chunk_size)
        sims = queries[start:stop] @ reference.T
        if self_index is not None:
            cols = self_index[start:stop]
            rows = torch.nonzero(cols >= 0).squeeze(1)
            sims[rows, cols[rows]] = -math.inf
        values, indices = torch.topk(sims, k, dim=1)
        yield start, values, indices


def _query_setup(labels: np.ndarray, queries: np.ndarray | None, gallery: np.ndarray | None):
    """Query and gallery positions, each query's own gallery row (or -1), and R per query
    (same-class gallery items other than the query)."""
    n = len(labels)
    q_pos, g_pos = _positions(queries, n), _positions(gallery, n)
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[g_pos] = np.arange(len(g_pos))
    self_row = row_of[q_pos]
    values, counts = np.unique(labels[g_pos], return_counts=True)
    same_class = np.zeros(len(q_pos), dtype=np.int64)
    if len(values):
        where = np.minimum(np.searchsorted(values, labels[q_pos]), len(values) - 1)
        found = values[where] == labels[q_pos]
        same_class[found] = counts[where[found]]
    r = same_class - (self_row >= 0)
    return q_pos, g_pos, self_row, r


def neighbour_depth(r: np.ndarray, gallery_size: int, ks: Sequence[int] = (1, 2, 4, 8)) -> int:
    """How many neighbours every metric needs: max K, the largest R, and 5 for the kNN accuracy,
    at most the number of other gallery items."""
    need = max(max(ks, default=1), int(r.max()) if len(r) else 0, KNN_K)
    return max(0, min(need, gallery_size - 1 if gallery_size else 0))


def nearest_neighbors(
    embeddings: np.ndarray | torch.Tensor, k: int, device: str | torch.device = "cpu",
    chunk_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest other items of every item by cosine similarity: ``(similarities,
    indices)``, both N x k, best first. Rows are L2-normalized here."""
    emb = torch.nn.functional.normalize(_as_tensor(embeddings, torch.float32, torch.device(device)), dim=1)
    self_index = torch.arange(len(emb), device=emb.device)
    sims, idx = [], []
    for _, s, i in iter_nearest_neighbors(emb, emb, k, self_index, chunk_size):
        sims.append(s.cpu())
        idx.append(i.cpu())
    return torch.cat(sims).numpy(), torch.cat(idx).numpy()


def retrieval_metrics(
    embeddings: np.ndarray | torch.Tensor,
    labels: np.ndarray,
    ks: Sequence[int] = (1, 2, 4, 8),
    device: str | torch.device = "cpu",
    queries: np.ndarray | None = None,
    gallery: np.ndarray | None = None,
    chunk_size: int | None = None,
) -> dict[str, float]:
    """Recall@K for each K, MAP@R, R-precision, kNN accuracy and ``num_queries``.

    By default every item is a query against all the others; ``queries`` and ``gallery``
    (boolean masks or index arrays) restrict both sides (In-Shop's query/gallery protocol)."""
    dev = torch.device(device)
    labels = np.asarray(labels, dtype=np.int64)
    ks = sorted({int(k) for k in ks})
    names = [f"recall@{k}" for k in ks] + ["map@r", "r_precision", "knn_acc"]
    empty = {**{name: float("nan") for name in names}, "num_queries": 0}
    q_pos, g_pos, self_row, r_np = _query_setup(labels, queries, gallery)
    depth = neighbour_depth(r_np, len(g_pos), ks)
    num_queries = int((r_np > 0).sum())
    if num_queries == 0 or depth == 0:
        return empty
    emb = torch.nn.functional.normalize(_as_tensor(embeddings, torch.float32, dev), dim=1)
    q_emb = emb if queries is None else emb[torch.from_numpy(q_pos).to(dev)]  # no copies by default
    g_emb = emb if gallery is None else emb[torch.from_numpy(g_pos).to(dev)]
    q_lab = torch.from_numpy(labels[q_pos]).to(dev)
    g_lab = torch.from_numpy(labels[g_pos]).to(dev)
    r_all = torch.from_numpy(r_np).to(dev)
    ranks = torch.arange(1, depth + 1, device=dev)

    sums = torch.zeros(len(names), dtype=torch.float64, device=dev)
    self_index = torch.from_numpy(self_row).to(dev)
    for start, _, idx in iter_nearest_neighbors(q_emb, g_emb, depth, self_index, chunk_size):
        stop = start + idx.shape[0]
        keep = r_all[start:stop] > 0
        if not bool(keep.any()):
            continue
        match = (g_lab[idx] == q_lab[start:stop, None])[keep]
        r = r_all[start:stop][keep].to(torch.float64)
        rel = match & (ranks[None, :] <= r[:, None])
        hits = torch.cumsum(rel, dim=1).to(torch.float64)
        values = [match[:, : min(k, depth)].any(dim=1).to(torch.float64) for k in ks]
        values.append((hits * rel / ranks).sum(dim=1) / r)  # MAP@R
        values.append(rel.sum(dim=1) / r)  # R-precision
        votes = match[:, : min(KNN_K, depth)].sum(dim=1)
        values.append((votes >= KNN_VOTES).to(torch.float64))
        sums += torch.stack([v.sum() for v in values])
    means = (sums / num_queries).tolist()
    return {**dict(zip(names, means)), "num_queries": num_queries}


def kmeans_plusplus(x: torch.Tensor, k: int, seed: int = 0) -> torch.Tensor:
    """Greedy k-means++ seeding (Arthur & Vassilvitskii; 2 + log k candidates per centre, as
    scikit-learn), on ``x``'s device: k x D initial centres. Written here because scikit-learn's
    seeding, not its Lloyd iterations, dominates k-means time on 512-d embeddings."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    n = x.shape[0]
    trials = 2 + int(math.log(k))
    sq = (x * x).sum(1)

    def sqdist(rows: torch.Tensor) -> torch.Tensor:  # len(rows) x N squared distances
        return (sq[rows, None] - 2 * (x @ x[rows].T).T + sq[None, :]).clamp_min_(0)

    first = int(torch.randint(n, (1,), generator=gen))
    chosen = [first]
    closest = sqdist(torch.tensor([first], device=x.device))[0]
    for _ in range(1, k):
        total = closest.sum()
        draws = (torch.rand(trials, generator=gen, dtype=torch.float64).to(x.device) * total.double()).to(closest.dtype)
        candidates = torch.searchsorted(torch.cumsum(closest, 0), draws).clamp_(max=n - 1)
        options = torch.minimum(closest[None, :], sqdist(candidates))
        best = int(torch.argmin(options.sum(1)))
        closest = options[best]
        chosen.append(int(candidates[best]))
    return x[torch.tensor(chosen, device=x.device)]


def cluster_labels(embeddings: np.ndarray, n_clusters: int, seed: int = 0,
                   device: str | torch.device = "cpu") -> np.ndarray:
    """k-means cluster index of every row: k-means++ seeding on the device, then scikit-learn's
    Lloyd iterations; the best of 3 seeds (lowest inertia) for up to 1,000 clusters, one seed
    above (SOP-sized problems, where each run costs minutes). At most 100 iterations, 20 above
    1,000 clusters."""
    from sklearn.cluster import KMeans

    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    xt = torch.from_numpy(x).to(device)
    n_init, max_iter = (3, 100) if n_clusters <= 1000 else (1, 20)
    best = None
    for run in range(n_init):
        init = kmeans_plusplus(xt, n_clusters, seed + run).cpu().numpy()
        km = KMeans(n_clusters=n_clusters, init=init, n_init=1, max_iter=max_iter).fit(x)
        if best is None or km.inertia_ < best.inertia_:
            best = km
    return best.labels_


def pairwise_f1(labels: np.ndarray, clusters: np.ndarray) -> float:
    """Pairwise F1 of a clustering (seed 001 Sec. 4.1), from the contingency table:
    TP = sum_ij C(n_ij, 2), predicted positives = sum_j C(b_j, 2), actual positives
    = sum_i C(a_i, 2) with n_ij the class-cluster counts, b_j cluster and a_i class sizes."""
    from sklearn.metrics.cluster import contingency_matrix

    table = contingency_matrix(labels, clusters, sparse=True)

    def pairs(x: np.ndarray) -> float:
        x = np.asarray(x, dtype=np.float64)
        return float((x * (x - 1) / 2).sum())

    tp = pairs(table.data)
    predicted = pairs(np.asarray(table.sum(axis=0)).ravel())
    actual = pairs(np.asarray(table.sum(axis=1)).ravel())
    if tp == 0:
        return 0.0
    precision, recall = tp / predicted, tp / actual
    return 2 * precision * recall / (precision + recall)


def clustering_metrics(embeddings: np.ndarray | torch.Tensor, labels: np.ndarray, seed: int = 0,
                       device: str | torch.device = "cpu") -> dict[str, float]:
    """``nmi`` and ``f1`` of k-means with as many clusters as classes."""
    from sklearn.metrics import normalized_mutual_info_score

    labels = np.asarray(labels, dtype=np.int64)
    n_classes = len(np.unique(labels))
    if len(labels) < 2 or n_classes < 2 or n_classes > len(labels):
        return {"nmi": float("nan"), "f1": float("nan")}
    emb = embeddings.detach().cpu().numpy() if isinstance(embeddings, torch.Tensor) else np.asarray(embeddings)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    clusters = cluster_labels(emb, n_classes, seed, device)
    return {
        "nmi": float(normalized_mutual_info_score(labels, clusters)),
        "f1": pairwise_f1(labels, clusters),
    }


def one_match_recall(query: np.ndarray, reference: np.ndarray) -> dict:
    """Recall@1, @5 and @1 % of one-match-per-query retrieval (CVUSA's street-to-aerial
    protocol): ``reference[i]`` is query ``i``'s only match, ranked among every row of
    ``reference`` (which may hold more rows than there are queries) by the dot product (cosine
    for normalized rows), ties counting against the query; @1 % is the top ``ceil(N / 100)``.
    The computation of ``core.train.cross_view.cross_view_recall`` (a test holds them equal);
    here so that evaluation does not import training."""
    query, reference = np.asarray(query, np.float64), np.asarray(reference, np.float64)
    similarity = query @ reference.T
    true = similarity.diagonal()
    rank = (similarity >= true[:, None]).sum(1) - 1  # 0: the match is first
    top_percent = max(1, math.ceil(0.01 * len(reference)))
    return {"recall@1": float((rank < 1).mean()), "recall@5": float((rank < 5).mean()),
            "recall@1%": float((rank < top_percent).mean()), "num_queries": len(query)}


def compute_metrics(
    embeddings: np.ndarray | torch.Tensor,
    labels: np.ndarray,
    ks: Sequence[int] = (1, 2, 4, 8),
    device: str | torch.device = "cpu",
    clustering: bool = True,
    queries: np.ndarray | None = None,
    gallery: np.ndarray | None = None,
) -> dict[str, float]:
    """All metrics of DESIGN.md for one set of embeddings (rows need not be normalized).

    Keys: ``recall@K`` for each K in ``ks``, ``nmi``, ``f1`` (unless ``clustering=False``;
    k-means runs on every item), ``map@r``, ``r_precision``, ``knn_acc``, ``num_queries``.
    ``queries``/``gallery`` select the two sides of retrieval (default: all against all)."""
    labels = np.asarray(labels, dtype=np.int64)
    retrieval = retrieval_metrics(embeddings, labels, ks, device, queries, gallery)
    cluster = clustering_metrics(embeddings, labels, device=device) if clustering else {}
    recalls = {k: v for k, v in retrieval.items() if k.startswith("recall@")}
    ordered = {**recalls, **cluster}
    for key in ("map@r", "r_precision", "knn_acc", "num_queries"):
        ordered[key] = retrieval[key]
    return ordered
