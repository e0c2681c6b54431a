"""Run a model over a dataset: embeddings in memory or in an HDF5 feature file.

A ``DataLoader`` with worker processes decodes and resizes images while the model runs,
under ``torch.inference_mode``. On CUDA the workers hand over uint8 images (:class:`ImageLevels`;
a quarter of the bytes), pinned, copied without blocking and normalized on the GPU; each
batch's results come back by a non-blocking copy while the next batch runs, so the host writes
batch ``b - 1`` while the GPU computes batch ``b`` (no synchronisation per batch). Images that
cannot be read are left out (the loader logs each with its path and reason), so every stored
row belongs to the image named in ``paths``.

**Decoding** (``decode``): the loader's batches go through the decode stage
(:mod:`dmlviewer.core.data.decode_stage`), a thread of its own (on CUDA a stream of its own) that
copies, decodes, resizes and normalizes batch ``k + 1`` while the model runs batch ``k``.
``"cpu"`` decodes every image with OpenCV in the workers (the stage copies and normalizes);
``"device"`` has the workers read and check the files and hand over JPEGs as bytes, which the
stage decodes per batch with ``torchvision.io.decode_jpeg`` on the model's device (nvJPEG on
CUDA, libjpeg-turbo on the CPU) and resizes there with the host's arithmetic; other images (PNG,
CMYK JPEG, ...) are still decoded in the workers and a JPEG the device refuses by OpenCV on the
stage's thread (:mod:`dmlviewer.core.data.device_input`). ``"auto"`` is ``"device"`` on CUDA
when torchvision can decode there and ``"cpu"`` otherwise; two-branch models always decode in
the workers (and bypass the stage). The default is ``"cpu"`` (:data:`DEFAULT_DECODE`): decoding
on the device in the main process measured slower on an H100 (4,032-4,460 against 6,079-6,490
images/s, 2026-11-28), and the stage that takes it off the forward pass's path has not yet run
on a GPU; ``"auto"`` keeps its meaning until it has measured faster there. The feature file
records the decoder (``image_decoder``, :func:`image_decoder`).

Batches are always consecutive runs of the listing: batch ``b`` holds positions
``b*B .. (b+1)*B - 1``. Under ``torch.distributed`` (``dist``: a
:class:`~dmlviewer.core.train.distributed.DistContext` with more than one rank) rank ``r``
embeds the batches ``b = r, r + W, r + 2W, ...`` of the ``W`` ranks, and after every round of
``W`` batches the ranks ``gather`` theirs to rank 0 (gloo on CPU, NCCL on GPUs), which
receives them in batch order: rank 0's stream of ``(rows, arrays)`` is the single-process
stream, batch for batch (the same images in the same batches, so a model gives the same
numbers), and no rank holds more than one round in memory. The other ranks yield nothing.

**Two-branch models** (:class:`~dmlviewer.core.models.two_branch.TwoBranchModel`, issue 25):
each image goes through its own branch at that branch's input shape (``preprocess_of``), the
branch the dataset names for it (``Dataset.branches``: CVUSA's streets the query branch, its
aerial images the reference branch; :func:`image_branches`). A batch is still a consecutive
run of the listing; its images are grouped by branch, each group run through its branch, and
the rows put back in listing order. The feature file then gets a per-row ``branch`` dataset
(int8, 0 = query branch, 1 = reference branch; :data:`BRANCH_CODES`), which cross-view
retrieval reads (:mod:`.retrieval`). A dataset that divides no images between branches is
embedded wholly by the query branch, as before (a log line says so).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from dmlviewer.core.data.decode_stage import CPU_DECODER, JPEG_DECODER, decoded_batches
from dmlviewer.core.data.decoders import DECODES, DEFAULT_DECODE
from dmlviewer.core.data.device_input import device_decoding_available
from dmlviewer.core.data.torch_dataset import ImageFolderDataset
from dmlviewer.core.progress import CancelToken, EtaClock, Progress

log = logging.getLogger(__name__)

#: rows gathered before one append to the feature file (:func:`write_batches`)
WRITE_ROWS = 2048

#: the feature file's per-row ``branch`` codes (two-branch models)
BRANCH_CODES = {"query": 0, "reference": 1}


#: loader workers for an accelerator: on 16 cores (H100, 2026-11-27) 4 to 8 workers gave the
#: same extraction rate and 15 a quarter less (each worker's fork and start was paid per pass;
#: :func:`persistent_loaders` now pays it once where a process runs several passes)
GPU_WORKERS = 8


def default_workers(device: str | torch.device | None = None) -> int:
    """Loader worker processes: one core is left to the main process; at most 8 for the CPU
    (whose model shares the cores) and :data:`GPU_WORKERS` for an accelerator (where the
    workers only decode and resize: :class:`ImageLevels`)."""
    cores = (os.cpu_count() or 1) - 1
    if device is not None and torch.device(device).type != "cpu":
        return max(0, min(GPU_WORKERS, cores))
    return max(0, min(8, cores))




def decodes_on_device(device: str | torch.device, decode: str = DEFAULT_DECODE) -> bool:
    """Whether ``decode`` (:data:`DECODES`) means decoding JPEGs on ``device`` in the main
    process: ``"auto"`` on CUDA when torchvision decodes there (:func:`device_decoding_available`)."""
    if decode not in DECODES:
        raise ValueError(f"decode must be one of {', '.join(DECODES)}, got {decode!r}")
    if decode == "auto":
        return torch.device(device).type == "cuda" and device_decoding_available()
    if decode == "device" and torch.device(device).type == "cuda" and not device_decoding_available():
        raise ValueError("this torchvision's decode_jpeg cannot decode on a CUDA device; use decode='cpu'")
    return decode == "device"


def image_decoder(device: str | torch.device, decode: str = DEFAULT_DECODE, branches: np.ndarray | None = None) -> str:
    """The feature file's ``image_decoder`` attribute for an extraction on ``device`` with
    ``decode`` (``branches``: :func:`image_branches`, whose images the workers decode):
    ``"nvjpeg"`` when the JPEGs are decoded on a CUDA device (nvJPEG, whose IDCT can differ from
    libjpeg's by a grey level on some pixels, so the features can differ slightly from
    OpenCV-decoded ones: not yet measured on a GPU), otherwise ``"opencv"`` (also for
    ``decode_jpeg`` on the CPU: libjpeg-turbo, the same pixels as OpenCV's). Images that are not such JPEGs (PNG,
    CMYK, ...) are OpenCV's either way."""
    dev = torch.device(device)
    return "nvjpeg" if dev.type == "cuda" and branches is None and decodes_on_device(dev, decode) else "opencv"


