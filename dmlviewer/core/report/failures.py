"""Retrieval failures of a split: the queries whose nearest neighbour is of another class.

The queries, gallery and neighbour search are those of
:func:`~dmlviewer.core.evaluate.metrics.retrieval_metrics` (the numbers ``evaluate`` prints):
every image of the split against all the others (or the dataset's query/gallery protocol),
the query itself excluded, and only queries with at least one same-class image in the gallery
(the queries Recall@K counts). So the number of failures is ``(1 - recall@1) * num_queries``.

A failure is ranked by how confidently wrong the model is: the **margin** of the wrong top-1's
cosine similarity over the best same-class image's (the largest first). A small margin is a
near miss; a large one a confident mistake, the one worth explaining first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dmlviewer.core.evaluate.metrics import _query_setup, iter_nearest_neighbors


@dataclass(frozen=True)
class Failure:
    """One wrong top-1 (positions are rows of the embeddings given)."""

    query: int
    wrong: int  # the nearest neighbour, of another class
    same: int  # the most similar image of the query's class
    similarity_wrong: float
    similarity_same: float

    @property
    def margin(self) -> float:
        return self.similarity_wrong - self.similarity_same


def retrieval_failures(embeddings: np.ndarray, labels: np.ndarray, queries: np.ndarray | None = None,
                       gallery: np.ndarray | None = None, device: str | torch.device = "cpu") -> list[Failure]:
    """Every failure of the split (module docstring), the most confident first."""
    dev = torch.device(device)
    labels = np.asarray(labels, dtype=np.int64)
    q_pos, g_pos, self_row, r = _query_setup(labels, queries, gallery)
    if len(q_pos) == 0 or len(g_pos) < 2:
        return []
    emb = torch.nn.functional.normalize(torch.as_tensor(np.asarray(embeddings), dtype=torch.float32, device=dev), dim=1)
    q_emb, g_emb = emb[torch.from_numpy(q_pos).to(dev)], emb[torch.from_numpy(g_pos).to(dev)]
    self_index = torch.from_numpy(self_row).to(dev)
    g_labels = labels[g_pos]
    found = []
    for start, sims, idx in iter_nearest_neighbors(q_emb, g_emb, 1, self_index):
        top = idx[:, 0].cpu().numpy()
        for k in range(len(top)):
            qk = start + k
            if r[qk] <= 0 or g_labels[top[k]] == labels[q_pos[qk]]:
                continue
            row = (q_emb[qk] @ g_emb.T).cpu().numpy()
            if self_row[qk] >= 0:
                row[self_row[qk]] = -np.inf
            same = np.where(g_labels == labels[q_pos[qk]], row, -np.inf)
            best = int(np.argmax(same))
            found.append(Failure(int(q_pos[qk]), int(g_pos[top[k]]), int(g_pos[best]),
                                 float(sims[k, 0]), float(same[best])))
    found.sort(key=lambda f: -f.margin)
    return found
