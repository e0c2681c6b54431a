"""Training a two-branch (cross-view) model as the cross-view papers do (issue 25).

Data: a ``cvusa`` dataset (:mod:`dmlviewer.core.data.cross_view`), one match per query. A batch
is ``batch_pairs`` training pairs; the street panorama goes through the query branch at its
input shape, the aerial image through the reference branch, **randomly rotated** about its
centre (uniform angle) so that the aerial branch becomes near rotation invariant (seed 000
Sec. 5.3 trains so).

Loss: the weighted soft-margin triplet loss of Hu et al. 2018 (CVM-Net, Eq. 9),
``log(1 + exp(alpha (d_pos - d_neg)))`` with ``alpha = 10`` and ``d`` the squared Euclidean
distance of the L2-normalized embeddings, over every in-batch negative in both directions
(street to aerial and aerial to street; CVM-Net's exhaustive mini-batch).

Default model: ``small_cnn`` per branch, global max pooling, D = 64 (on the synthetic set GMP's
peaky maps gave far better orientation estimates than GAP's, at a somewhat lower Recall@1;
README "Cross-view").

Metrics (:func:`cross_view_recall`): Recall@1, @5 and @1 % of street-to-aerial retrieval on the
test pairs, each query against every test aerial image (CVUSA's protocol); ``num_queries``.
The run folder gets ``checkpoint.pt`` (two-branch format, with the metrics), ``config.json``
and ``metrics.jsonl`` (one line per epoch, epoch 0 before training).

What one-branch training (:mod:`.loop`) also does comes from the same parts: the locked run
folder, ``config.json``, ``metrics.jsonl`` and the resumption checks (:mod:`.run_folder`), the
determinism switches (:func:`.state.deterministic`: deterministic algorithms, cuDNN's
deterministic kernels, one CPU thread; cuDNN autotuning on CUDA otherwise), the random generator
states (:mod:`.state`) and the errors naming options by identifier (:mod:`.errors`). This
module keeps what is its own: the loss, the batches of pairs with their rotations, the metrics.

Resumption (``resume=True``), as one-branch training does: the checkpoint is
written atomically after every epoch and on cancel, and its ``extra["cross_view"]`` holds what
continuing needs (the options, the optimizer state, the position in the epoch, the metric lines
so far, a fingerprint of the training pairs, the random generators). The batch order and the
aerial rotations come from one numpy generator seeded with ``seed`` (the model's initialization
from torch's, seeded so too); the checkpoint keeps that generator's state at the start of the
current epoch and torch's generators, and a run resumed mid-epoch replays the epoch's draws up
to where it stopped. So a resumed run ends bit-identical to an uninterrupted one (same machine,
torch version and thread count; ``deterministic`` fixes the last to one). A folder holding a
checkpoint is refused without ``resume``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from dmlviewer.core.progress import Cancelled, CancelToken, Progress

from .config import (BACKBONES, CHECKPOINT_NAME, CONFIG_NAME, METRICS_NAME, POOLINGS, combined,
                     device_problem, out_problem, path_kind, pretrained_problem, run_folder_problem)
from .errors import FieldsError, TrainingError, literal
from .run_folder import (MetricsLog, check_options, check_same_data, check_unfinished, epoch_saved,
                         locked_run_folder, non_finite_loss, saved_on_cancel, write_config)
from .state import deterministic, rng_state, set_rng_state

log = logging.getLogger(__name__)

ALPHA = 10.0


@dataclass
class CrossViewConfig:
    """Options of :func:`train_cross_view` (``query_shape``: the panorama input; ``reference_size``:
    the square aerial input)."""

    dataset: str
    out: str
    backbone: str = "small_cnn"
    pretrained: str | None = None
    pooling: str = "gmp"  # peaky maps: on the synthetic set, orientation from GAP models was at chance
    dim: int = 64
    epochs: int = 20
    batch_pairs: int = 16
    lr: float = 1e-3
    alpha: float = ALPHA
    rotate: bool = True
    query_shape: tuple[int, int] = (64, 256)
    reference_size: int = 128
    seed: int = 0
    device: str = "cpu"
    extra_model: dict = field(default_factory=dict)
    resume: bool = False
    deterministic: bool = False

    #: options a resumed run may change (the dataset may move: its training pairs are fingerprinted)
    RESUMABLE = ("dataset", "out", "epochs", "device", "resume", "deterministic")

    def differences(self, saved: dict) -> list[tuple[str, Any, Any]]:
        """``(option, saved value, value)`` for every option that differs from a run's ``saved``
        ones (:meth:`to_dict`) other than :attr:`RESUMABLE`."""
        mine = self.to_dict()
        return [(k, saved.get(k), v) for k, v in mine.items()
                if k not in self.RESUMABLE and k in saved and saved[k] != v]

    def to_dict(self) -> dict:
        """Plain values (tuples as lists), as ``config.json`` and the checkpoint hold them."""
        d = asdict(self)
        d["query_shape"] = list(d["query_shape"])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> CrossViewConfig:
        """The config of :meth:`to_dict` (unknown keys ignored)."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        if "query_shape" in known:
            known["query_shape"] = tuple(int(v) for v in known["query_shape"])
        return cls(**known)


