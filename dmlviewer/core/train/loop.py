"""The training loop: a generator of progress events, resumable from its checkpoints.

``train(config, cancel)`` validates the configuration, then yields ``step`` events (data:
epoch, step, loss, losses, lr), ``epoch``, ``eval`` (metrics on the test split), ``checkpoint``
(path), ``log`` (warnings) and finally ``done`` (result: checkpoint path and final metrics).

Files in the run folder (only rank 0 writes): ``config.json`` (the :class:`TrainConfig`),
``checkpoint.pt`` (after every epoch and on cancel; DESIGN.md format, written atomically) and
``metrics.jsonl`` (one JSON line per logged step, every ``log_every`` steps, and per
evaluation). The checkpoint's ``extra`` holds what resumption needs: optimizer, scheduler,
grad-scaler and sampler states, the loss and adversary modules, the random generator states,
epoch accumulators and the length of ``metrics.jsonl`` at that moment (a resumed run cuts off
lines written after the checkpoint).

Determinism. All randomness of an epoch (augmentation, dropout, batch composition, loader
worker seeds) is drawn from generators reseeded from ``(seed, epoch, rank)`` when the epoch
starts, so a run stopped at an epoch boundary (e.g. killed after a checkpoint) and resumed ends
bit-identical to an uninterrupted one, provided the same machine, torch version and thread
count, and ``deterministic=True`` on CUDA (cuDNN/cuBLAS pick non-deterministic kernels
otherwise). A run cancelled mid-epoch resumes from the saved generator states; that is exact
with ``num_workers=0`` (worker processes restart with fresh streams). Under
``torch.distributed`` exact resumption holds at epoch boundaries.

One run per folder: the run folder is locked while a run trains in it (a second ``train`` on
the same ``--out`` is refused with a message naming the process holding it), and temporary
files left there by a killed run are removed when the next run starts. Resumption needs the
checkpoint of a ``train`` run (the training state in its ``extra``), the same options (except
those in ``TrainConfig.RESUMABLE_CHANGES``) and the same training images: the checkpoint keeps
a fingerprint of the training listing (paths and labels), so the dataset may move but not
change.

Per step the loop does one host-device synchronization (the loss values, also used to stop
on a non-finite loss) and no file writes beyond a buffered ``metrics.jsonl`` line every
``log_every`` steps.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from dmlviewer.core.files import FolderLock, remove_stale_temp_files, write_text_atomic
from dmlviewer.core.progress import Cancelled, CancelToken, EtaClock, Progress

from .config import CONFIG_NAME, METRICS_NAME, TrainConfig, validate
from .distributed import DistContext, from_environment
from .objective import Objective
from .optim import build_optimizer, build_scheduler
from .sampler import MPerClassBatches, thin_classes
from .state import epoch_seed, rng_state, seed_everything, set_rng_state

log = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """Training cannot go on (invalid configuration, non-finite loss, out of memory, ...)."""


class MetricsLog:
    """``metrics.jsonl``: one line per logged step or evaluation; cut back on resumption."""

    def __init__(self, path: Path, enabled: bool, resume_bytes: int | None = None) -> None:
        self.path, self.enabled = path, enabled
        self._lines: list[str] = []
        if not enabled:
            return
        if resume_bytes is None:
            path.write_text("")
        elif path.exists() and path.stat().st_size > resume_bytes:
            with open(path, "r+b") as fh:
                fh.truncate(resume_bytes)

    def write(self, record: dict) -> None:
        """Append one line (one small write per logged step or evaluation)."""
        if self.enabled:
            self._lines.append(json.dumps(record))
            self.flush()

    def flush(self) -> int:
        """Write buffered lines; returns the file's length in bytes."""
        if not self.enabled:
            return 0
        if self._lines:
            with open(self.path, "a") as fh:
                fh.write("\n".join(self._lines) + "\n")
            self._lines.clear()
        return self.path.stat().st_size if self.path.exists() else 0


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

    def _deterministic(self) -> contextlib.AbstractContextManager:
        """``torch.use_deterministic_algorithms`` for the run when asked (restored after)."""
        stack = contextlib.ExitStack()
        if self.config.deterministic:
            before = torch.are_deterministic_algorithms_enabled()
            cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False

            def restore() -> None:
                torch.use_deterministic_algorithms(before)
                torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn

            stack.callback(restore)
        elif self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
        return stack

    def _load_data(self) -> Iterator[Progress]:
        from dmlviewer.core.data import ImageFolderDataset, open_dataset

        c = self.config
        dataset = open_dataset(c.dataset, c.format, c.protocol)
        self.dataset = dataset
        self.train_set = dataset.select_split("train")
        self.test_set = dataset.select_split("test")
        if len(self.train_set) == 0:
            raise TrainingError(f"{c.dataset} has no training images under protocol {c.protocol!r}")
        self.fingerprint = dataset_fingerprint(self.train_set)
        labels = self.train_set.labels
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
        try:
            self.sampler = MPerClassBatches(
                labels, c.classes_per_batch, c.images_per_class, seed=c.seed, rank=self.dist.rank,
                world_size=self.dist.world_size, batches_per_epoch=c.steps_per_epoch or None,
            )
        except ValueError as exc:
            usable = len(np.unique(labels)) - len(thin)
            if usable < 2:
                raise TrainingError(
                    f"{c.dataset}: the training split has {usable} class(es) with at least two images; metric "
                    "learning needs two or more such classes (positive and negative pairs)") from None
            raise TrainingError(f"{exc}: lower --classes-per-batch (at most {usable})") from None
        self.loader = torch.utils.data.DataLoader(
            ImageFolderDataset(self.train_set, c.image_size, train=True),
            batch_sampler=self.sampler, num_workers=c.num_workers,
            pin_memory=self.device.type == "cuda", generator=torch.Generator(),
        )
        self.steps_per_epoch = len(self.sampler)
        self.total_steps = self.steps_per_epoch * c.epochs

    def _build(self) -> None:
        from dmlviewer.core.models import build_model, load_checkpoint

        c = self.config
        if c.resume:
            model, info = load_checkpoint(c.checkpoint_path, self.device)
            self.resume_info = info
            saved = self._resumable(info)
            changed = c.differences(saved)
            if changed:
                raise TrainingError(
                    "cannot resume with different options: " +
                    ", ".join(f"--{k.replace('_', '-')} {getattr(saved, k)!r} -> {getattr(c, k)!r}" for k in changed)
                )
        else:
            seed_everything(c.seed)
            model = build_model(c.model_config(), self.device)
        self.model = model.train()
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.objective = Objective(self.model, c, self.num_classes).to(self.device)
        self.optimizer = build_optimizer(self.objective, c)
        self.scheduler = build_scheduler(self.optimizer, c, self.total_steps)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)
        self.wrapped = self.objective
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            self.wrapped = DistributedDataParallel(
                self.objective, device_ids=[self.device.index] if self.device.type == "cuda" else None,
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
            raise TrainingError(
                f"cannot resume from {c.checkpoint_path}: it holds a model but no training state (it was not "
                "written by `dmlviewer train`, e.g. the demo or an imported checkpoint). --resume continues a run "
                "in its own folder; to train further from these weights, start a new run in another folder")
        try:
            saved = TrainConfig.from_dict(extra["train_config"])
        except (TypeError, ValueError) as exc:
            raise TrainingError(f"cannot resume from {c.checkpoint_path}: its training options are unreadable "
                                f"({exc})") from None
        recorded = extra.get("dataset_fingerprint")
        if recorded is not None:
            if recorded.get("sha256") != self.fingerprint["sha256"]:
                raise TrainingError(
                    f"cannot resume on another dataset: the run trained on {recorded.get('images')} images of "
                    f"{recorded.get('root')}, --dataset {c.dataset} lists {self.fingerprint['images']} other training "
                    "images (paths or labels differ); start a new run for this dataset")
        elif Path(saved.dataset).resolve() != Path(c.dataset).resolve():
            raise TrainingError(f"cannot resume on another dataset: the run trained on {saved.dataset}, not "
                                f"{c.dataset}")
        if int(info.get("epoch", 0)) >= c.epochs and not int(extra["sampler"].get("start", 0)):
            raise TrainingError(
                f"nothing to resume: the run in {c.out} already finished its {int(info.get('epoch', 0))} epoch(s); "
                f"pass a larger --epochs to train further")
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
            c.run_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(c.run_dir / CONFIG_NAME, json.dumps(c.to_dict(), indent=2) + "\n")
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
        if not all(math.isfinite(v) for v in values):
            bad = {name: v for name, v in zip(["loss", *self.term_names], values) if not math.isfinite(v)}
            kept = (f"the last good checkpoint is kept: {self.config.checkpoint_path}"
                    if self.config.checkpoint_path.exists() else "no checkpoint was written yet")
            raise TrainingError(f"non-finite loss at step {self.global_step} (epoch {self.epoch + 1}): "
                                f"{bad}; training stopped, {kept}. Try a lower --lr.")
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

    def evaluate(self) -> dict:
        """Metrics of the current model on the test split: every rank embeds its share of the
        batches, rank 0 computes the metrics (others get ``{}``)."""
        from dmlviewer.core.evaluate.evaluation import query_gallery
        from dmlviewer.core.evaluate.extract import embed_dataset
        from dmlviewer.core.evaluate.metrics import compute_metrics
        from dmlviewer.core.progress import run_to_end

        metrics: dict = {}
        if len(self.test_set):
            c = self.config
            result = run_to_end(embed_dataset(self.model, self.test_set, c.eval_batch_size, self.device,
                                              c.num_workers, self.cancel, dist=self.dist))
        if self.dist.is_main and len(self.test_set):
            rows = result["rows"]
            queries, gallery = query_gallery(self.test_set, rows)
            metrics = compute_metrics(result["embeddings"], self.test_set.labels[rows], c.ks, self.device,
                                      queries=queries, gallery=gallery)
        self.dist.barrier()
        return metrics

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
                "metrics_bytes": self.metrics_log.flush(),
                "dataset_fingerprint": self.fingerprint,
            }
            save_checkpoint(path, self.model, epoch=self.epoch, metrics=self.metrics, extra=extra)
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
        result = {"checkpoint": str(self.config.checkpoint_path), "metrics": dict(self.metrics),
                  "epochs": self.epoch, "steps": self.global_step, "cancelled": cancelled}
        return Progress("done", self.global_step, self.total_steps, data={"result": result})

    def run(self) -> Iterator[Progress]:
        """Train in the locked run folder (rank 0 of a distributed run holds the lock); temporary
        files a killed run left there are removed once the lock is held."""
        main = int(os.environ.get("RANK", "0")) == 0
        lock = FolderLock(self.config.run_dir, "a training run") if main else contextlib.nullcontext()
        try:
            with lock:
                if main:  # also the temporary names of earlier versions
                    remove_stale_temp_files(self.config.run_dir, also=r"^\.checkpoint\.pt\..+\.tmp$")
                yield from self._run()
        finally:
            self.dist.close()

    def _run(self) -> Iterator[Progress]:
        c = self.config
        try:
            yield from self.prepare()
            with self._deterministic():
                yield from self._epochs()
        except torch.cuda.OutOfMemoryError:
            raise TrainingError(
                f"CUDA out of memory with batches of {c.batch_size} images of {c.image_size} px "
                f"({c.classes_per_batch} classes x {c.images_per_class}): try a smaller "
                "--classes-per-batch, --images-per-class or --image-size"
            ) from None

    def _batches(self) -> Iterator:
        """The loader's batches until the epoch ends or cancel is set; the flag is checked before
        each batch is drawn, so a cancelled run has not consumed random numbers for a batch it
        will not train on."""
        from dmlviewer.core.data.torch_dataset import worker_errors

        iterator = iter(self.loader)
        while not (self.cancel is not None and self.cancel.cancelled):
            try:
                with worker_errors():
                    batch = next(iterator)
            except StopIteration:
                return
            yield batch

    def _epochs(self) -> Iterator[Progress]:
        c = self.config
        clock = EtaClock(self.total_steps - self.global_step)
        first = self.global_step
        if self.epoch >= c.epochs:
            yield self._result()
            return
        while self.epoch < c.epochs:
            seed = epoch_seed(c.seed, self.epoch, self.dist.rank)
            if self.step_in_epoch == 0:
                seed_everything(seed)
            self.sampler.set_epoch(self.epoch, self.step_in_epoch)
            self.loader.generator.manual_seed(seed + 1)
            self.objective.train()
            for images, labels, _ in self._batches():
                event = self.record(self.step(images, labels))
                event.eta_s = clock.eta(self.global_step - first)
                yield event
            if self.step_in_epoch < self.steps_per_epoch:  # cancelled (checked before each batch is drawn)
                path = self.save()
                yield Progress("checkpoint", self.global_step, self.total_steps, "saved on cancel",
                               data={"path": str(path)})
                yield self._result(cancelled=True)
                return
            yield self._end_epoch()
            if self.epoch == c.epochs or (c.eval_every and self.epoch % c.eval_every == 0):
                start = time.perf_counter()
                try:
                    self.metrics = self.evaluate()
                except Cancelled:
                    path = self.save()
                    yield Progress("checkpoint", self.epoch, c.epochs, "saved on cancel", data={"path": str(path)})
                    yield self._result(cancelled=True)
                    return
                if self.metrics:
                    self.metrics_log.write({"kind": "eval", "epoch": self.epoch, "step": self.global_step,
                                            "metrics": self.metrics})
                    yield Progress("eval", self.epoch, c.epochs, f"evaluated in {time.perf_counter() - start:.1f} s",
                                   data={"metrics": dict(self.metrics), "epoch": self.epoch})
            path = self.save()
            yield Progress("checkpoint", self.epoch, c.epochs, f"epoch {self.epoch} saved", data={"path": str(path)})
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
    Raises ``ValueError`` listing every problem of an invalid configuration before any work."""
    errors = validate(config)
    if errors:
        raise ValueError("; ".join(errors))
    yield from Trainer(config, cancel).run()
