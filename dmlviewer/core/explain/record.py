"""One pair's explanation as plain arrays: what ``dmlviewer explain`` writes to its npz and what
``dmlviewer.explain(...)`` returns (DESIGN.md, "Explanation npz").

Fields: ``similarity`` (cosine), ``point_to_point`` (``hq x wq x hr x wr``, per position-pair
contributions divided by ``|Eq||Er|``, seed 000 Eq. 2-3), ``bias_query``, ``bias_reference``,
``bias_both`` (the three bias terms of Eq. 3, same scaling), ``overall_query``,
``overall_reference`` (full-resolution signed maps of ``method``), ``overall_query_grid``,
``overall_reference_grid`` (the same maps on the feature grids), ``grid_query``,
``grid_reference``, and ``rule`` (``"exact"`` or ``"first order"``) with ``rule_detail``.
Completeness: ``point_to_point.sum() + bias_query + bias_reference + bias_both == similarity``
to float tolerance (exactly, up to rounding, whatever the rule: a first-order rule moves the
Taylor remainder into the bias terms).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from dmlviewer.core.files import atomic_target


@dataclass
class Explanation:
    """See the module docstring."""

    similarity: float
    point_to_point: np.ndarray
    bias_query: float
    bias_reference: float
    bias_both: float
    overall_query: np.ndarray
    overall_reference: np.ndarray
    overall_query_grid: np.ndarray
    overall_reference_grid: np.ndarray
    grid_query: tuple[int, int]
    grid_reference: tuple[int, int]
    method: str
    rule: str
    rule_detail: str

    @classmethod
    def from_pair(cls, pair, method: str = "decomposition") -> "Explanation":
        """From a :class:`~.pair.PairExplanation` and the overall-map method."""
        return cls(
            similarity=float(pair.similarity), point_to_point=pair.point_to_point_4d(),
            bias_query=float(pair.bias_query), bias_reference=float(pair.bias_reference),
            bias_both=float(pair.bias_both), overall_query=pair.overall(method, "query"),
            overall_reference=pair.overall(method, "reference"),
            overall_query_grid=np.asarray(pair.overall_grid(method, "query"), dtype=np.float32),
            overall_reference_grid=np.asarray(pair.overall_grid(method, "reference"), dtype=np.float32),
            grid_query=tuple(pair.grid_query),
            grid_reference=tuple(pair.grid_reference), method=method, rule=pair.rule,
            rule_detail=pair.rule_detail,
        )

    @property
    def completeness_error(self) -> float:
        """``|sum(P) + biases - similarity|`` (float64)."""
        total = float(self.point_to_point.sum(dtype=np.float64))
        return abs(total + self.bias_query + self.bias_reference + self.bias_both - self.similarity)

    def arrays(self) -> dict[str, np.ndarray]:
        """The npz's arrays (strings as 0-d unicode arrays, readable without pickle)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                out[f.name] = np.array(value)
            elif isinstance(value, tuple):
                out[f.name] = np.array(value, dtype=np.int64)
            elif isinstance(value, float):
                out[f.name] = np.float64(value)
            else:
                out[f.name] = value
        return out

    def save(self, path: str | os.PathLike) -> Path:
        """Write the npz atomically (temporary file in the same folder, then renamed); ``.npz``
        is appended when missing. Returns the path written."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        with atomic_target(path) as tmp, open(tmp, "wb") as f:  # a full disk leaves no temporary file
            np.savez(f, **self.arrays())
        return path
