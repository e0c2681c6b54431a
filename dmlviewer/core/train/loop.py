"""The training loop: a generator of progress events, resumable from its checkpoints.

``train(config, cancel)`` validates the configuration, then yields ``step`` events (data:
epoch, step, loss, losses, lr, overall), ``epoch``, ``evaluate`` (progress of an evaluation
pass: images embedded so far), ``eval`` (data: epoch, metrics on the test split, val metrics on
the validation split, best), ``checkpoint`` (path), ``log`` (warnings, the validation split)
and finally ``done`` (result: the selected checkpoint and its test metrics, the last
checkpoint, the epoch-0 metrics). Every event after the first step carries ``eta_s`` and
``data["overall"]`` (the share of the run done, evaluations included), measured by
:class:`~.selection.RunClock`.

Never worse than where it started: before the first step the model is evaluated (epoch 0, in
``metrics.jsonl`` and the events); every evaluation scores the validation split (part of the
*training* data, :func:`~.selection.validation_split`) and the best one so far is written to
``best.pt``, which the result names as the run's model (epoch 0 included, so a pretrained
backbone whose features fine-tuning made worse is kept as it was; one with too few training
classes to validate on unseen ones keeps its epoch-0 model, see :mod:`.selection`).
``patience`` stops the run after that many evaluations without a validation improvement. For
pretrained backbones the BatchNorm statistics stay fixed (``freeze_bn``) and ``warmup_epochs``
train the new layers alone first.

Files in the run folder (only rank 0 writes): ``config.json`` (the :class:`TrainConfig`),
``checkpoint.pt`` (the last state: after every epoch and on cancel; DESIGN.md format, written
atomically; what ``--resume`` continues), ``best.pt`` (the model selected on validation, in the
same format without the optimizer state) and ``metrics.jsonl`` (one JSON line per logged step,
every ``log_every`` steps, and per evaluation, with ``val`` metrics). The checkpoint's ``extra``
holds what resumption needs: optimizer, scheduler, grad-scaler and sampler states, the loss and
adversary modules, the random generator states, epoch accumulators, the selection record and
the length of ``metrics.jsonl`` at that moment (a resumed run cuts off lines written after the
checkpoint).

Determinism. All randomness of an epoch (augmentation, dropout, batch composition, loader
worker seeds) is drawn from generators reseeded from ``(seed, epoch, rank)`` when the epoch
starts, so a run stopped at an epoch boundary (e.g. killed after a checkpoint) and resumed ends
bit-identical to an uninterrupted one, provided the same machine, torch version and thread
count, and ``deterministic=True`` on CUDA (cuDNN/cuBLAS pick non-deterministic kernels
otherwise). A run cancelled mid-epoch resumes from the saved generator states; that is exact
with ``num_workers=0`` (worker processes restart with fresh streams). Under
``torch.distributed`` exact resumption holds at epoch boundaries.

On CPU, ``deterministic=True`` also runs torch on one intra-op thread (see
:func:`.state.deterministic`, shared with the two-branch trainer), so that two fresh runs are bit-identical whatever thread count
the environment would give them. On CUDA, deterministic algorithms and cuBLAS's fixed workspace
make repeat runs on the same GPU model, driver and library versions identical; mixed precision
(``amp``) keeps that; a different GPU model or cuDNN version may differ.

One run per folder (:mod:`.run_folder`, shared with the two-branch trainer): the run folder is
locked while a run trains in it (a second run on the same folder is refused with a message
naming the process holding it), and temporary files left there by a killed run are removed when
the next run starts. Resumption needs the checkpoint of a ``train`` run (the training state in
its ``extra``), the same options (except those in ``TrainConfig.RESUMABLE_CHANGES``) and the
same training images: the checkpoint keeps a fingerprint of the training listing (paths and
labels), so the dataset may move but not change. Errors name options by identifier
(:mod:`.errors`).

Per step the loop does one host-device synchronization (the loss values, also used to stop
on a non-finite loss) and no file writes beyond a buffered ``metrics.jsonl`` line every
``log_every`` steps.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from dmlviewer.core.progress import Cancelled, CancelToken, Progress

from .config import METRICS_NAME, TrainConfig, combined, validate
from .distributed import DistContext, from_environment
from .errors import TrainingError, TrainingFieldsError, literal
from .objective import Objective
from .optim import build_optimizer, build_scheduler
from .run_folder import (MetricsLog, check_options, check_same_data, check_unfinished, epoch_saved,
                         locked_run_folder, non_finite_loss, saved_on_cancel, write_config)
from .sampler import MPerClassBatches, thin_classes
from .selection import RunClock, Selection, validation_split
from .state import deterministic, epoch_seed, rng_state, seed_everything, set_rng_state

__all__ = ["MetricsLog", "Trainer", "TrainingError", "dataset_fingerprint", "train"]

log = logging.getLogger(__name__)


class Trainer:
    """One training run. ``run()`` is the generator behind :func:`train`; ``prepare()`` and
    ``step()`` are separate so benchmarks and tests can drive single steps."""

    def __init__(self, config: TrainConfig, cancel: CancelToken | None = None) -> None:
        self.config = config
        self.cancel = cancel
        self.dist = DistContext()
        self.device = torch.device("cpu")
        self.term_names: list[str] = []
        self.metrics: dict = {}
        self.epoch = 0  # completed epochs
        self.step_in_epoch = 0
        self.global_step = 0
        self.sums = np.zeros(0)  # per-epoch sums of [loss, *terms]
        self.log_sums = np.zeros(0)
        self.log_count = 0
        self.resume_info: dict | None = None
        self.selection = Selection(config.select_metric)
        self.epoch0_metrics: dict | None = None
        self.early_stopped = False
        self.val_set = None
        self.split_mode = "none"  # of the validation split (selection.ValidationSplit.mode)
        self.clock: RunClock | None = None
        self._embedded = 0  # images of the current evaluation pass embedded so far

    # ------------------------------------------------------------------ set-up

    def _setup_device(self) -> None:
        from dmlviewer.core.models import resolve_device

        device = resolve_device(self.config.device)
        self.dist = from_environment(device.type)
        if device.type == "cuda" and self.dist.enabled:
            device = torch.device("cuda", self.dist.local_rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        self.device = device
        self.amp = device.type == "cuda" and self.config.amp in ("auto", "on")
        self.channels_last = device.type == "cuda"

    def _load_data(self) -> Iterator[Progress]:
        from dmlviewer.core.data import open_dataset

        c = self.config
        dataset = open_dataset(c.dataset, c.format, c.protocol)
        self.dataset = dataset
        self.train_set = dataset.select_split("train")
        self.test_set = dataset.select_split("test")
        if len(self.train_set) == 0:
            raise TrainingError(f"{c.dataset} has no training images under protocol {c.protocol!r}")
        self.fingerprint = dataset_fingerprint(self.train_set)
        split = validation_split(self.train_set.labels, c.val_fraction, c.seed, whole_classes=c.is_pretrained)
        self.split_mode = split.mode
        if len(split.val):
            self.val_set = self.train_set.subset(split.val)
            self.fit_set = self.train_set.subset(split.train)
        else:
            self.fit_set = self.train_set
        if c.val_fraction > 0:
            message = split.describe(c.val_fraction)
            (log.warning if split.mode == "start" else log.info)(message)
            yield Progress("log", message=message, data={"validation": split.mode, "val_images": len(split.val)})
        labels = self.fit_set.labels
        thin = thin_classes(labels)
        if thin:
            names = ", ".join(dataset.class_names[i] for i in thin[:20]) + (" ..." if len(thin) > 20 else "")
            message = (f"{len(thin)} training class(es) with fewer than two images cannot form positive "
                       f"pairs and are left out of sampling: {names}")
            log.warning(message)
            yield Progress("log", message=message, data={"thin_classes": [dataset.class_names[i] for i in thin]})
        classes = np.unique(labels)
        self.num_classes = len(classes)
        label_map = torch.full((int(labels.max()) + 1,), -1, dtype=torch.long)
        label_map[torch.from_numpy(classes)] = torch.arange(len(classes))
        self.label_map = label_map.to(self.device)
        usable = self.num_classes - len(thin)
        self.classes_per_batch, self.images_per_class = c.classes_per_batch, c.images_per_class
        if c.classes_per_batch > usable >= 2:
            # a small training set: every class in each batch, the batch size kept as far as the
            # classes hold images (beyond that a batch only repeats them: issue 42 item 10)
            values, counts = np.unique(labels, return_counts=True)
            sizes = counts[~np.isin(values, thin)]
            self.classes_per_batch = usable
            self.images_per_class = max(c.images_per_class, min(c.batch_size // usable, int(sizes.max())))
            held = f"{sizes.min()}" if sizes.min() == sizes.max() else f"{sizes.min()} to {sizes.max()}"
            message = (f"only {usable} training classes with at least two images ({held} images each): batches of "
                       f"{usable} classes x {self.images_per_class} images instead of {c.classes_per_batch} x "
                       f"{c.images_per_class}")
            log.warning(message)
            yield Progress("log", message=message, data={"classes_per_batch": self.classes_per_batch,
                                                         "images_per_class": self.images_per_class})
        try:
            self.sampler = MPerClassBatches(
                labels, self.classes_per_batch, self.images_per_class, seed=c.seed, rank=self.dist.rank,
                world_size=self.dist.world_size, batches_per_epoch=c.steps_per_epoch or None,
            )
        except ValueError as exc:
            if usable < 2:
                raise TrainingError(
                    f"{c.dataset}: the training split has {usable} class(es) with at least two images; metric "
                    "learning needs two or more such classes (positive and negative pairs)") from None
            raise TrainingFieldsError(f"{literal(exc)}: lower {{classes_per_batch}} (at most {usable})") from None
        self.steps_per_epoch = len(self.sampler)
        self.total_steps = self.steps_per_epoch * c.epochs

    def _make_loader(self) -> None:
        """The training loader, with the model's own input preprocessing."""
        from dmlviewer.core.data import ImageFolderDataset

        self.loader = torch.utils.data.DataLoader(
            ImageFolderDataset(self.fit_set, self.model.preprocess, train=True),
            batch_sampler=self.sampler, num_workers=self.config.num_workers,
            pin_memory=self.device.type == "cuda", generator=torch.Generator(),
        )

    def _build(self) -> None:
        from dmlviewer.core.models import build_model, load_checkpoint

        c = self.config
        if c.resume:
            model, info = load_checkpoint(c.checkpoint_path, self.device)
            self.resume_info = info
            self._resumable(info)
        else:
            seed_everything(c.seed)
            model = build_model(c.model_config(), self.device)
        self.model = model.train()
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self._make_loader()
        self.objective = Objective(self.model, c, self.num_classes).to(self.device)
        self.optimizer = build_optimizer(self.objective, c)
        self.scheduler = build_scheduler(self.optimizer, c, self.total_steps)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)
        self.wrapped = self.objective
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            self.wrapped = DistributedDataParallel(
                self.objective, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                # the backbone gets no gradients while the head warms up
                find_unused_parameters=c.warmup_epochs > 0,
            )
        if self.resume_info is not None:
            self._restore(self.resume_info)

    def _resumable(self, info: dict) -> TrainConfig:
        """The saved training options of a checkpoint that can be resumed by this run, or a
        :class:`TrainingError` saying what can and cannot be resumed."""
        c = self.config
        extra = info.get("extra") or {}
        needed = ("train_config", "optimizer", "scheduler", "scaler", "sampler", "objective", "global_step")
        if not all(k in extra for k in needed):
            raise TrainingFieldsError(
                f"cannot resume from {literal(c.checkpoint_path)}: it holds a model but no training state (it was "
                "not written by `dmlviewer train`, e.g. the demo or an imported checkpoint). {resume} continues a "
                "run in its own folder; to train further from these weights, start a new run in another folder")
        try:
            saved = TrainConfig.from_dict(extra["train_config"])
        except (TypeError, ValueError) as exc:
            raise TrainingError(f"cannot resume from {c.checkpoint_path}: its training options are unreadable "
                                f"({exc})") from None
        recorded = extra.get("dataset_fingerprint")
        if recorded is not None:
            check_same_data(recorded, self.fingerprint, c.dataset, "images", "another dataset",
                            " (paths or labels differ)")
        elif Path(saved.dataset).resolve() != Path(c.dataset).resolve():
            raise TrainingError(f"cannot resume on another dataset: the run trained on {saved.dataset}, not "
                                f"{c.dataset}")
        # the options first: a finished run resumed with another --dim is told which option differs
        check_options([(k, getattr(saved, k), getattr(c, k)) for k in c.differences(saved)])
        check_unfinished(int(info.get("epoch", 0)), bool(int(extra["sampler"].get("start", 0))), c.epochs, c.out)
        return saved

    def _restore(self, info: dict) -> None:
        extra = info["extra"]
        missing, unexpected = self.objective.load_state_dict(extra["objective"], strict=False)
        missing = [k for k in missing if not k.startswith("model.")]
        if missing or unexpected:
            raise TrainingError(f"{self.config.checkpoint_path} does not match this run's losses and "
                                f"adversaries: missing {missing}, unexpected {unexpected}")
        self.optimizer.load_state_dict(extra["optimizer"])
        self.scheduler.load_state_dict(extra["scheduler"])
        if self.config.scheduler == "cosine":
            self.scheduler.T_max = max(1, self.total_steps)  # --epochs may have changed
        self.scaler.load_state_dict(extra["scaler"])
        self.sampler.load_state_dict(extra["sampler"])
        self.epoch = int(info["epoch"])
        self.step_in_epoch = int(extra["sampler"]["start"])
        self.global_step = int(extra["global_step"])
        self.term_names = list(extra["term_names"])
        self.sums = np.asarray(extra["epoch_sums"], dtype=np.float64)
        self.log_sums = np.asarray(extra["log_sums"], dtype=np.float64)
        self.log_count = int(extra["log_count"])
        self.metrics = dict(info.get("metrics") or {})
        if "selection" in extra:
            self.selection.load_state_dict(extra["selection"])
        self.epoch0_metrics = dict(extra.get("epoch0_metrics") or {}) or None
        if self.step_in_epoch:  # cancelled mid-epoch: continue the generators where they were
            set_rng_state(extra["rng"])

    def prepare(self) -> Iterator[Progress]:
        """Device, data, model, objective, optimizer; restores the checkpoint with ``resume``."""
        self._setup_device()
        yield from self._load_data()
        self._build()
        c = self.config
        main = self.dist.is_main
        if main:
            write_config(c.run_dir, c.to_dict())
        resume_bytes = int(self.resume_info["extra"]["metrics_bytes"]) if self.resume_info else None
        self.metrics_log = MetricsLog(c.run_dir / METRICS_NAME, main, resume_bytes)

    # ------------------------------------------------------------------ one step

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> list[float]:
        """Forward, backward and update on one batch; ``[loss, *terms]`` as floats (the one
        host-device synchronization of a step)."""
        images = images.to(self.device, non_blocking=True)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = self.label_map[labels.to(self.device, non_blocking=True)]
        if self.amp:
            with torch.autocast(self.device.type, dtype=torch.float16):
                loss, terms = self.wrapped(images, labels)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss, terms = self.wrapped(images, labels)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        self.scheduler.step()
        if not self.term_names:
            self.term_names = list(terms)
        return torch.stack([loss.detach().float(), *terms.values()]).tolist()

    def record(self, values: list[float]) -> Progress:
        """Bookkeeping after a step: accumulators, a metrics line every ``log_every`` steps,
        the step event. Raises :class:`TrainingError` on a non-finite loss."""
        self.global_step += 1
        self.step_in_epoch += 1
        error = non_finite_loss(f"step {self.global_step} (epoch {self.epoch + 1})",
                                dict(zip(["loss", *self.term_names], values)), self.config.checkpoint_path)
        if error is not None:
            raise error
        v = np.asarray(values)
        if len(self.sums) != len(v):
            self.sums = np.zeros(len(v))
        if len(self.log_sums) != len(v):
            self.log_sums = np.zeros(len(v))
        self.sums += v
        self.log_sums += v
        self.log_count += 1
        losses = dict(zip(self.term_names, values[1:]))
        lr = self.optimizer.param_groups[0]["lr"]
        if self.global_step % self.config.log_every == 0 or self.step_in_epoch == self.steps_per_epoch:
            mean = self.log_sums / self.log_count
            self.metrics_log.write({
                "kind": "step", "epoch": self.epoch + 1, "step": self.global_step, "loss": mean[0],
                "losses": dict(zip(self.term_names, mean[1:].tolist())), "lr": lr,
            })
            self.log_sums[:] = 0
            self.log_count = 0
        data = {"epoch": self.epoch + 1, "step": self.global_step, "loss": values[0], "losses": losses, "lr": lr}
        return Progress("step", self.global_step, self.total_steps, data=data)

    # ------------------------------------------------------------------ epochs

    def _embed(self, dataset, what: str, done: int, total: int) -> Iterator[Progress]:
        """Embed ``dataset``, yielding ``evaluate`` events; returns the embedding result."""
        from dmlviewer.core.evaluate.extract import embed_dataset

        c = self.config
        result = None
        last = time.perf_counter()
        for event in embed_dataset(self.model, dataset, c.eval_batch_size, self.device, c.num_workers, self.cancel,
                                   dist=self.dist):
            if event.kind == "done":
                result = event.data["result"]
                continue
            now = time.perf_counter()
            if self.clock is not None:
                self.clock.images_done(event.current - self._embedded, now - last)
            self._embedded, last = event.current, now
            yield self._timed(Progress(
                "evaluate", done + event.current, total, f"evaluating epoch {self.epoch}: {what}",
                data={"epoch": self.epoch, "split": what, "images": event.current, "of": event.total}))
        self._embedded = 0
        return result

    def evaluate_splits(self) -> Iterator[Progress]:
        """Generator: metrics of the current model on the validation split (retrieval metrics)
        and the test split (all metrics), as ``(val, test)``: every rank embeds its share of the
        batches, rank 0 computes the metrics (others get empty dicts)."""
        from dmlviewer.core.evaluate.evaluation import query_gallery
        from dmlviewer.core.evaluate.metrics import compute_metrics

        c = self.config
        val: dict = {}
        test: dict = {}
        sets = [("validation", self.val_set), ("test", self.test_set)]
        sets = [(name, d) for name, d in sets if d is not None and len(d)]
        total = sum(len(d) for _, d in sets)
        done = 0
        for name, dataset in sets:
            result = yield from self._embed(dataset, name, done, total)
            done += len(dataset)
            if not self.dist.is_main:
                continue
            rows = result["rows"]
            queries, gallery = query_gallery(dataset, rows)
            metrics = compute_metrics(result["embeddings"], dataset.labels[rows], c.ks, self.device,
                                      clustering=name == "test", queries=queries, gallery=gallery)
            if name == "test":
                test = metrics
            else:
                val = metrics
        self.dist.barrier()
        return val, test

    def evaluate(self) -> dict:
        """Metrics of the current model on the test split (rank 0; others wait)."""
        from dmlviewer.core.progress import run_to_end

        holder: dict = {}

        def job() -> Iterator[Progress]:
            holder["value"] = yield from self.evaluate_splits()

        run_to_end(job())
        return holder["value"][1]

    def save(self) -> Path:
        """Checkpoint with everything resumption needs (rank 0 writes; others wait)."""
        from dmlviewer.core.models import save_checkpoint

        path = self.config.checkpoint_path
        if self.dist.is_main:
            objective_state = {k: v for k, v in self.objective.state_dict().items() if not k.startswith("model.")}
            extra = {
                "train_config": self.config.to_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "sampler": {**self.sampler.state_dict(), "start": self.step_in_epoch},
                "objective": objective_state,
                "rng": rng_state(),
                "global_step": self.global_step,
                "term_names": list(self.term_names),
                "epoch_sums": [float(x) for x in self.sums],
                "log_sums": [float(x) for x in self.log_sums],
                "log_count": self.log_count,
                "selection": self.selection.state_dict(),
                "epoch0_metrics": self.epoch0_metrics or {},
                "metrics_bytes": self.metrics_log.flush(),
                "dataset_fingerprint": self.fingerprint,
            }
            save_checkpoint(path, self.model, epoch=self.epoch, metrics=self.metrics, extra=extra)
        self.dist.barrier()
        return path

    def save_best(self, val: dict, test: dict) -> Path:
        """``best.pt``: the current model, selected on validation (rank 0 writes)."""
        from dmlviewer.core.models import save_checkpoint

        path = self.config.best_path
        if self.dist.is_main:
            extra = {"selected_on": self._selected_on, "val_metrics": dict(val),
                     "train_config": self.config.to_dict()}
            save_checkpoint(path, self.model, epoch=self.epoch, metrics=dict(test), extra=extra)
        self.dist.barrier()
        return path

    def _end_epoch(self) -> Progress:
        self.dist.broadcast_buffers(self.objective)
        means = self.sums / max(1, self.step_in_epoch)
        if self.objective.class_adversary is not None and "class" in self.term_names:
            mean_lc = self.dist.mean(float(means[1 + self.term_names.index("class")]))
            self.objective.class_adversary.end_epoch(mean_lc)
        self.epoch += 1
        self.step_in_epoch = 0
        self.sums = np.zeros_like(self.sums)
        data = {"epoch": self.epoch, "loss": float(means[0]) if len(means) else float("nan"),
                "losses": dict(zip(self.term_names, means[1:].tolist()))}
        return Progress("epoch", self.epoch, self.config.epochs, f"epoch {self.epoch} done", data=data)

    def _result(self, cancelled: bool = False) -> Progress:
        c = self.config
        selected = self.selection.best_epoch >= 0 and c.best_path.exists()
        result = {
            # the run's model: the one selected on validation, else the last
            "checkpoint": str(c.best_path if selected else c.checkpoint_path),
            "metrics": dict(self.selection.best_test if selected else self.metrics),
            "selected_epoch": self.selection.best_epoch if selected else self.epoch,
            "val_metrics": dict(self.selection.best_val or {}) if selected else {},
            "selected_on": self._selected_on if selected else "last epoch",
            "last_checkpoint": str(c.checkpoint_path), "last_metrics": dict(self.metrics),
            "epoch0_metrics": dict(self.epoch0_metrics or {}),
            "epochs": self.epoch, "steps": self.global_step, "cancelled": cancelled,
            "early_stopped": self.early_stopped,
        }
        return Progress("done", self.global_step, self.total_steps, data={"result": result})

    def run(self) -> Iterator[Progress]:
        """Train in the locked run folder (rank 0 of a distributed run holds the lock); temporary
        files a killed run left there are removed once the lock is held."""
        try:
            with locked_run_folder(self.config.run_dir, main=int(os.environ.get("RANK", "0")) == 0):
                yield from self._run()
        finally:
            self.dist.close()

    def _run(self) -> Iterator[Progress]:
        from dmlviewer.core.evaluate.extract import persistent_loaders

        c = self.config
        try:
            yield from self.prepare()
            # the evaluation loaders' workers forked once for the run, not once an evaluation
            with deterministic(c.deterministic, self.device), persistent_loaders():
                yield from self._epochs()
        except torch.cuda.OutOfMemoryError:
            raise TrainingFieldsError(
                f"CUDA out of memory with batches of {c.batch_size} images of {c.image_size} px "
                f"({c.classes_per_batch} classes x {c.images_per_class}): try a smaller "
                "{classes_per_batch}, {images_per_class} or {image_size}"
            ) from None

    def _batches(self) -> Iterator:
        """The loader's batches until the epoch ends or cancel is set; the flag is checked before
        each batch is drawn, so a cancelled run has not consumed random numbers for a batch it
        will not train on."""
        from dmlviewer.core.data.torch_dataset import start_workers, worker_errors

        iterator = start_workers(self.loader)
        while not (self.cancel is not None and self.cancel.cancelled):
            try:
                with worker_errors():
                    batch = next(iterator)
            except StopIteration:
                return
            yield batch

    def _timed(self, event: Progress) -> Progress:
        """``event`` with the run's ETA and overall fraction."""
        if self.clock is not None:
            event.eta_s = self.clock.eta()
            event.data["overall"] = min(self.clock.fraction(), 0.999)  # 100 % is for "done" only
        return event

    def _evaluations_left(self, first_epoch: int) -> int:
        """Evaluation passes still to come (epoch 0 pending counts when ``first_epoch`` is 0)."""
        c = self.config
        epochs = range(first_epoch + 1, c.epochs + 1)
        n = sum(1 for e in epochs if e == c.epochs or (c.eval_every and e % c.eval_every == 0))
        return n + (1 if self._epoch0_pending() else 0)

    def _epoch0_pending(self) -> bool:
        return (self.global_step == 0 and self.epoch == 0 and self.epoch0_metrics is None
                and (self.config.eval_every > 0 or self.split_mode == "start"))

    def _set_train_mode(self) -> None:
        """Training mode, except the backbone's BatchNorm layers when their statistics are frozen;
        the backbone is frozen during the head's warm-up epochs."""
        c = self.config
        self.objective.train()
        if c.frozen_bn:
            for module in self.model.backbone.modules():
                if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                    module.eval()
        warm = self.epoch < c.warmup_epochs
        for p in self.model.backbone.parameters():
            p.requires_grad_(not warm)

    def _evaluation(self) -> Iterator[Progress]:
        """Evaluate, log, select; yields events (rank 0; the other ranks take part in the
        collective decisions). Raises ``Cancelled`` when cancelled meanwhile."""
        c = self.config
        start = time.perf_counter()
        val, test = yield from self.evaluate_splits()
        best = False
        if test or val:
            self.metrics = test
            if self.epoch == 0:
                self.epoch0_metrics = dict(test)
            if self.split_mode == "start":  # nothing can judge unseen classes: the starting model stays
                best = self.epoch == 0 and self.selection.offer(0, {}, test, score=0.0)
            else:
                best = self.val_set is not None and bool(val) and self.selection.offer(self.epoch, val, test)
            record = {"kind": "eval", "epoch": self.epoch, "step": self.global_step, "metrics": test}
            if val:
                record["val"] = val
            self.metrics_log.write(record)
            yield self._timed(Progress(
                "eval", self.epoch, c.epochs, f"evaluated in {time.perf_counter() - start:.1f} s",
                data={"metrics": dict(test), "val": dict(val), "epoch": self.epoch, "best": best}))
        if self._selecting and self.dist.mean(float(best)) > 0:  # the other ranks follow rank 0
            path = self.save_best(val, test)
            if self.dist.is_main:
                why = ("the starting model, kept" if self.split_mode == "start" else
                       f"best so far (validation {c.select_metric} {self.selection.best_score:.4f}, "
                       f"epoch {self.epoch})")
                yield self._timed(Progress("checkpoint", self.epoch, c.epochs, f"{why}: {path}",
                                           data={"path": str(path), "best": True, "epoch": self.epoch}))

    @property
    def _selected_on(self) -> str:
        if self.split_mode == "start":
            return "the starting model (too few training classes to validate on unseen ones)"
        return f"validation {self.config.select_metric}"

    @property
    def _selecting(self) -> bool:
        """Whether evaluations choose ``best.pt`` (a validation split, or the starting model kept)."""
        return self.val_set is not None or self.split_mode == "start"

    def _cancelled(self) -> Iterator[Progress]:
        path = self.save()
        yield saved_on_cancel(path, self.global_step, self.total_steps)
        yield self._result(cancelled=True)

    def _epochs(self) -> Iterator[Progress]:
        c = self.config
        if self.epoch >= c.epochs:
            yield self._result()
            return
        eval_images = (len(self.val_set) if self.val_set is not None else 0) + len(self.test_set)
        self.clock = RunClock(self.total_steps - self.global_step, self._evaluations_left(self.epoch) * eval_images)
        if self._epoch0_pending():
            try:
                yield from self._evaluation()
            except Cancelled:
                yield from self._cancelled()
                return
        while self.epoch < c.epochs:
            seed = epoch_seed(c.seed, self.epoch, self.dist.rank)
            if self.step_in_epoch == 0:
                seed_everything(seed)
            self.sampler.set_epoch(self.epoch, self.step_in_epoch)
            self.loader.generator.manual_seed(seed + 1)
            self._set_train_mode()
            last = time.perf_counter()
            for images, labels, _ in self._batches():
                values = self.step(images, labels)
                self.clock.steps_done(1, time.perf_counter() - last)
                yield self._timed(self.record(values))
                last = time.perf_counter()
            if self.step_in_epoch < self.steps_per_epoch:  # cancelled (checked before each batch is drawn)
                yield from self._cancelled()
                return
            yield self._timed(self._end_epoch())
            if self.epoch == c.epochs or (c.eval_every and self.epoch % c.eval_every == 0):
                try:
                    yield from self._evaluation()
                except Cancelled:
                    yield from self._cancelled()
                    return
                stop = (c.patience > 0 and self.val_set is not None and self.epoch < c.epochs
                        and self.selection.since_best >= c.patience)
                if self.dist.mean(float(stop)) > 0:  # rank 0 decides
                    self.early_stopped = True
                    message = (f"early stop after epoch {self.epoch}: no validation improvement in "
                               f"{c.patience} evaluation(s); best epoch {self.selection.best_epoch}")
                    log.info(message)
                    yield Progress("log", self.epoch, c.epochs, message, data={"early_stop": True})
            path = self.save()
            yield self._timed(epoch_saved(path, self.epoch, c.epochs))
            if self.early_stopped:
                break
        yield self._result()


def dataset_fingerprint(train_set) -> dict:
    """What a resumed run must train on: the training listing's paths and labels (sha256), its
    size and where it was (for messages)."""
    import hashlib

    digest = hashlib.sha256()
    digest.update("\n".join(train_set.paths).encode("utf-8", "surrogateescape"))
    digest.update(np.asarray(train_set.labels, dtype="<i8").tobytes())
    return {"sha256": digest.hexdigest(), "images": len(train_set), "root": str(train_set.root)}


def train(config: TrainConfig, cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Generator: train as ``config`` says (see the module docstring for events and files).
    Raises a ``ValueError`` (:class:`~.errors.FieldsError`) listing every problem of an invalid
    configuration before any work."""
    errors = validate(config)
    if errors:
        raise combined(errors)
    yield from Trainer(config, cancel).run()
