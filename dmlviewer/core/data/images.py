"""Reading image files into uint8 RGB arrays, and telling bad files apart.

Files are read as bytes (so any path the OS accepts works, unicode included) and decoded with
``cv2.imdecode``. OpenCV 4.x half-decodes a truncated JPEG without complaint (the missing rows
come out grey; OpenCV 5 refuses it but cannot say why), so the byte stream is checked first: a
JPEG must reach its end-of-image marker after the start of its first scan, a PNG must reach its
``IEND`` chunk, BMP and WebP files must be as long as their headers say. Anything that fails is
an :class:`ImageError` with the path and the reason; nothing is silently repaired.

Files we did not write are not trusted: only regular files are opened (a FIFO or a device is
refused, never waited on), files over ``max_image_bytes`` are not read, and the image size
declared in the header (PNG, JPEG, GIF, BMP, WebP, TIFF, PNM) is checked against
``max_image_pixels`` before anything is decoded (decompression bombs; both limits in
:mod:`dmlviewer.core.limits`). For other formats OpenCV's own limit applies, set to the same
value when ``dmlviewer`` is imported (:func:`dmlviewer.core.limits.opencv_limit`). Messages name the file and what is wrong with it,
never its content. :func:`load_dataset_image` also applies the link policy of :mod:`.paths`.

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

from dmlviewer.core.files import RefusedFile, read_regular, sniff
from dmlviewer.core.limits import get_limit

from .errors import ImageError, ImageProblem
from .paths import link_problem
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


def _be(data: bytes, start: int, size: int) -> int:
    return int.from_bytes(data[start : start + size], "big")


def _le(data: bytes, start: int, size: int) -> int:
    return int.from_bytes(data[start : start + size], "little")


def _jpeg_frame(data: bytes) -> tuple[int, int, int, int, int] | None:
    """``(marker, precision, width, height, components)`` of the first start-of-frame segment
    (``marker``: 0xC0 baseline, 0xC2 progressive, ...); ``None`` when the header holds none."""
    n, pos = len(data), 2
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return None
        while pos < n and data[pos] == 0xFF:
            pos += 1
        if pos >= n:
            return None
        marker = data[pos]
        pos += 1
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            continue
        if marker in (0xD9, 0xDA):
            return None
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if pos + 8 > n:
                return None
            return marker, data[pos + 2], _be(data, pos + 5, 2), _be(data, pos + 3, 2), data[pos + 7]
        pos += _be(data, pos, 2)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the first start-of-frame marker."""
    frame = _jpeg_frame(data)
    return None if frame is None else (frame[2], frame[3])


def device_decodable_jpeg(data: bytes) -> bool:
    """Whether ``data`` is a JPEG that GPU decoders (nvJPEG) take: 8-bit baseline or progressive
    Huffman coding with 1 or 3 components. Anything else (CMYK/YCCK with 4 components,
    12-bit, lossless or arithmetic coding, not a JPEG) is for :func:`decode_image`."""
    if not data.startswith(_JPEG):
        return False
    frame = _jpeg_frame(data)
    return frame is not None and frame[0] in (0xC0, 0xC2) and frame[1] == 8 and frame[4] in (1, 3)


def _tiff_size(data: bytes) -> tuple[int, int] | None:
    """ImageWidth and ImageLength of the first IFD (the page OpenCV reads)."""
    read = _le if data[:2] == b"II" else _be
    offset = read(data, 4, 4)
    if offset + 2 > len(data):
        return None
    found = {}
    for k in range(min(read(data, offset, 2), 4096)):
        entry = offset + 2 + 12 * k
        if entry + 12 > len(data):
            break
        tag, kind = read(data, entry, 2), read(data, entry + 2, 2)
        if tag in (256, 257):
            found[tag] = read(data, entry + 8, 2) if kind == 3 else read(data, entry + 8, 4)
    return (found[256], found[257]) if len(found) == 2 else None


def _pnm_size(data: bytes) -> tuple[int, int] | None:
    tokens: list[int] = []
    for line in data[2:4096].split(b"\n"):
        for token in line.split(b"#")[0].split():
            if not token.isdigit():
                return None
            tokens.append(int(token))
            if len(tokens) == 2:
                return tokens[0], tokens[1]
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        return 1 + _le(data, 24, 3), 1 + _le(data, 27, 3)
    if chunk == b"VP8L" and len(data) >= 25:
        bits = _le(data, 21, 4)
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(data) >= 30:
        return _le(data, 26, 2) & 0x3FFF, _le(data, 28, 2) & 0x3FFF
    return None


