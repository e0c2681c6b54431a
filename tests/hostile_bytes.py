"""Small files that claim to be huge (decompression bombs), for the tests of untrusted input."""

from __future__ import annotations

import struct
import zlib


def png_header_only(width: int, height: int) -> bytes:
    """A complete, tiny PNG that declares ``width x height`` pixels (its data stream is a
    small zlib stream of zeros: a decoder that trusts the header allocates width * height)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grayscale
    rows = zlib.compressobj(9)
    data = rows.compress(b"\0" * (width + 1) * 64) + rows.flush()
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def jpeg_header_only(width: int, height: int) -> bytes:
    """A JPEG whose start-of-frame declares ``width x height`` (then a scan and EOI)."""
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    sos = b"\xff\xda" + struct.pack(">HB", 8, 1) + b"\x01\x00\x00\x3f\x00"
    return b"\xff\xd8" + sof + sos + b"\x00" * 16 + b"\xff\xd9"
