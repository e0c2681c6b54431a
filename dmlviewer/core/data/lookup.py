"""Row of a relative path in a long listing, without a dictionary of every path.

A dict of a million paths costs about 1-2 s to build and 100 MB; :class:`PathIndex` keeps a
sorted array of the paths' hashes (16 bytes a path, built in a fraction of a second, and only
on the first look-up) and checks the candidate rows' paths for equality.
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np


class PathIndex:
    """``find(path)`` -> the first row holding ``path`` (None when absent). Thread-safe: the
    hashes can be built (:meth:`prepare`) in a worker while another thread looks up."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = paths
        self._hashes: np.ndarray | None = None
        self._order: np.ndarray | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.paths)

    def prepare(self) -> None:
        """Build the sorted hashes now (else the first :meth:`find` does)."""
        with self._lock:
            if self._hashes is None:
                hashes = np.fromiter((hash(str(p)) for p in self.paths), dtype=np.int64, count=len(self.paths))
                order = np.argsort(hashes, kind="stable")  # equal hashes keep row order
                self._order, self._hashes = order, hashes[order]

    def find(self, path: str) -> int | None:
        if self._hashes is None:
            self.prepare()
        path = str(path)
        h = hash(path)
        lo = int(np.searchsorted(self._hashes, h, side="left"))
        hi = int(np.searchsorted(self._hashes, h, side="right"))
        for row in self._order[lo:hi]:
            if str(self.paths[int(row)]) == path:
                return int(row)
        return None
