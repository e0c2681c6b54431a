"""Fast parsing of the whitespace-separated index files the benchmark datasets ship with.

A file is read at once and split by one ``str.split()`` call; columns are strided slices of the
token list and numbers are converted by numpy, so a 120k-line listing takes tens of
milliseconds and no Python object is built per row beyond the path strings themselves. Only
when that fast path does not fit (a line with the wrong number of columns, a path containing
spaces, a value that is not a number) is the file walked line by line, which either parses it
(paths with spaces) or raises :class:`DatasetError` naming the file and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from dmlviewer.core.files import RefusedFile, read_regular, sniff
from dmlviewer.core.limits import get_limit

from .errors import DatasetError


def read_index_bytes(path: Path) -> bytes:
    """The bytes of an index file; :class:`DatasetError` for a missing, irregular (a folder, a
    FIFO, a device) or oversized (``max_index_bytes``) file."""
    try:
        return read_regular(path, get_limit("max_index_bytes"))
    except RefusedFile as exc:
        if exc.reason == "file not found":
            raise DatasetError(f"missing index file: {path}", path=path) from None
        raise DatasetError(f"cannot read index file {path}: it {exc.reason}" if exc.reason.startswith("is ")
                           else f"cannot read index file {path}: {exc.reason}", path=path) from None


def read_index_text(path: Path) -> str:
    """The text of an index file; a missing, irregular (a folder, a FIFO, a device), oversized
    (``max_index_bytes``) or undecodable file raises :class:`DatasetError`."""
    data = read_index_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not a UTF-8 text file ({exc.reason}; it looks like {sniff(data)})",
                           path=path) from None


def _skip_lines(text: str, count: int) -> str:
    pos = 0
    for _ in range(count):
        nl = text.find("\n", pos)
        if nl < 0:
            return ""
        pos = nl + 1
    return text[pos:]


def read_table(
    path: Path,
    columns: Sequence[str],
    *,
    ints: Sequence[str] = (),
    floats: Sequence[str] = (),
    skip_lines: int = 0,
    text: str | None = None,
) -> dict[str, np.ndarray | list[str]]:
    """Parse a whitespace-separated table into one array (or list of str) per column.

    ``ints`` / ``floats`` name the columns converted to int64 / float32; the others stay
    strings. A last column of strings may contain spaces (paths). Blank lines are ignored.
    ``skip_lines`` header lines are dropped first. Line numbers in errors count from 1 in the
    whole file, header included.
    """
    if text is None:
        text = read_index_text(path)
    body = _skip_lines(text, skip_lines)
    ncol = len(columns)
    tokens = body.split()
    lines = body.splitlines()
    nrows = len(lines) - lines.count("")
    if len(tokens) == ncol * nrows:
        try:
            return _convert(tokens, columns, ints, floats)
        except (ValueError, OverflowError):
            pass  # a value that is not a number: find its line below
    return _parse_slowly(path, lines, columns, ints, floats, skip_lines)


def _convert(tokens: list[str], columns, ints, floats) -> dict[str, np.ndarray | list[str]]:
    ncol = len(columns)
    out: dict[str, np.ndarray | list[str]] = {}
    for k, name in enumerate(columns):
        values = tokens[k::ncol]
        if name in ints:
            out[name] = np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64)
        elif name in floats:
            out[name] = np.array(values, dtype=np.float32) if values else np.zeros(0, np.float32)
        else:
            out[name] = values
    return out


def _parse_slowly(path, lines, columns, ints, floats, skip_lines) -> dict[str, np.ndarray | list[str]]:
    ncol = len(columns)
    maxsplit = -1 if columns[-1] in ints or columns[-1] in floats else ncol - 1
    rows: list[list[str]] = []
    for lineno, line in enumerate(lines, start=skip_lines + 1):
        parts = line.split(None, maxsplit)
        if not parts:
            continue
        if len(parts) != ncol:
            raise DatasetError(
                f"{path}, line {lineno}: expected {ncol} columns ({' '.join(columns)}), "
                f"found {len(parts)}",
                path=path,
                line=lineno,
            )
        for k, name in enumerate(columns):
            if name in ints or name in floats:
                try:
                    if name in ints and not -(2**63) <= int(parts[k]) < 2**63:
                        raise ValueError
                    float(parts[k])
                except ValueError:
                    kind = "an integer" if name in ints else "a number"
                    raise DatasetError(
                        f"{path}, line {lineno}: column {name!r} is not {kind}",
                        path=path,
                        line=lineno,
                    ) from None
        parts[-1] = parts[-1].rstrip()
        rows.append(parts)
    return _convert([t for row in rows for t in row], columns, ints, floats)


def check_unique_ids(ids: np.ndarray, path: Path, what: str = "id") -> None:
    """Raise :class:`DatasetError` when an id column repeats a value."""
    uniq, counts = np.unique(ids, return_counts=True)
    if len(uniq) != len(ids):
        dup = uniq[counts > 1][:5].tolist()
        raise DatasetError(f"{path}: duplicate {what}s {dup}", path=path)


def align(ids: np.ndarray, ref_ids: np.ndarray, path: Path, what: str = "image id") -> np.ndarray:
    """Row order that puts the table with ``ids`` into the order of ``ref_ids``.

    Raises :class:`DatasetError` when ``path`` lacks some of ``ref_ids`` or lists unknown ones.
    """
    check_unique_ids(ids, path, what)
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids[order], ref_ids)
    pos = np.minimum(pos, len(ids) - 1) if len(ids) else pos
    found = (ids[order][pos] == ref_ids) if len(ids) else np.zeros(len(ref_ids), bool)
    if not found.all():
        missing = ref_ids[~found][:5].tolist()
        raise DatasetError(f"{path}: no entry for {what}s {missing}", path=path)
    if len(ids) != len(ref_ids):
        extra = np.setdiff1d(ids, ref_ids)[:5].tolist()
        raise DatasetError(f"{path}: entries for unknown {what}s {extra}", path=path)
    return order[pos]


def line_of_row(text: str, row: int, skip_lines: int = 0) -> int:
    """1-based line number of data row ``row`` (0-based, blank lines not counted) after
    ``skip_lines`` header lines: for error messages about values found by vectorised checks."""
    seen = -1
    for lineno, line in enumerate(text.splitlines(), start=1):
        if lineno <= skip_lines or not line.strip():
            continue
        seen += 1
        if seen == row:
            return lineno
    return -1
