"""Where listed image paths may lead: the policy every dataset reader applies.

Index files (``images.txt``, ``Ebay_*.txt``, ``list_eval_partition.txt``, ``cars_annos.mat``, a
feature file's ``paths``) come from elsewhere and are not trusted:

- A listed path must be relative and stay inside the dataset folder. A listing with absolute
  paths or ``..`` climbing out is refused when the dataset is opened (:class:`DatasetError`
  naming the index file and the first offending entries): no benchmark dataset needs one, and
  the image files are not opened.
- A listed image that is a symbolic link leading outside the dataset folder (after resolving
  every link, the folder's own included) is refused when it is read, like an unreadable
  image: reported with its path and skipped by the jobs that skip bad images. Images kept on
  another disk through such links can be allowed with ``DMLVIEWER_FOLLOW_EXTERNAL_LINKS=1``
  (:mod:`dmlviewer.core.limits`).
- Messages name paths, never the content of a file.

The lexical check is string work only (a 120k-image listing adds milliseconds); links are
resolved only for images actually read.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Sequence

from dmlviewer.core.limits import get_limit

from .errors import DatasetError


def path_problem(rel: str) -> str | None:
    """Why the listed path ``rel`` may not be used (absolute, climbing out with ``..``, empty,
    a NUL byte), or ``None``."""
    if not rel:
        return "empty path"
    if "\x00" in rel:
        return "path holds a NUL byte"
    if rel.startswith(("/", "\\")) or PureWindowsPath(rel).drive or os.path.isabs(rel):
        return "absolute path"
    if ".." in rel:
        depth = 0
        for part in PurePosixPath(rel.replace("\\", "/")).parts:
            depth += -1 if part == ".." else (0 if part == "." else 1)
            if depth < 0:
                return "path leads outside the dataset folder ('..')"
    return None


def check_listed_paths(paths: Sequence[str], source: str | Path) -> None:
    """:class:`DatasetError` when some listed path breaks :func:`path_problem` (the message
    names ``source``, the count and the first offenders)."""
    bad = []
    for p in paths:
        if p.startswith(("/", "\\")) or ".." in p or ":" in p or "\x00" in p or not p:
            problem = path_problem(p)
            if problem:
                bad.append((p, problem))
    if bad:
        shown = "; ".join(f"{p[:80]!r} ({why})" for p, why in bad[:3])
        raise DatasetError(
            f"{source}: {len(bad)} listed image path(s) may not be used: {shown}. Paths must be "
            "relative and stay inside the dataset folder; the dataset is refused", path=source)


def link_problem(root: str | Path, path: str | Path) -> str | None:
    """Why the file ``path`` (under the dataset folder ``root``) may not be read because links
    lead it outside ``root``, or ``None``. Honours ``follow_external_links``."""
    if get_limit("follow_external_links"):
        return None
    try:
        real_root = os.path.realpath(root)
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None  # reading it will say what is wrong
    if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
        return None
    return (f"is a link leading outside the dataset folder (to {real}); set "
            "DMLVIEWER_FOLLOW_EXTERNAL_LINKS=1 to allow such links")
