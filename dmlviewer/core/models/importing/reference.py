"""A reference file of the user's own embeddings (``check_against``): images, already
preprocessed, and the user's model's embeddings of them, which an imported model must reproduce
within ``CHECK_TOLERANCE``. These files are read warily: an ``.npz``'s array headers are checked
before anything is allocated, a ``.pt`` is read with ``weights_only=True``."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from ..checkpoint import check_finite
from ..errors import CheckpointError
from ..model import EmbeddingModel
from .errors import ImportInputError

CHECK_TOLERANCE = 1e-4  # folded head against the layer sequence, relative to the output scale


#: a check needs a few preprocessed images, not thousands
MAX_REFERENCE_BYTES = 2 << 30


def _bad(field: str, path: Path, problem: str) -> ImportInputError:
    """One line: the reference file of input ``field`` cannot be used."""
    return ImportInputError(f"{{field}} {path}: {problem}", field)


def _read_reference_npz(path: Path, field: str) -> dict:
    """``images`` and ``embeddings`` of a ``numpy.savez`` file, each array's header read first
    so that a header claiming a huge or non-numeric array is refused before anything is
    allocated (``allow_pickle=False``)."""
    import zipfile

    import numpy as np

    if not zipfile.is_zipfile(path):
        raise _bad(field, path, "not a .npz archive (numpy.savez)")
    values = {}
    with zipfile.ZipFile(path) as archive:
        for key in ("images", "embeddings"):
            if f"{key}.npy" not in archive.namelist():
                continue
            with archive.open(f"{key}.npy") as member:
                fmt = np.lib.format
                reader = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(
                    fmt.read_magic(member))
                if reader is None:
                    raise _bad(field, path, f"its {key} is in an .npy format version "
                                          "this reader does not take (numpy.savez writes 1.0)")
                shape, _, dtype = reader(member)
                if dtype.kind not in "biuf" or int(np.prod(shape, dtype=np.float64)) * dtype.itemsize > MAX_REFERENCE_BYTES:
                    raise _bad(field, path, f"its {key} ({dtype} {list(shape)}) is not an "
                                          f"array of numbers of at most {MAX_REFERENCE_BYTES >> 30} GiB")
            with archive.open(f"{key}.npy") as member:
                values[key] = torch.from_numpy(np.array(np.lib.format.read_array(member, allow_pickle=False)))
    return values


def read_reference(path: str | os.PathLike, field: str = "check_against") -> tuple[torch.Tensor, torch.Tensor]:
    """``(images N x 3 x H x W, embeddings N x D)`` float32 from a reference file (``.npz``, or a
    ``.pt`` dict read with ``weights_only=True``) holding ``images`` (already preprocessed) and
    ``embeddings`` (the user's model's outputs on them); ``ImportInputError`` (a ``CheckpointError``
    of one line naming the input ``field``) otherwise."""
    from dmlviewer.core.files import file_problem

    from ..backbones import _load_error_reason

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(2, "not found", str(path))
    problem = file_problem(path, MAX_REFERENCE_BYTES)
    if problem:
        raise _bad(field, path, problem)
    try:
        if path.suffix.lower() == ".npz":
            values = _read_reference_npz(path, field)
        else:
            values = torch.load(path, map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
    except MemoryError:
        raise _bad(field, path, "not enough memory to read it") from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one line
        raise _bad(field, path, f"cannot read it ({_load_error_reason(exc)[:200]}); nothing "
                              "in it was run") from None
    if not isinstance(values, dict) or not all(isinstance(values.get(k), torch.Tensor)
                                               for k in ("images", "embeddings")):
        raise _bad(field, path, f"give a .npz or .pt holding the tensors 'images' "
                              "(N x 3 x H x W, preprocessed) and 'embeddings' (N x D, your model's outputs)")
    images, embeddings = values["images"].float(), values["embeddings"].float()
    if images.dim() != 4 or images.shape[1] != 3 or embeddings.dim() != 2 or images.shape[0] != embeddings.shape[0] \
            or images.shape[0] == 0:
        raise _bad(field, path, f"images must be N x 3 x H x W and embeddings N x D with the "
                              f"same N, got {list(images.shape)} and {list(embeddings.shape)}")
    try:
        check_finite({"images": images, "embeddings": embeddings}, str(path))
    except CheckpointError as exc:
        raise ImportInputError(f"{{field}} {exc}", field) from None
    return images, embeddings


def compare_with_reference(model: EmbeddingModel, path: str | os.PathLike, tolerance: float = CHECK_TOLERANCE,
                           batch: int = 16, field: str = "check_against") -> dict:
    """The imported model's embeddings on the reference's images against the reference's
    embeddings: ``relative_diff`` (max |ours - theirs| / max |theirs|, raw outputs),
    ``normalized_diff`` (the same after L2 normalization of both, for a model that normalizes),
    ``passed`` (either within ``tolerance``), ``compared`` (which one passed, or raw)."""
    images, theirs = read_reference(path, field)
    model.eval()
    with torch.no_grad():
        ours = torch.cat([model(images[i:i + batch]).embedding_raw.float() for i in range(0, len(images), batch)])
    if ours.shape != theirs.shape:
        raise _bad(field, path, f"the reference's embeddings have {theirs.shape[1]} dimensions, "
                              f"the imported model's {ours.shape[1]} (check {{head}})")
    raw = float((ours - theirs).abs().max() / theirs.abs().max().clamp(min=1e-12))
    norm = float((nn.functional.normalize(ours, dim=1) - nn.functional.normalize(theirs, dim=1)).abs().max())
    compared = "raw" if raw <= tolerance else "normalized" if norm <= tolerance else "raw"
    return {"file": str(Path(path).resolve()), "images": int(len(images)), "relative_diff": raw,
            "normalized_diff": norm, "passed": raw <= tolerance or norm <= tolerance, "compared": compared,
            "tolerance": tolerance}


def describe_reference_check(check: dict) -> str:
    """One line for a ``compare_with_reference`` result."""
    where = f"embeddings vs. {Path(check['file']).name} ({check['images']} images)"
    numbers = (f"max relative difference {check['relative_diff']:.3g}, "
               f"{check['normalized_diff']:.3g} after L2 normalization")
    if check["passed"]:
        how = " (your model normalizes its outputs)" if check["compared"] == "normalized" else ""
        return f"{where}: {numbers}: they match within {check['tolerance']:g}{how}"
    return f"{where}: {numbers}: they DIFFER (above {check['tolerance']:g})"

