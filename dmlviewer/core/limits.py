"""Limits on what dmlviewer reads from files it did not write (settings with safe defaults).

Every value can be changed for a process by an environment variable (read on each use, so a
test or the GUI can change it at run time) or by :func:`set_limit`:

- ``max_image_pixels`` (``DMLVIEWER_MAX_IMAGE_PIXELS``): images whose header declares more
  pixels are refused before decoding (decompression bombs). The default, 178,956,970, is the
  size at which Pillow refuses an image outright (twice its ``MAX_IMAGE_PIXELS`` warning).
- ``max_image_bytes`` (``DMLVIEWER_MAX_IMAGE_BYTES``): the largest image file read (1 GiB).
- ``max_index_bytes`` (``DMLVIEWER_MAX_INDEX_BYTES``): the largest dataset index file (1 GiB).
- ``max_checkpoint_bytes`` (``DMLVIEWER_MAX_CHECKPOINT_BYTES``): the largest checkpoint or
  weights file (16 GiB).
- ``follow_external_links`` (``DMLVIEWER_FOLLOW_EXTERNAL_LINKS``, 0 or 1): whether an image
  that is a symbolic link leading out of its dataset folder is read (default 0: refused; see
  :mod:`dmlviewer.core.data.paths`).
"""

from __future__ import annotations

import os

DEFAULTS: dict[str, int] = {
    "max_image_pixels": 178_956_970,
    "max_image_bytes": 1 << 30,
    "max_index_bytes": 1 << 30,
    "max_checkpoint_bytes": 16 << 30,
    "follow_external_links": 0,
}

_overrides: dict[str, int] = {}


def _env_name(name: str) -> str:
    return "DMLVIEWER_" + name.upper()


def get_limit(name: str) -> int:
    """The current value of limit ``name`` (override, then environment, then default)."""
    if name not in DEFAULTS:
        raise KeyError(f"unknown limit {name!r}; known: {', '.join(DEFAULTS)}")
    if name in _overrides:
        return _overrides[name]
    text = os.environ.get(_env_name(name), "").strip()
    if text:
        try:
            value = int(float(text))
        except ValueError:
            value = -1
        if value >= 0:
            return value
        raise ValueError(f"{_env_name(name)} must be a non-negative number, got {text!r}")
    return DEFAULTS[name]


def set_limit(name: str, value: int | None) -> None:
    """Override limit ``name`` for this process (``None`` removes the override)."""
    if name not in DEFAULTS:
        raise KeyError(f"unknown limit {name!r}; known: {', '.join(DEFAULTS)}")
    if value is None:
        _overrides.pop(name, None)
    elif int(value) < 0:
        raise ValueError(f"limit {name} cannot be negative")
    else:
        _overrides[name] = int(value)


def format_bytes(n: int) -> str:
    """``1.5 GiB``-style text for messages."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} bytes"  # pragma: no cover


def opencv_limit() -> None:
    """Give OpenCV the default pixel limit (``OPENCV_IO_MAX_IMAGE_PIXELS``, read once when it is
    loaded) for the formats whose header dmlviewer does not parse; an explicit setting wins."""
    os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(get_limit("max_image_pixels")))