def soft_margin_triplet_loss(query: torch.Tensor, reference: torch.Tensor, alpha: float = ALPHA) -> torch.Tensor:
    """CVM-Net's weighted soft-margin triplet loss (Hu et al. 2018, Eq. 9) over all in-batch
    negatives, both directions: ``query[i]`` and ``reference[i]`` (L2-normalized, B x D) match."""
    distance = 2.0 - 2.0 * query @ reference.T  # squared Euclidean distance of unit vectors
    positive = distance.diagonal()
    off = ~torch.eye(len(query), dtype=torch.bool, device=query.device)
    to_reference = torch.nn.functional.softplus(alpha * (positive[:, None] - distance))[off]
    to_query = torch.nn.functional.softplus(alpha * (positive[None, :] - distance))[off]
    return (to_reference.mean() + to_query.mean()) / 2


def cross_view_recall(query: np.ndarray, reference: np.ndarray) -> dict:
    """Recall@1, @5 and @1 % of retrieving ``reference[i]`` for ``query[i]`` among all rows of
    ``reference`` (cosine similarity; ties count against the query). @1 % is the top
    ``ceil(N / 100)``: with fewer than 101 references it equals Recall@1."""
    query, reference = np.asarray(query, np.float64), np.asarray(reference, np.float64)
    similarity = query @ reference.T
    true = similarity.diagonal()
    rank = (similarity >= true[:, None]).sum(1) - 1  # 0: the match is first
    n = len(reference)
    top_percent = max(1, math.ceil(0.01 * n))
    return {"recall@1": float((rank < 1).mean()), "recall@5": float((rank < 5).mean()),
            "recall@1%": float((rank < top_percent).mean()), "num_queries": len(query)}


