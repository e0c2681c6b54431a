"""Which two dataset images form the pair, and reading them: the default reference of a query,
the pair shown when a dataset opens (the last session's, else the first test image), and the
pair's images with their captions (and, for a cross-view pair, its true heading).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from dmlviewer.gui.common import errors
from dmlviewer.gui.pair.pair_view import PairImages

log = logging.getLogger(__name__)


class PairChoice:
    """Reads and chooses pairs of the open dataset for ``window`` (the ``MainWindow``, whose
    ``set_pair`` makes a pair the session's)."""

    def __init__(self, window: Any) -> None:
        self.window = window
        self._read: tuple | None = None  # ((query, reference), PairImages) read by read()
        self._cross_view_cache: tuple | None = None  # (dataset, its cross-view pairs or None)

    def forget(self) -> None:
        """Another dataset is open: the images read for the last pair are no longer its."""
        self._read = None

    def images(self, query_index: int, reference_index: int, reference_b: int | None = None) -> PairImages | None:
        """The pair's images: those ``read`` last when they are this pair's, else read now."""
        read = self._read
        if read is not None and read[0] == (query_index, reference_index, reference_b):
            return read[1]
        return self.read(query_index, reference_index, reference_b)

    def read(self, query_index: int, reference_index: int, reference_b: int | None = None) -> PairImages | None:
        """Read the pair's images (and model B's own reference ``reference_b``, if any; kept
        for the pair event); None, a problem and a dialog when one cannot be read."""
        from dmlviewer.core.data import load_dataset_image

        window = self.window
        ds = window.dataset
        indices = (query_index, reference_index) + (() if reference_b is None else (reference_b,))
        images = []
        for index in indices:
            try:
                images.append(load_dataset_image(ds, index))
            except Exception as exc:  # noqa: BLE001
                window.problems.add_problem(str(ds.abspath(index)), str(getattr(exc, "reason", exc)))
                errors.report_exception(window, "Cannot read image", exc)
                return None
        own = {} if reference_b is None else {"reference_b": images[2],
                                              "reference_b_title": self._caption("R", reference_b, query_index)}
        pair = PairImages(images[0], images[1], self._caption("Q", query_index, query_index),
                          self._caption("R", reference_index, query_index),
                          **self._cross_view_pair(query_index, reference_index), **own)
        self._read = ((query_index, reference_index, reference_b), pair)
        return pair

    def _cross_view_pair(self, query_index: int, reference_index: int) -> dict:
        """For a ``cvusa`` dataset whose query is a street panorama and whose reference is an
        aerial image: ``cross_view`` and, for the pair's own aerial, its ``true_heading`` from
        ``headings.csv`` (issue 25; the pair view then draws the orientation lines)."""
        from dmlviewer.core.data.cross_view import cross_view_pairs

        ds = self.window.dataset
        if ds is None or ds.format != "cvusa" or query_index % 2 or not reference_index % 2:
            return {}
        cached = self._cross_view_cache
        if cached is None or cached[0] is not ds:
            try:
                cached = self._cross_view_cache = (ds, cross_view_pairs(ds))
            except Exception:  # noqa: BLE001 - a bad headings.csv: lines without the truth
                log.warning("cannot read the true headings of %s", ds.root, exc_info=True)
                cached = self._cross_view_cache = (ds, None)
        pairs, k = cached[1], query_index // 2
        truth = None
        if pairs is not None and reference_index == int(pairs.aerial[k]) and np.isfinite(pairs.heading[k]):
            truth = float(pairs.heading[k])
        return {"cross_view": True, "true_heading": truth}

    def restore(self, previous) -> bool:
        """Show the last session's pair (``previous``, a ``LastSession``) when the same dataset
        is opened again (the browser selects the session's query itself)."""
        window = self.window
        ds = window.dataset
        if previous is None or not previous.query or not previous.dataset:
            return False
        try:
            same = Path(previous.dataset).resolve() == Path(window.dataset_path).resolve()
        except OSError:
            return False
        if not same:
            return False
        index = {p: i for i, p in enumerate(ds.paths)}
        query, reference = index.get(previous.query), index.get(previous.reference or "")
        if query is None:
            return False
        window.set_pair(query, reference)
        return True

    def choose_default(self) -> None:
        """The first test image (else the first image) and a reference of its class."""
        window = self.window
        ds = window.dataset
        if ds is None or len(ds) == 0:
            return
        test = ds.indices("test")
        query = int(test[0]) if len(test) else 0
        window.set_pair(query, self.default_reference(query))

    def default_reference(self, query: int) -> int:
        """Another image of the query's class (the next image when it has none)."""
        ds = self.window.dataset
        same = np.flatnonzero(ds.labels == ds.labels[query])
        same = same[same != query]
        return int(same[0]) if len(same) else (query + 1) % len(ds)

    def _caption(self, tag: str, index: int, query: int) -> str:
        ds = self.window.dataset
        name = ds.class_names[int(ds.labels[index])]
        color = "#2f80ed" if tag == "Q" else "#f2994a"
        same = ""
        if tag == "R":
            same = (" <span style='color:#27ae60'>same class</span>" if ds.labels[index] == ds.labels[query]
                    else " <span style='color:#eb5757'>different class</span>")
        file = ds.paths[index].rsplit("/", 1)[-1]
        return (f"<b style='color:{color}'>{'Query' if tag == 'Q' else 'Reference'}</b> "
                f"<b>{name}</b>{same} · {file} <span style='color:#888'>#{index}</span>")
