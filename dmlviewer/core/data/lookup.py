"""Row of a relative path in a long listing, without a dictionary of every path.

A dict of a million paths costs about 1-2 s to build and 100 MB; :class:`PathIndex` keeps a
sorted array of the paths' hashes (16 bytes a path, built in a fraction of a second, and only
on the first look-up) and checks the candidate rows' paths for equality.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np


class PathIndex:
    """``find(path)`` -> the first row holding ``path`` (None when absent)."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = paths
        self._hashes: np.ndarray | None = None
        self._order: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.paths)

    def _build(self) -> None:
        hashes = np.fromiter((hash(str(p)) for p in self.paths), dtype=np.int64, count=len(self.paths))
        self._order = np.argsort(hashes, kind="stable")  # equal hashes keep row order
        self._hashes = hashes[self._order]

    def find(self, path: str) -> int | None:
        if self._hashes is None:
            self._build()
        path = str(path)
        h = hash(path)
        lo = int(np.searchsorted(self._hashes, h, side="left"))
        hi = int(np.searchsorted(self._hashes, h, side="right"))
        for row in self._order[lo:hi]:
            if str(self.paths[int(row)]) == path:
                return int(row)
        return None

    def find_many(self, paths: Iterable[str]) -> np.ndarray:
        """Rows of ``paths`` (-1 where absent)."""
        return np.array([-1 if (r := self.find(p)) is None else r for p in paths], dtype=np.int64)
