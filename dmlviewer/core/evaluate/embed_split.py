"""One model's embeddings of a dataset split, from its feature file when the file fits, else by
running the model: the one place that ``compare --changes`` (:mod:`.changes`) and the report
(:mod:`dmlviewer.core.report.report`) get them.

Whether a file fits is :func:`.store.split_embeddings`' decision alone (the file's
``checkpoint_sha256`` is the model's and it holds every image of the split, by path). What a
caller does with a file that does not fit differs: ``compare --changes`` refuses it in one
``ValueError`` line (``strict``: the user named that file for that model), the report logs it
and runs the model. With ``write`` a feature file that does not exist yet is written as
``evaluate`` writes it (the split's features, the metrics of ``ks`` as attributes) through a
:class:`~.store.FeatureWriter`: a temporary file renamed when complete, deleted on cancel or
error, so no half file is ever left.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from dmlviewer.core.progress import CancelToken, Progress

log = logging.getLogger(__name__)


def _named(events: Iterator[Progress], name: str) -> Iterator[Progress]:
    """Relay an extraction's progress events, each message naming model ``name``; returns the
    result its ``done`` event carries."""
    result = {}
    for event in events:
        if event.kind == "done":
            result = event.data["result"]
        else:
            event.message = f"model {name}: {event.message}"
            yield event
    return result


def model_split(model: torch.nn.Module, dataset, split: str, device, features=None, sha256: str = "",
                name: str = "A", num_workers: int | None = None, cancel: CancelToken | None = None,
                batch_size: int = 64, strict: bool = True, write: bool = False,
                ks: Sequence[int] = (1, 2, 4, 8)) -> Iterator[Progress]:
    """Generator: model ``name``'s embeddings of ``split`` of ``dataset``: from the feature file
    ``features`` when it fits (:func:`.store.split_embeddings`; nothing is run), else embedded
    now, progress messages naming the model. A given file that does not fit is one
    ``ValueError`` line naming the file and the model when ``strict``; otherwise it is logged
    and the model is run (module docstring). ``write``: a ``features`` path that does not exist
    yet is written while embedding, the metrics of ``ks`` as its attributes. Result:
    ``{"embeddings", "indices" (dataset indices of the rows), "from_file"}``."""
    from .extract import embed_dataset, feature_attrs, write_batches
    from .store import FeatureWriter, split_embeddings

    indices = dataset.indices(split)
    exists = features is not None and Path(features).exists()
    if features is not None and (strict or exists):
        embeddings, reason = split_embeddings(features, sha256, dataset, indices)
        if embeddings is not None:
            yield Progress("log", message=f"model {name}: features from {features}")
            return {"embeddings": embeddings, "indices": indices, "from_file": True}
        if strict:
            raise ValueError(f"feature file {features} of model {name} {reason}")
        log.warning("%s %s; extracting again", features, reason)
    subset = dataset.select_split(split)
    if write and features is not None and not exists:
        from .evaluation import query_gallery
        from .metrics import compute_metrics

        writer = FeatureWriter(features, attrs=feature_attrs(model, subset, sha256))
        writer.open()
        try:
            result = yield from _named(write_batches(writer, model, subset, batch_size, device, num_workers, cancel,
                                                     collect=True), name)
            rows, embeddings = result["rows"], result["embeddings"]
            queries, gallery = query_gallery(subset, rows)
            writer.set_attrs(**compute_metrics(embeddings, subset.labels[rows], ks, device, queries=queries,
                                               gallery=gallery))
            writer.close()
        except BaseException:
            writer.abort()
            raise
        yield Progress("log", message=f"model {name}: features written to {features}")
    else:
        result = yield from _named(embed_dataset(model, subset, batch_size, device, num_workers, cancel), name)
        rows, embeddings = result["rows"], result["embeddings"]
    return {"embeddings": np.asarray(embeddings, np.float32), "indices": indices[rows], "from_file": False}