def rotate_about_centre(image: np.ndarray, degrees: float) -> np.ndarray:
    """``image`` rotated counter-clockwise by ``degrees`` about its centre (borders reflected)."""
    h, w = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((w / 2 - 0.5, h / 2 - 0.5), degrees, 1.0)
    return cv2.warpAffine(image, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def build_cross_view_model(config: CrossViewConfig):
    """The two-branch model of ``config``: one backbone per branch, same head, separate weights."""
    from dmlviewer.core.models.model import default_config
    from dmlviewer.core.models.two_branch import build_two_branch

    branch = default_config(backbone=config.backbone, pretrained=config.pretrained, pooling=config.pooling,
                            dim=config.dim, **config.extra_model)
    return build_two_branch({"branches": {"query": branch, "reference": dict(branch)},
                             "input_shapes": {"query": list(config.query_shape),
                                              "reference": [config.reference_size] * 2}}, config.device)


def _load(dataset, indices) -> list[np.ndarray]:
    from dmlviewer.core.data import load_dataset_image

    return [load_dataset_image(dataset, int(i)) for i in indices]


@torch.no_grad()
def embed_pairs(model, streets: list[np.ndarray], aerials: list[np.ndarray], device, batch: int = 64):
    """Embeddings (N x D numpy) of the streets by the query branch and the aerials by the reference branch."""
    model.eval()
    out = []
    for side, images in (("query", streets), ("reference", aerials)):
        preprocess, branch = model.preprocess_of(side), model.branch(side)
        rows = [branch(torch.stack([preprocess(im) for im in images[i : i + batch]]).to(device)).embedding.cpu()
                for i in range(0, len(images), batch)]
        out.append(torch.cat(rows).numpy())
    return out[0], out[1]


#: the longest side of a branch's input (the one-branch ``image_size`` limit)
MAX_SIDE = 4096


def validate_cross_view(config: CrossViewConfig) -> list[FieldsError]:
    """Everything wrong with ``config`` that can be told without reading the dataset, one
    sentence each naming its options by identifier (empty when valid); the dataset itself is
    checked when the run opens it."""
    E = FieldsError
    c, errors = config, []
    if not c.dataset:
        errors.append(E("{dataset} is required"))
    elif path_kind(c.dataset) != "dir":
        errors.append(E(f"dataset folder not found: {literal(c.dataset)}"))
    out_kind = path_kind(c.out) if c.out else None
    errors.append(out_problem(c.out, out_kind))
    if str(c.backbone).startswith("timm:"):
        from dmlviewer.core.models.model import check_config, default_config

        try:
            check_config(default_config(backbone=c.backbone, pretrained=c.pretrained, pooling=c.pooling, dim=c.dim))
        except ValueError as exc:
            errors.append(E(f"{{backbone}} {literal(c.backbone)}: {literal(exc)}"))
    elif c.backbone not in BACKBONES:
        errors.append(E(f"{{backbone}} must be one of {', '.join(BACKBONES)} (got {literal(repr(c.backbone))})"))
    if c.pooling not in POOLINGS:
        errors.append(E(f"{{pooling}} must be one of {', '.join(POOLINGS)} (got {literal(repr(c.pooling))})"))
    errors.append(pretrained_problem(c.backbone, c.pretrained))
    if not 1 <= c.dim <= 16384:
        errors.append(E(f"{{dim}} must be from 1 to 16384 (got {c.dim})"))
    if c.epochs < 1:
        errors.append(E(f"{{epochs}} must be at least 1 (got {c.epochs})"))
    if c.batch_pairs < 2:
        errors.append(E(f"{{batch_pairs}} (pairs per batch) must be at least 2 to form negatives (got {c.batch_pairs})"))
    if not (math.isfinite(c.lr) and c.lr > 0):
        errors.append(E(f"{{lr}} must be a positive number (got {c.lr})"))
    if not (math.isfinite(c.alpha) and c.alpha > 0):
        errors.append(E(f"{{alpha}} must be a positive number (got {c.alpha})"))
    if not 32 <= c.reference_size <= MAX_SIDE // 2:
        errors.append(E(f"{{reference_size}} must be from 32 to {MAX_SIDE // 2} with two branches (got "
                        f"{c.reference_size}): the street panoramas are S/2 x 2S pixels"))
    h, w = (tuple(c.query_shape) + (0, 0))[:2]
    if 32 <= c.reference_size <= MAX_SIDE // 2 and not (16 <= h <= MAX_SIDE and 16 <= w <= MAX_SIDE):
        errors.append(E(f"{{query_shape}}: the panorama input must be from 16 to {MAX_SIDE} px per side "
                        f"(got {h} x {w})"))
    if not 0 <= c.seed < 2**32:
        errors.append(E(f"{{seed}} must be from 0 to {2**32 - 1} (got {c.seed})"))
    errors.append(device_problem(c.device))
    errors.append(run_folder_problem(c.out, out_kind, c.resume))
    return [e for e in errors if e is not None]


def saved_config(out: str | os.PathLike) -> dict | None:
    """The options of the two-branch run in ``out`` (its ``config.json``), or ``None`` when there
    is none or it is unreadable (resumption then says what is wrong)."""
    path = Path(out) / CONFIG_NAME
    try:
        from dmlviewer.core.files import read_regular

        data = json.loads(read_regular(path, 1 << 20).decode("utf-8"))
    except Exception:  # noqa: BLE001 - any unreadable file: no saved options
        return None
    return data if isinstance(data, dict) and "reference_size" in data else None


def pairs_fingerprint(dataset, street: np.ndarray, aerial: np.ndarray) -> dict:
    """What a resumed run must train on: the training pairs' paths (sha256), their number and
    where they were (for messages)."""
    digest = hashlib.sha256()
    for s, a in zip(street, aerial):
        digest.update(f"{dataset.paths[int(s)]}\0{dataset.paths[int(a)]}\n".encode("utf-8", "surrogateescape"))
    return {"sha256": digest.hexdigest(), "pairs": len(street), "root": str(dataset.root)}


def train_cross_view(config: CrossViewConfig, on_epoch: Callable[[dict], None] | None = None,
                     cancel: CancelToken | None = None) -> dict:
    """Train (module docstring); returns the last record (``epoch``, ``loss``, metrics,
    ``checkpoint``, ``cancelled``); ``on_epoch(record)`` after every evaluation (epoch 0 first).
    Errors as :func:`train_cross_view_events`."""
    result: dict = {}
    for event in train_cross_view_events(config, cancel):
        if event.kind == "eval" and on_epoch is not None:
            on_epoch(event.data["record"])
        elif event.kind == "done":
            result = event.data["result"]
    return result


def train_cross_view_events(config: CrossViewConfig, cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Generator of the run's progress (the app's training dialog runs it as a job): ``step``
    (data: epoch, step, loss, losses, lr, overall), ``eval`` (data: epoch, metrics, record),
    ``checkpoint`` (data: path) and ``done`` (data: result, as :func:`train_cross_view` returns).

    Raises a ``ValueError`` (:class:`~.errors.FieldsError`) for an invalid ``config``
    (:func:`validate_cross_view`),
    :class:`~dmlviewer.core.data.DatasetError` for a dataset that is not a usable cvusa set,
    :class:`~dmlviewer.core.files.FolderBusy` when another run trains in ``out`` and
    :class:`~.errors.TrainingError` for a run that cannot start or go on (nothing to resume,
    other options or pairs than the run's, a non-finite loss: the last good checkpoint is
    kept). ``cancel`` is checked before each batch: a cancelled run saves its state, which
    ``resume`` continues exactly, and returns with ``cancelled`` true."""
    from dmlviewer.core.models.device import resolve_device

    errors = validate_cross_view(config)
    if errors:
        raise combined(errors)
    with locked_run_folder(config.out), deterministic(config.deterministic, resolve_device(config.device)):
        yield from _Run(config, cancel).events()


class _Run:
    """One two-branch training run (:func:`train_cross_view`)."""

    def __init__(self, config: CrossViewConfig, cancel: CancelToken | None) -> None:
        self.config, self.cancel = config, cancel
        self.out = Path(config.out)
        self.lines: list[str] = []  # of metrics.jsonl (also in the checkpoint)
        self.epoch = 0  # completed epochs
        self.step_in_epoch = 0
        self.losses: list[float] = []  # of the current epoch
        self.metrics: dict = {}
        self.epoch_start: str | None = None  # the numpy generator's state when the epoch under way began

    def _data(self) -> None:
        from dmlviewer.core.data import DatasetError, open_dataset
        from dmlviewer.core.data.cross_view import cross_view_pairs

        c = self.config
        dataset = open_dataset(c.dataset)
        if dataset.format != "cvusa":
            raise DatasetError(f"{c.dataset} is a {dataset.format} dataset: two-branch training needs a cross-view "
                               "dataset in CVUSA's layout (splits/train-19zl.csv, splits/val-19zl.csv), "
                               "such as the cross-view demo data")
        pairs = cross_view_pairs(dataset)
        train_idx, test_idx = np.flatnonzero(pairs.split == "train"), np.flatnonzero(pairs.split == "test")
        if len(train_idx) < 2 or len(test_idx) < 1:
            raise DatasetError(f"{c.dataset}: two-branch training needs at least 2 training pairs and 1 test pair, "
                               f"got {len(train_idx)} and {len(test_idx)}")
        self.fingerprint = pairs_fingerprint(dataset, pairs.street[train_idx], pairs.aerial[train_idx])
        self.train_s, self.train_a = _load(dataset, pairs.street[train_idx]), _load(dataset, pairs.aerial[train_idx])
        self.test_s, self.test_a = _load(dataset, pairs.street[test_idx]), _load(dataset, pairs.aerial[test_idx])
        self.batch = max(2, min(c.batch_pairs, len(train_idx)))
        self.steps_per_epoch = len(train_idx) // self.batch

    def _load_resumable(self) -> dict:
        """The checkpoint to resume: its model and two-branch training state."""
        from dmlviewer.core.models.checkpoint import load_checkpoint

        path = self.out / CHECKPOINT_NAME
        model, info = load_checkpoint(path, self.device)
        state = (info.get("extra") or {}).get("cross_view")
        if not isinstance(state, dict) or not isinstance(state.get("config"), dict):
            raise TrainingError(f"cannot resume from {path}: it holds no two-branch training state (it was not "
                                "written by two-branch training)")
        return {"model": model, "info": info, "state": state}

    def _resume_state(self, loaded: dict) -> dict:
        """``loaded`` (:meth:`_load_resumable`) checked against this run's options and pairs."""
        c, info, state = self.config, loaded["info"], loaded["state"]
        check_options(c.differences(state["config"]))
        check_same_data(state.get("dataset_fingerprint"), self.fingerprint, c.dataset, "pairs", "other pairs")
        check_unfinished(int(info["epoch"]), bool(int(state.get("step_in_epoch", 0))), c.epochs, c.out)
        return loaded

    def events(self) -> Iterator[Progress]:
        from dmlviewer.core.models.device import resolve_device

        c = self.config
        self.device = resolve_device(c.device)
        loaded = self._load_resumable() if c.resume else None  # a one-branch run is told before its data is read
        self._data()
        resumed = self._resume_state(loaded) if loaded is not None else None
        self.rng = np.random.default_rng(c.seed)
        if resumed is None:
            torch.manual_seed(c.seed)
            self.model = build_cross_view_model(c)
        else:
            self.model = resumed["model"]
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=c.lr)
        self.pre_q, self.pre_r = self.model.preprocess_of("query"), self.model.preprocess_of("reference")
        write_config(self.out, c.to_dict())
        self.metrics_log = MetricsLog(self.out / METRICS_NAME)
        if resumed is None:
            yield self._evaluate(None)
        else:
            state = resumed["state"]
            self.optimizer.load_state_dict(state["optimizer"])
            self.epoch = int(resumed["info"]["epoch"])
            self.step_in_epoch = int(state.get("step_in_epoch", 0))
            self.losses = [float(x) for x in state.get("epoch_losses", [])]
            self.lines = [str(x) for x in state.get("records", [])]
            self.metrics = dict(resumed["info"].get("metrics") or {})
            self.metrics_log.restore(self.lines)
            try:
                self.rng.bit_generator.state = json.loads(state["generator"])
                set_rng_state(state["rng"])
            except (KeyError, TypeError, ValueError) as exc:
                raise TrainingError(f"cannot resume from {self.out / CHECKPOINT_NAME}: its random generator "
                                    f"states are unreadable ({str(exc)[:100]})") from None
            log.info("resuming %s at epoch %d, step %d", self.out, self.epoch + 1, self.step_in_epoch)
        started = time.perf_counter()
        total = c.epochs * self.steps_per_epoch
        while self.epoch < c.epochs:
            try:
                finished = yield from self._train_epoch(total)
            except Cancelled:  # thrown in at a step by a job runner: the state after that step is whole
                finished = False
            if not finished:
                path = self._save()
                log.info("cancelled at epoch %d, step %d; state saved to %s", self.epoch + 1, self.step_in_epoch, path)
                yield saved_on_cancel(path, self.epoch, c.epochs)
                result = {**self._last_record(), "checkpoint": str(path), "cancelled": True}
                yield Progress("done", self.epoch, c.epochs, data={"result": result})
                return
            self.epoch += 1
            loss = float(np.mean(self.losses)) if self.losses else None
            self.step_in_epoch, self.losses = 0, []
            yield self._evaluate(loss)
            path = self._save()
            yield epoch_saved(path, self.epoch, c.epochs)
        self.model.eval()
        log.info("trained to epoch %d in %.1f s; checkpoint %s", c.epochs, time.perf_counter() - started,
                 self.out / CHECKPOINT_NAME)
        result = {**self._last_record(), "checkpoint": str(self.out / CHECKPOINT_NAME), "cancelled": False}
        yield Progress("done", c.epochs, c.epochs, data={"result": result})

    def _last_record(self) -> dict:
        return json.loads(self.lines[-1]) if self.lines else {"epoch": self.epoch, "loss": None, **self.metrics}

    def _train_epoch(self, total: int) -> Iterator[Progress]:
        """Generator: train the rest of epoch ``self.epoch + 1``, a ``step`` event per batch;
        *returns* ``False`` when cancelled before its end. The numpy generator is at the
        epoch's start here (a resumed run's checkpoint holds that state)."""
        c = self.config
        rng = self.rng
        self.epoch_start = json.dumps(rng.bit_generator.state)
        order = rng.permutation(len(self.train_s))
        # the draws of the steps already done (a run resumed mid-epoch), so the rest is the same
        for _ in range(self.step_in_epoch):
            if c.rotate:
                rng.uniform(0, 360, size=self.batch)
        self.model.train()
        while self.step_in_epoch < self.steps_per_epoch:
            if self.cancel is not None and self.cancel.cancelled:
                return False
            chosen = order[self.step_in_epoch * self.batch : (self.step_in_epoch + 1) * self.batch]
            angles = rng.uniform(0, 360, size=self.batch) if c.rotate else None
            xq = torch.stack([self.pre_q(self.train_s[i]) for i in chosen]).to(self.device)
            aerials = [rotate_about_centre(self.train_a[i], float(angles[k])) if c.rotate else self.train_a[i]
                       for k, i in enumerate(chosen)]
            xr = torch.stack([self.pre_r(a) for a in aerials]).to(self.device)
            loss = soft_margin_triplet_loss(self.model(xq, "query").embedding,
                                            self.model(xr, "reference").embedding, c.alpha)
            error = non_finite_loss(f"epoch {self.epoch + 1}, step {self.step_in_epoch + 1}",
                                    {"loss": float(loss.detach())}, self.out / CHECKPOINT_NAME)
            if error is not None:
                raise error
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.losses.append(float(loss.detach()))
            self.step_in_epoch += 1
            done = self.epoch * self.steps_per_epoch + self.step_in_epoch
            yield Progress("step", done, total, data={
                "epoch": self.epoch + 1, "step": done, "loss": self.losses[-1], "losses": {},
                "lr": self.optimizer.param_groups[0]["lr"], "overall": min(0.999, done / max(1, total))})
        self.epoch_start = None  # the epoch ended: the next starts where the generator is now
        return True

    def _evaluate(self, loss: float | None) -> Progress:
        metrics = cross_view_recall(*embed_pairs(self.model, self.test_s, self.test_a, self.device))
        record = {"epoch": self.epoch, "loss": loss, **metrics}
        self.metrics = dict(metrics)
        self.lines.append(self.metrics_log.write(record))
        log.info("epoch %d: loss %s, recall@1 %.3f, recall@5 %.3f, recall@1%% %.3f", self.epoch,
                 "-" if loss is None else f"{loss:.4f}", metrics["recall@1"], metrics["recall@5"], metrics["recall@1%"])
        return Progress("eval", self.epoch, self.config.epochs,
                        data={"epoch": self.epoch, "metrics": dict(metrics), "record": record})

    def _save(self) -> Path:
        """``checkpoint.pt`` (atomic): the model, its metrics and the training state."""
        from dmlviewer.core.models.checkpoint import save_checkpoint

        state = {"config": self.config.to_dict(), "optimizer": self.optimizer.state_dict(),
                 "step_in_epoch": self.step_in_epoch, "epoch_losses": list(self.losses),
                 "records": list(self.lines), "dataset_fingerprint": dict(self.fingerprint),
                 # the numpy generator at the start of the epoch under way (cancelled) or of the next one
                 "generator": self.epoch_start or json.dumps(self.rng.bit_generator.state),
                 "rng": rng_state()}
        was_training = self.model.training
        self.model.eval()
        path = save_checkpoint(self.out / CHECKPOINT_NAME, self.model, self.epoch, self.metrics,
                               extra={"cross_view": state})
        self.model.train(was_training)
        return path
