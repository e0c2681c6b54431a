"""Evaluate a checkpoint on a dataset split: features into HDF5, metrics as its attributes.

Started under ``torchrun`` (``WORLD_SIZE`` > 1), every rank joins the process group (gloo on
CPU, NCCL on GPUs, one GPU per local rank) and embeds its share of the batches; rank 0
receives them in listing order, writes the one feature file (the same file, row for row, as a
single process writes) and computes the metrics once. A rank that fails or is killed makes
the others fail too (the collectives see the lost peer; torchrun also stops them), and rank
0's writer then discards its temporary file: the target is never half written.

**Two-branch models** (issue 25) are evaluated on cross-view data only (a dataset that says
which branch embeds each image, ``Dataset.branches``: CVUSA's layout); elsewhere
:func:`evaluate` raises one ``ValueError`` line. Each image goes through its own branch
(:mod:`.extract`), and the metrics are street-to-aerial retrieval: the split's streets are the
queries, its aerial images the gallery (:func:`cross_view_metrics`). ``recall@1``, ``recall@5``
and ``recall@1%`` are :func:`.metrics.one_match_recall`'s, which is training's
``core.train.cross_view.cross_view_recall`` (each
street's own aerial among all the gallery's; ties count against the query), and DESIGN.md's
retrieval keys are computed with the same queries and gallery, plus ``num_gallery``. Left out:
``nmi``/``f1`` (clustering into one class per pair says nothing and would take long on CVUSA's
8,884 test pairs) and ``knn_acc`` (3 of the top 5 of the query's class cannot happen with one
match per query).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from dmlviewer.core.progress import CancelToken, Progress

from .extract import DEFAULT_DECODE, feature_attrs, image_branches, is_two_branch, write_batches
from .metrics import compute_metrics, one_match_recall


class _NoFile:
    """Stands in for a ``FeatureWriter`` when no feature file is wanted (metrics only)."""

    def open(self) -> None:
        pass

    def append(self, **arrays) -> None:
        pass

    def set_attrs(self, **attrs) -> None:
        pass

    close = abort = open


def query_gallery(dataset, rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Query and gallery masks over ``rows`` where the dataset divides its test images into
    queries and a gallery (In-Shop); cross-view data (``branches``) in every split: street
    images the queries, aerial images the gallery; ``(None, None)``: every item against all the
    others."""
    if dataset.branches is not None:
        branches = dataset.branches[rows]
        return branches == "query", branches == "reference"
    if dataset.roles is None:
        return None, None
    roles = dataset.roles[rows]
    return roles == "query", roles == "gallery"


def cross_view_metrics(embeddings: np.ndarray, labels: np.ndarray, branches: np.ndarray,
                       ks: Sequence[int] = (1, 2, 4, 8), device="cpu") -> dict:
    """Street-to-aerial retrieval metrics of a two-branch model's embeddings (module docstring):
    queries are the rows embedded by the query branch (``branches == "query"``), the gallery
    the rows embedded by the reference branch; a query's match is the gallery row of its label
    (its pair). Queries whose aerial image is missing (unreadable) are left out of the recalls."""
    branches = np.asarray(branches, dtype=object)
    queries, gallery = branches == "query", branches == "reference"
    if not queries.any() or not gallery.any():
        raise ValueError("cross-view evaluation needs street (query branch) and aerial (reference branch) images "
                         f"in the evaluated split; it holds {int(queries.sum())} and {int(gallery.sum())}")
    labels = np.asarray(labels, dtype=np.int64)
    metrics = compute_metrics(embeddings, labels, sorted(set(ks) | {1, 5}), device, clustering=False,
                              queries=queries, gallery=gallery)  # k-means into one class per pair: no
    q_rows, g_rows = np.flatnonzero(queries), np.flatnonzero(gallery)
    match = {int(labels[r]): r for r in g_rows}
    paired = np.array([r for r in q_rows if int(labels[r]) in match], dtype=np.int64)
    matched = np.array([match[int(labels[r])] for r in paired], dtype=np.int64)
    others = np.setdiff1d(g_rows, matched)
    if len(paired):  # gallery: the queries' own aerials in query order, then any others
        metrics.update(one_match_recall(embeddings[paired], embeddings[np.concatenate([matched, others])]))
    metrics.pop("knn_acc", None)  # 3 of the top 5 of the query's class: impossible with one match per query
    metrics["num_gallery"] = len(g_rows)
    return metrics


