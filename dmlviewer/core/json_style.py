"""The one JSON style of dmlviewer's outputs: one document, indented by two spaces, strict (a
non-finite number is ``null``, numpy scalars are plain numbers). The command line's ``--json``
prints it and the app's saved comparisons are written in it, so that both read the same."""

from __future__ import annotations

import json
import math
from typing import Any


def strict(value: Any) -> Any:
    """``value`` with every non-finite float as None and numpy scalars as Python numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalars
        return strict(value.item())
    return value


def json_text(value: Any) -> str:
    """``value`` as one strict JSON document, indented by two spaces, with a final newline."""
    return json.dumps(strict(value), indent=2, allow_nan=False) + "\n"