def header_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` as the image's header declares it, without decoding; ``None`` for
    formats this does not parse (OpenCV's own limit applies to those)."""
    if data.startswith(_PNG) and len(data) >= 24:
        return _be(data, 16, 4), _be(data, 20, 4)
    if data.startswith(_JPEG):
        return _jpeg_size(data)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return _le(data, 6, 2), _le(data, 8, 2)
    if data[:2] == b"BM" and len(data) >= 26:
        if _le(data, 14, 4) == 12:  # OS/2 header: 16-bit sizes
            return _le(data, 18, 2), _le(data, 20, 2)
        return abs(int.from_bytes(data[18:22], "little", signed=True)), abs(
            int.from_bytes(data[22:26], "little", signed=True))
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data[:4] in (b"II*\x00", b"MM\x00*") and len(data) >= 8:
        return _tiff_size(data)
    if len(data) > 2 and data[:1] == b"P" and data[1:2] in b"123456":
        return _pnm_size(data)
    return None


def pixel_problem(data: bytes) -> str | None:
    """Why the declared size of the encoded image ``data`` is refused (over the
    ``max_image_pixels`` limit), or ``None``."""
    size = header_size(data)
    if size is None:
        return None
    width, height = size
    limit = get_limit("max_image_pixels")
    if width * height > limit:
        return (f"image too large: {width} x {height} = {width * height:,} pixels, over the limit of "
                f"{limit:,} (DMLVIEWER_MAX_IMAGE_PIXELS); not decoded")
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
        return read_regular(path, get_limit("max_image_bytes"))
    except RefusedFile as exc:
        raise ImageError(path, exc.reason) from None


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


def decode_image(data: bytes, path: str | Path) -> np.ndarray:
    """The encoded image ``data`` (read from ``path``, named in errors) decoded by OpenCV as uint8
    H x W x 3 RGB; :class:`ImageError` (path, reason) when it cannot be."""
    path = Path(path)
    try:
        image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:  # OpenCV's own size limit, a corrupt stream
        first = next((line for line in str(exc).splitlines() if "error:" in line), str(exc))
        raise ImageError(path, f"cannot decode ({first.split('error:')[-1].strip()[:200]})") from None
    except MemoryError:
        raise ImageError(path, "not enough memory to decode it") from None
    if image is None or image.size == 0:
        raise ImageError(path, f"not a decodable image (the file looks like {sniff(data)})")
    return _to_rgb(image, path)


def read_image_bytes(path: str | Path) -> bytes:
    """The encoded bytes of an image file, checked (regular file, size, complete container,
    declared pixels within the limit) but not decoded; :class:`ImageError` otherwise."""
    return _read_checked(Path(path))


def _read_checked(path: Path) -> bytes:
    data = _read_bytes(path)
    problem = file_problem(data) or pixel_problem(data)
    if problem:
        raise ImageError(path, problem)
    return data


def load_image(path: str | Path) -> np.ndarray:
    """The image at ``path`` as uint8 H x W x 3 RGB; :class:`ImageError` (path, reason) for a
    missing, empty, truncated or undecodable file."""
    path = Path(path)
    return decode_image(_read_checked(path), path)


def load_dataset_image(dataset: Dataset, index: int) -> np.ndarray:
    """Image ``index`` of ``dataset`` (:func:`load_image`), refused with :class:`ImageError`
    when a link leads it outside the dataset folder (policy in :mod:`.paths`)."""
    return decode_image(dataset_image_bytes(dataset, index), dataset.abspath(int(index)))


def dataset_image_bytes(dataset: Dataset, index: int) -> bytes:
    """The checked encoded bytes of image ``index`` of ``dataset`` (:func:`read_image_bytes`),
    under the link policy of :func:`load_dataset_image`; :class:`ImageError` otherwise."""
    path = dataset.abspath(int(index))
    check_inside(dataset.root, path)
    return read_image_bytes(path)


def report_skipped(problem: ImageProblem) -> None:
    """The one warning every job prints for an image it skips (path, index, reason)."""
    where = "" if problem.index is None else f" (index {problem.index})"
    log.warning("skipping bad image %s%s: %s", problem.path, where, problem.reason)


def load_or_skip(dataset: Dataset, index: int, skipped: dict[int, ImageProblem] | None = None
                 ) -> np.ndarray | None:
    """:func:`load_dataset_image`, or ``None`` for an unreadable image: the policy of every job
    that reads a dataset's images (evaluate, train, localize, correspond) is to report the file
    with its reason once (:func:`report_skipped`; recorded in ``skipped`` by index) and go on."""
    if skipped is not None and int(index) in skipped:
        return None
    try:
        return load_dataset_image(dataset, index)
    except ImageError as exc:
        problem = ImageProblem(exc.path, exc.reason, int(index))
        report_skipped(problem)
        if skipped is not None:
            skipped[int(index)] = problem
        return None


def check_inside(root: str | Path, path: str | Path) -> None:
    """:class:`ImageError` when links lead ``path`` outside the folder ``root``."""
    problem = link_problem(root, path)
    if problem:
        raise ImageError(path, problem)


def probe_image(path: str | Path) -> None:
    """Check a file without decoding its pixels where the container can be checked (JPEG, PNG,
    BMP, WebP); other files are decoded. Raises :class:`ImageError`."""
    path = Path(path)
    data = _read_checked(path)
    if not (data.startswith((_JPEG, _PNG, b"BM")) or data[8:12] == b"WEBP"):
        decode_image(data, path)


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
            check_inside(dataset.root, path)
            check(path)
        except ImageError as exc:
            problems.append(ImageProblem(str(path), exc.reason, int(i)))
            log.warning("bad image %s: %s", path, exc.reason)
    return problems