def evaluate(checkpoint: str | os.PathLike, dataset_root: str | os.PathLike, split: str = "test",
             out: str | os.PathLike | None = None, batch_size: int = 64, device: str = "cpu",
             format: str | None = None, ks: Sequence[int] = (1, 2, 4, 8), num_workers: int | None = None,
             protocol: str = "default", cancel: CancelToken | None = None,
             decode: str = DEFAULT_DECODE) -> Iterator[Progress]:
    """Generator: load ``checkpoint`` (a path, ``imagenet:NAME`` or a ``ModelSource``), embed
    ``split`` of the dataset at ``dataset_root`` into the feature file ``out`` (skipped when
    ``None``), compute the metrics of DESIGN.md and store them
    as the file's attributes (in the same atomic write). ``decode``: where JPEGs are decoded
    (:func:`~.extract.extract_features`). Result: the metrics dict; under ``torchrun`` (module
    docstring) only on rank 0, ``None`` on the other ranks."""
    import torch

    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.models import open_model, resolve_device
    from dmlviewer.core.models.source import ModelSource
    from dmlviewer.core.train.distributed import from_environment

    from .store import FeatureWriter

    dev = resolve_device(device)
    ctx = from_environment(dev.type)
    try:
        if dev.type == "cuda" and ctx.enabled:
            dev = torch.device("cuda", ctx.local_rank)
            torch.cuda.set_device(dev)
        model, info = checkpoint.open(dev) if isinstance(checkpoint, ModelSource) else open_model(checkpoint, dev)
        dataset = open_dataset(dataset_root, format, protocol).select_split(split)
        if len(dataset) == 0:
            raise ValueError(f"{dataset_root} has no images in split {split!r}")
        if is_two_branch(model) and dataset.branches is None:
            raise ValueError(f"a two-branch model is evaluated on cross-view data (street and aerial images, CVUSA's "
                             f"layout); {dataset_root} is a {dataset.format} dataset, which does not say which images "
                             "are queries and which references")
        branches = image_branches(model, dataset)
        ranks = f" on {ctx.world_size} ranks" if ctx.enabled else ""
        name = checkpoint.display() if isinstance(checkpoint, ModelSource) else Path(checkpoint).name
        yield Progress("log", message=f"evaluating {name} on {len(dataset)} {split} images{ranks}")

        main = ctx.is_main
        writer = (FeatureWriter(out, attrs=feature_attrs(model, dataset, info["sha256"]), background=True)
                  if out and main else _NoFile())
        writer.open()
        try:
            result: dict = {}
            for event in write_batches(writer, model, dataset, batch_size, dev, num_workers, cancel,
                                       collect=main, dist=ctx, decode=decode):
                if event.kind == "done":
                    result = event.data["result"]
                elif main:
                    yield event
            metrics = None
            if main:
                rows = result["rows"]
                if branches is not None:
                    metrics = cross_view_metrics(result["embeddings"], dataset.labels[rows], branches[rows], ks, dev)
                else:
                    queries, gallery = query_gallery(dataset, rows)
                    metrics = compute_metrics(result["embeddings"], dataset.labels[rows], ks, dev,
                                              queries=queries, gallery=gallery)
                writer.set_attrs(**metrics)
            writer.close()
        except BaseException:
            writer.abort()
            raise
    finally:
        ctx.close()
    if metrics is not None:
        yield Progress("eval", 1, 1, data={"metrics": dict(metrics)})
    yield Progress("done", 1, 1, data={"result": metrics})