class ListingBatches(torch.utils.data.Sampler):
    """Batches of consecutive listing positions (batch ``b``: ``b*B .. (b+1)*B - 1``, the last
    one shorter); with ``world_size > 1`` only the batches ``b = rank (mod world_size)``."""

    def __init__(self, n: int, batch_size: int, rank: int = 0, world_size: int = 1) -> None:
        if batch_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"bad batching: batch size {batch_size}, rank {rank} of {world_size}")
        self.n, self.batch_size, self.rank, self.world_size = int(n), int(batch_size), int(rank), int(world_size)
        self.num_batches = -(-self.n // self.batch_size)

    def batch_ids(self) -> range:
        return range(self.rank, self.num_batches, self.world_size)

    def rows(self, b: int) -> np.ndarray:
        return np.arange(b * self.batch_size, min(self.n, (b + 1) * self.batch_size), dtype=np.int64)

    def __iter__(self) -> Iterator[list[int]]:
        for b in self.batch_ids():
            yield self.rows(b).tolist()

    def __len__(self) -> int:
        return len(self.batch_ids())


def is_two_branch(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a two-branch (cross-view) model."""
    from dmlviewer.core.models.two_branch import TwoBranchModel

    return isinstance(model, TwoBranchModel)


def image_branches(model: torch.nn.Module, dataset) -> np.ndarray | None:
    """Per image of ``dataset``, the branch of ``model`` that embeds it (``"query"`` or
    ``"reference"``, from ``dataset.branches``); ``None`` when one branch embeds every image: a
    one-branch model, or a dataset that divides no images between branches (then the query
    branch, as a two-branch model's single-branch interface answers)."""
    if not is_two_branch(model):
        return None
    if getattr(dataset, "branches", None) is None:
        log.warning("%s (format %s) does not say which images are queries and which references: every image "
                    "goes through the two-branch model's query branch", dataset.root, dataset.format)
        return None
    return np.asarray(dataset.branches, dtype=object)


def features_fit(path: str | os.PathLike, model: torch.nn.Module, dataset) -> bool:
    """Whether the feature file at ``path`` can stand for ``model`` run over ``dataset`` as far
    as branches go: a two-branch model on cross-view data needs the per-row ``branch`` (a file
    written before extraction ran each image through its own branch has none); anything else
    fits. An unreadable file does not fit."""
    if image_branches(model, dataset) is None:
        return True
    from .store import StoreError, open_features

    try:
        return "branch" in open_features(path).datasets
    except (StoreError, OSError):
        return False


def branch_codes(branches: np.ndarray) -> np.ndarray:
    """The feature file's ``branch`` values (:data:`BRANCH_CODES`) of per-image branch names."""
    return (np.asarray(branches, dtype=object) == "reference").astype(np.int8)


class BranchImages(ImageFolderDataset):
    """Images of a dataset, each preprocessed for its own branch (``preprocesses[branches[i]]``;
    a bad image's successor is preprocessed for the successor's branch)."""

    def __init__(self, dataset, preprocesses: dict, branches: np.ndarray) -> None:
        super().__init__(dataset, preprocesses["query"], train=False)
        self.preprocesses, self.branches = preprocesses, branches

    def _tensor(self, image: np.ndarray) -> np.ndarray:
        return image  # preprocessed in __getitem__, once the returned image's branch is known

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        image, label, i = super().__getitem__(index)
        return self.preprocesses[self.branches[i]](image), label, i


def _collate_mixed(batch: list) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """A batch of images of different shapes: the tensors as a list, labels and indices stacked."""
    return ([item[0] for item in batch], torch.tensor([item[1] for item in batch], dtype=torch.int64),
            torch.tensor([item[2] for item in batch], dtype=torch.int64))


#: the loaders kept by :func:`persistent_loaders` (``None`` outside it): key -> (dataset, loader)
_KEPT: contextvars.ContextVar[dict | None] = contextvars.ContextVar("persistent_loaders", default=None)


@contextlib.contextmanager
def persistent_loaders() -> Iterator[None]:
    """Within it, :func:`make_loader` keeps each loader with worker processes, and its workers
    alive (``persistent_workers``), for the next pass over the same dataset object with the same
    settings: a process that runs several passes (a training run's evaluation every epoch,
    ``bench extract``) forks its workers once instead of once a pass (about 16 ms a worker on
    the H100 machine, 2026-11-28). The workers end when the block ends."""
    kept: dict = {}
    token = _KEPT.set(kept)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # a generator finished from another context
            _KEPT.reset(token)
        for _, loader in kept.values():
            started = getattr(loader, "_iterator", None)
            if started is not None:
                started._shutdown_workers()
                loader._iterator = None


def make_loader(dataset, preprocess, batch_size: int, device: torch.device,
                num_workers: int | None = None, rank: int = 0,
                world_size: int = 1, branches: np.ndarray | None = None,
                decode: str = DEFAULT_DECODE) -> torch.utils.data.DataLoader:
    """An evaluation loader over ``dataset`` (a ``core.data.Dataset``) in listing order;
    ``preprocess``: the model's :class:`~dmlviewer.core.data.transforms.Preprocess` (or a size);
    ``rank``/``world_size``: only this rank's batches (:class:`ListingBatches`). With
    ``branches`` (per image ``"query"``/``"reference"``), ``preprocess`` is a dict of each
    branch's preprocessing and a batch's images come as a list (their shapes may differ).
    For an accelerator a batch is uint8 grey levels (:class:`ImageLevels`), pinned. ``decode``
    (:data:`DECODES`) meaning the device (:func:`decodes_on_device`): a batch is an
    :class:`~dmlviewer.core.data.device_input.EncodedBatch` (JPEG bytes, other images' levels)
    for :func:`~dmlviewer.core.data.device_input.device_levels`. Inside :func:`persistent_loaders`
    a loader with workers is kept and handed out again for the same dataset and settings."""
    workers = default_workers(device) if num_workers is None else num_workers
    kept = _KEPT.get() if workers else None
    key = None
    if kept is not None and branches is None:
        key = (id(dataset), preprocess, batch_size, str(device), workers, rank, world_size,
               decodes_on_device(device, decode))
        if key in kept:
            return kept[key][1]
    if branches is None:
        decoder = JPEG_DECODER if decodes_on_device(device, decode) else CPU_DECODER
        images, collate = decoder.images(dataset, preprocess, device), decoder.collate
    else:
        images, collate = BranchImages(dataset, preprocess, branches), _collate_mixed
    loader = torch.utils.data.DataLoader(
        images, collate_fn=collate,
        batch_sampler=ListingBatches(len(dataset), batch_size, rank, world_size), num_workers=workers,
        pin_memory=device.type == "cuda",
        # an explicit generator: iterating must not draw from torch's global generator
        generator=torch.Generator().manual_seed(0),
        # one pass per loader unless persistent_loaders keeps it (workers forked once, with their
        # OpenCV on one thread: torch_dataset.start_workers)
        persistent_workers=key is not None,
    )
    if key is not None:
        kept[key] = (dataset, loader)  # the dataset held, so that its id is not reused
    return loader


def embed_batches(model: torch.nn.Module, dataset, batch_size: int = 64,
                  device: str | torch.device = "cpu", num_workers: int | None = None,
                  cancel: CancelToken | None = None,
                  dist=None, decode: str = DEFAULT_DECODE) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Yield ``(rows, arrays)`` per batch: the dataset positions embedded and their
    ``embeddings``, ``embeddings_raw`` and (for grouping heads) ``groups`` as float32 arrays.
    The model is put in eval mode; its training mode is restored afterwards. ``dist``: a
    ``DistContext``; with several ranks, rank 0 yields every rank's batches in listing order
    and the others yield nothing (module docstring). ``decode``: where JPEGs are decoded,
    ``"auto"``, ``"cpu"`` or ``"device"`` (module docstring; two-branch models: the CPU)."""
    from dmlviewer.core.models import resolve_device

    dev = resolve_device(device) if isinstance(device, str) else device
    rank, world = (dist.rank, dist.world_size) if dist is not None and dist.enabled else (0, 1)
    branches = image_branches(model, dataset)
    preprocess = model.preprocess if branches is None else {s: model.preprocess_of(s) for s in BRANCH_CODES}
    loader = make_loader(dataset, preprocess, batch_size, dev, num_workers, rank, world, branches, decode)
    local = _embed_local(model, loader, dev, cancel, branches)
    if world == 1:
        yield from local
    else:
        yield from _gather_in_order(local, loader.batch_sampler, dist, dev)


def _forward_by_branch(model: torch.nn.Module, images: list[torch.Tensor], sides: np.ndarray,
                       dev: torch.device, channels_last: bool) -> dict[str, torch.Tensor]:
    """The outputs of a two-branch model for a mixed batch, each image through its own branch
    (``sides[i]``), in batch order: ``embeddings``, ``embeddings_raw`` and maybe ``groups``."""
    parts: dict[str, list] = {}
    order = []
    for side in BRANCH_CODES:
        members = np.flatnonzero(sides == side)
        if not len(members):
            continue
        x = torch.stack([images[i] for i in members]).to(dev, non_blocking=True)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        out = model(x, side)
        arrays = {"embeddings": out.embedding, "embeddings_raw": out.embedding_raw}
        if out.groups is not None:
            arrays["groups"] = out.groups
        if parts and set(parts) != set(arrays):
            raise RuntimeError("the two branches give different outputs (groups in one branch only)")
        for k, v in arrays.items():
            parts.setdefault(k, []).append(v)
        order.append(members)
    inverse = torch.from_numpy(np.argsort(np.concatenate(order))).to(dev)
    return {k: torch.cat(v)[inverse] for k, v in parts.items()}


def _embed_local(model: torch.nn.Module, loader, dev: torch.device, cancel: CancelToken | None,
                 branches: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """``(rows, arrays)`` for each batch of ``loader`` (a :class:`ListingBatches` loader);
    ``branches``: each image's branch of a two-branch model (:func:`_forward_by_branch`)."""
    from dmlviewer.core.data.torch_dataset import start_workers, worker_errors

    batches: ListingBatches = loader.batch_sampler
    channels_last = dev.type == "cuda"
    was_training = model.training
    model.eval()
    pending = None
    started = start_workers(loader)
    # one-branch models: batches decoded, moved and normalized by the decode stage's thread
    # (core.data.decode_stage) while the model runs the previous one
    inputs = started if branches is not None else decoded_batches(started, loader.dataset, dev)
    try:
        with torch.inference_mode(), worker_errors():
            for b, item in zip(batches.batch_ids(), inputs):
                if cancel is not None:
                    cancel.raise_if_cancelled()
                expected = batches.rows(b)
                if branches is not None:
                    images, _, index = item
                    arrays = _forward_by_branch(model, images, branches[index.numpy()], dev, channels_last)
                else:
                    images, index = item
                    out = model(images)
                    arrays = {"embeddings": out.embedding, "embeddings_raw": out.embedding_raw}
                    if out.groups is not None:
                        arrays["groups"] = out.groups
                if dev.type != "cuda":
                    yield _finished(expected, index, {k: v.float().cpu() for k, v in arrays.items()})
                    continue
                # the results come back without waiting: the copy is queued behind this batch,
                # and the previous batch is handed on (written) while the GPU runs this one
                host = {k: v.float().to("cpu", non_blocking=True) for k, v in arrays.items()}
                done = torch.cuda.Event()
                done.record()
                if pending is not None:
                    yield _finished(*pending)
                pending = (expected, index, host, done)
            if pending is not None:
                yield _finished(*pending)
    finally:
        if inputs is not started:
            inputs.close()  # stops the decode stage's thread
        model.train(was_training)


def _finished(expected: np.ndarray, index: torch.Tensor, host: dict[str, torch.Tensor],
              done=None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A batch's ``(rows, arrays)`` once its copy to the host is ``done`` (a CUDA event); rows
    whose image was bad (replaced by its successor) left out."""
    if done is not None:
        done.synchronize()
    # copied out of the pinned buffers (which the caching allocator then reuses): results kept
    # for a whole dataset must not hold gigabytes of page-locked memory
    arrays = {k: v.numpy().copy() if done is not None else v.numpy() for k, v in host.items()}
    good = index.numpy() == expected
    if not good.all():
        arrays = {k: v[good] for k, v in arrays.items()}
    return expected[good], arrays


def _gather_in_order(local: Iterator[tuple[np.ndarray, dict[str, np.ndarray]]], batches: ListingBatches,
                     dist, dev: torch.device) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Round by round, every rank's batch to rank 0 (three collectives a round: the row width,
    the rows padded with -1, the arrays flattened to one float32 row each and zero-padded);
    rank 0 yields them in listing order. Every rank runs every round, with or without a batch."""
    import torch.distributed as tdist

    world, rank, size = dist.world_size, dist.rank, batches.batch_size
    comm = dev if tdist.get_backend() == "nccl" else torch.device("cpu")
    layout: list[tuple[str, tuple[int, ...]]] | None = None  # names and row shapes (rank 0's)
    try:
        for round_ in range(-(-batches.num_batches // world)):
            mine = next(local) if round_ * world + rank < batches.num_batches else None
            rows = torch.full((size,), -1, dtype=torch.int64)
            flat = None
            if mine is not None:
                rows[: len(mine[0])] = torch.from_numpy(mine[0])
                names = sorted(mine[1])
                flat = np.concatenate([mine[1][k].reshape(len(mine[0]), -1) for k in names], axis=1)
                if layout is None:
                    layout = [(k, mine[1][k].shape[1:]) for k in names]
            width = torch.tensor([0 if flat is None else flat.shape[1]], dtype=torch.int64, device=comm)
            tdist.all_reduce(width, op=tdist.ReduceOp.MAX)
            payload = torch.zeros((size, int(width)), dtype=torch.float32)
            if flat is not None:
                if flat.shape[1] != int(width):
                    raise RuntimeError(f"rank {rank}: embedding rows of width {flat.shape[1]}, another rank's {int(width)}")
                payload[: len(flat)] = torch.from_numpy(flat)
            rows, payload = rows.to(comm), payload.to(comm)
            main = rank == 0
            all_rows = [torch.empty_like(rows) for _ in range(world)] if main else None
            all_payload = [torch.empty_like(payload) for _ in range(world)] if main else None
            tdist.gather(rows, all_rows, dst=0)
            tdist.gather(payload, all_payload, dst=0)
            if not main:
                continue
            for r, (r_rows, r_payload) in enumerate(zip(all_rows, all_payload)):
                if round_ * world + r >= batches.num_batches:
                    break  # ranks without a batch in the last round
                r_rows = r_rows.cpu().numpy()
                n = int((r_rows >= 0).sum())
                data = r_payload[:n].cpu().numpy()
                arrays, start = {}, 0
                for name, shape in layout:
                    step = int(np.prod(shape, dtype=np.int64))
                    arrays[name] = np.ascontiguousarray(data[:, start:start + step]).reshape(n, *shape)
                    start += step
                yield r_rows[:n], arrays
    finally:
        local.close()


def embed_dataset(model: torch.nn.Module, dataset, batch_size: int = 64,
                  device: str | torch.device = "cpu", num_workers: int | None = None,
                  cancel: CancelToken | None = None, dist=None, decode: str = DEFAULT_DECODE) -> Iterator[Progress]:
    """Generator: embed every image of ``dataset`` in memory. Result: ``{"rows",
    "embeddings", "embeddings_raw", ["groups"]}`` (numpy arrays, rows = dataset positions).
    ``dist``, ``decode``: see :func:`embed_batches`; ranks other than 0 get only ``{"rows"}`` (empty)."""
    total = len(dataset)
    clock = EtaClock(total)
    rows, parts = [], {}
    done = 0
    for batch_rows, arrays in embed_batches(model, dataset, batch_size, device, num_workers, cancel, dist, decode):
        rows.append(batch_rows)
        for k, v in arrays.items():
            parts.setdefault(k, []).append(v)
        done += len(batch_rows)
        yield Progress("step", done, total, "embedding images", eta_s=clock.eta(done))
    result: dict[str, Any] = {"rows": np.concatenate(rows) if rows else np.zeros(0, np.int64)}
    result.update({k: np.concatenate(v) for k, v in parts.items()})
    yield Progress("done", total, total, data={"result": result})


def feature_attrs(model: torch.nn.Module, dataset, checkpoint_sha256: str | None) -> dict[str, Any]:
    """The feature file's attributes (DESIGN.md) for ``model`` run over ``dataset``."""
    from dmlviewer.core.data.identity import listing_fingerprint

    return {
        "checkpoint_sha256": checkpoint_sha256 or "",
        "model_config": json.dumps(model.config, sort_keys=True),
        "dataset_root": str(dataset.root),
        "dataset_format": str(dataset.format),
        "dataset_fingerprint": listing_fingerprint(dataset),  # binds the file to this listing (issue 30)
        "class_names": json.dumps([str(n) for n in dataset.class_names]),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_batches(writer, model: torch.nn.Module, dataset, batch_size: int = 64,
                  device: str | torch.device = "cpu", num_workers: int | None = None,
                  cancel: CancelToken | None = None, collect: bool = False, dist=None,
                  decode: str = DEFAULT_DECODE) -> Iterator[Progress]:
    """Generator: embed ``dataset`` and append every batch to an open ``FeatureWriter``, whose
    ``image_decoder`` attribute it sets (:func:`image_decoder`). Result: ``{"rows",
    "num_images", "skipped"}`` and, with ``collect``, the ``embeddings``. ``dist``, ``decode``:
    see :func:`embed_batches` (only rank 0 receives batches to write)."""
    from dmlviewer.core.models import resolve_device

    total = len(dataset)
    clock = EtaClock(total)
    rows_done, kept = [], []
    written = 0
    branches = image_branches(model, dataset)
    pending: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
    dev = resolve_device(device) if isinstance(device, str) else device
    writer.set_attrs(image_decoder=image_decoder(dev, decode, branches))

    def flush() -> None:
        if not pending:
            return
        rows = np.concatenate([r for r, _ in pending])
        arrays = {k: np.concatenate([a[k] for _, a in pending]) for k in pending[0][1]}
        pending.clear()
        writer.append(
            embeddings=arrays["embeddings"],
            embeddings_raw=arrays["embeddings_raw"],
            labels=dataset.labels[rows],
            paths=[dataset.paths[i] for i in rows],
            split=[str(s) for s in dataset.split[rows]],
            boxes=dataset.boxes[rows],
            **({"groups": arrays["groups"]} if "groups" in arrays else {}),
            **({"branch": branch_codes(branches[rows])} if branches is not None else {}),
        )

    for rows, arrays in embed_batches(model, dataset, batch_size, dev, num_workers, cancel, dist, decode):
        # written in blocks of at least WRITE_ROWS rows: one HDF5 append (eight datasets
        # resized and written) per block rather than per batch, off the GPU's pace
        pending.append((rows, arrays))
        if sum(len(r) for r, _ in pending) >= WRITE_ROWS:
            flush()
        rows_done.append(rows)
        if collect:
            kept.append(arrays["embeddings"])
        written += len(rows)
        yield Progress("step", written, total, "extracting features", eta_s=clock.eta(written))
    flush()
    result = {"rows": np.concatenate(rows_done) if rows_done else np.zeros(0, np.int64),
              "num_images": written, "skipped": total - written}
    if collect:
        result["embeddings"] = np.concatenate(kept) if kept else np.zeros((0, 0), np.float32)
    yield Progress("done", total, total, data={"result": result})


def extract_features(model: torch.nn.Module, dataset, out_path: str | os.PathLike,
                     batch_size: int = 64, device: str | torch.device = "cpu",
                     num_workers: int | None = None, cancel: CancelToken | None = None,
                     checkpoint_sha256: str | None = None, decode: str = DEFAULT_DECODE) -> Iterator[Progress]:
    """Generator: embed ``dataset`` (a ``core.data.Dataset``) and write the HDF5 feature file
    ``out_path`` (DESIGN.md schema) batch by batch through the store's ``FeatureWriter``; the
    file appears only when complete. ``decode``: where JPEGs are decoded, ``"cpu"`` (default),
    ``"device"`` or ``"auto"`` (on a CUDA device when torchvision can; module docstring;
    recorded as the file's ``image_decoder``). Result: ``{"path", "num_images", "skipped"}``."""
    from .store import FeatureWriter

    result: dict = {}
    with FeatureWriter(out_path, attrs=feature_attrs(model, dataset, checkpoint_sha256), background=True) as writer:
        for event in write_batches(writer, model, dataset, batch_size, device, num_workers, cancel, decode=decode):
            if event.kind == "done":
                result = event.data["result"]
            else:
                yield event
    result = {"path": str(Path(out_path)), "num_images": result["num_images"], "skipped": result["skipped"]}
    yield Progress("done", len(dataset), len(dataset), data={"result": result})
