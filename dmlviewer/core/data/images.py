"""Reading image files into uint8 RGB arrays, and telling bad files apart.

Files are read as bytes (so any path the OS accepts works, unicode included) and decoded with
``cv2.imdecode``. OpenCV 4.x half-decodes a truncated JPEG without complaint (the missing rows
come out grey; OpenCV 5 refuses it but cannot say why), so the byte stream is checked first: a
JPEG must reach its end-of-image marker after the start of its first scan, a PNG must reach its
``IEND`` chunk, BMP and WebP files must be as long as their headers say. Anything that fails is
an :class:`ImageError` with the path and the reason; nothing is silently repaired.

Colour: grayscale becomes RGB by repetition; images with an alpha channel are composited on
white (a transparent product-photo background looks white, as in a browser), i.e.
``rgb = a * colour + (1 - a) * 255``; 16-bit images are scaled to 8 bits. EXIF orientation is
not applied: pixels stay as stored, which is what dataset boxes refer to.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

import cv2
import numpy as np

from .errors import ImageError, ImageProblem
from .records import Dataset

log = logging.getLogger(__name__)

_JPEG = b"\xff\xd8\xff"
_PNG = b"\x89PNG\r\n\x1a\n"


def _jpeg_problem(data: bytes) -> str | None:
    """Walk the marker segments up to the first scan; the end-of-image marker must follow it."""
    n, pos = len(data), 2
    while True:
        if pos >= n:
            return "truncated JPEG (ends inside its header)"
        if data[pos] != 0xFF:
            return f"corrupt JPEG header (no marker at byte {pos})"
        while pos < n and data[pos] == 0xFF:
            pos += 1
        if pos >= n:
            return "truncated JPEG (ends inside its header)"
        marker = data[pos]
        pos += 1
        if marker == 0xD9:
            return "corrupt JPEG (end-of-image marker before any image data)"
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue  # markers without a length field
        if pos + 2 > n:
            return "truncated JPEG (ends inside its header)"
        length = (data[pos] << 8) | data[pos + 1]
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            scan = pos + length
            break
        pos += length
    if data.rfind(b"\xff\xd9", scan) < 0:
        return "truncated JPEG (no end-of-image marker)"
    return None


def _png_problem(data: bytes) -> str | None:
    """Walk the chunks; a complete PNG ends with an IEND chunk inside the file."""
    n, pos = len(data), 8
    while pos + 8 <= n:
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = data[pos + 4 : pos + 8]
        pos += 12 + length
        if kind == b"IEND":
            return None if pos <= n else "truncated PNG (IEND chunk cut)"
    return "truncated PNG (no IEND chunk)"


def _declared_size_problem(data: bytes) -> str | None:
    if data[:2] == b"BM" and len(data) >= 6:
        size = int.from_bytes(data[2:6], "little")
        return f"truncated BMP ({len(data)} of {size} bytes)" if len(data) < size else None
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        size = int.from_bytes(data[4:8], "little") + 8
        return f"truncated WebP ({len(data)} of {size} bytes)" if len(data) < size else None
    return None


def file_problem(data: bytes) -> str | None:
    """Why the encoded image ``data`` is unusable (empty, truncated), or ``None`` when its
    container looks complete. Formats without an end check are left to the decoder."""
    if not data:
        return "empty file"
    if data.startswith(_JPEG):
        return _jpeg_problem(data)
    if data.startswith(_PNG):
        return _png_problem(data)
    return _declared_size_problem(data)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ImageError(path, "file not found") from None
    except IsADirectoryError:
        raise ImageError(path, "is a folder, not a file") from None
    except OSError as exc:
        raise ImageError(path, f"cannot read ({exc.strerror or exc})") from None


def _to_uint8(image: np.ndarray, path: Path) -> np.ndarray:
    if image.dtype == np.uint8:
        return image
    if image.dtype == np.uint16:
        return ((image.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    if image.dtype in (np.float32, np.float64):
        return (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    raise ImageError(path, f"unsupported pixel type {image.dtype}")


def _composite_on_white(colour: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha.astype(np.uint16)[..., None]
    return ((colour.astype(np.uint16) * a + 255 * (255 - a) + 127) // 255).astype(np.uint8)


def _to_rgb(image: np.ndarray, path: Path) -> np.ndarray:
    image = _to_uint8(image, path)
    if image.ndim == 2:
        image = image[..., None]
    channels = image.shape[2]
    if channels == 1:
        return np.ascontiguousarray(np.repeat(image, 3, axis=2))
    if channels == 2:  # gray + alpha
        gray = _composite_on_white(image[..., :1], image[..., 1])
        return np.ascontiguousarray(np.repeat(gray, 3, axis=2))
    if channels == 3:
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    if channels == 4:
        return cv2.cvtColor(_composite_on_white(image[..., :3], image[..., 3]), cv2.COLOR_BGR2RGB)
    raise ImageError(path, f"unsupported number of channels ({channels})")


def _decode(data: bytes, path: Path) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if image is None or image.size == 0:
        raise ImageError(path, f"not a decodable image (starts with {data[:8]!r})")
    return _to_rgb(image, path)


def _read_checked(path: Path) -> bytes:
    data = _read_bytes(path)
    problem = file_problem(data)
    if problem:
        raise ImageError(path, problem)
    return data


def load_image(path: str | Path) -> np.ndarray:
    """The image at ``path`` as uint8 H x W x 3 RGB; :class:`ImageError` (path, reason) for a
    missing, empty, truncated or undecodable file."""
    path = Path(path)
    return _decode(_read_checked(path), path)


def probe_image(path: str | Path) -> None:
    """Check a file without decoding its pixels where the container can be checked (JPEG, PNG,
    BMP, WebP); other files are decoded. Raises :class:`ImageError`."""
    path = Path(path)
    data = _read_checked(path)
    if not (data.startswith((_JPEG, _PNG, b"BM")) or data[8:12] == b"WEBP"):
        _decode(data, path)


def check_images(
    dataset: Dataset, indices: Iterable[int] | None = None, decode: bool = True
) -> list[ImageProblem]:
    """The problems of the listed images (all, or ``indices``): one :class:`ImageProblem` per
    bad file, each also logged. ``decode=False`` checks files and containers only (faster)."""
    check = load_image if decode else probe_image
    problems = []
    for i in range(len(dataset)) if indices is None else indices:
        path = dataset.abspath(int(i))
        try:
            check(path)
        except ImageError as exc:
            problems.append(ImageProblem(str(path), exc.reason, int(i)))
            log.warning("bad image %s: %s", path, exc.reason)
    return problems
