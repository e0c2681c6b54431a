"""Model selection: the validation split of the training data, the progress clock of a run,
and the record of the best evaluation so far.

The validation split holds out part of the *training* data (never the test classes), so that
the checkpoint kept as ``best.pt`` and early stopping are decided without looking at the
unseen classes the run is judged on. With enough training classes whole classes are held out
(the validation classes are then unseen in training, like the test classes); with few
classes (fewer than two would be held out, or fewer than two would remain) a share of each
class's images is held out instead, and the run says so.

A pretrained backbone (``whole_classes``) is never selected on held-out *images*: they belong
to classes the run trains on, so their score rises as the seen classes are fitted while
retrieval of unseen classes falls (measured on digits, 5 training classes: validation MAP@R
0.45 -> 0.57 over three epochs while test Recall@1 went 0.850 -> 0.820). Two held-out classes
were not enough either (digits: validation MAP@R rising, test Recall@1 below epoch 0 in 3 of 4
seeds; crops of photos with 8 training classes: below in 2 of 4), four were (README,
"Training quality"). So it holds out at least ``PRETRAINED_VAL_CLASSES`` whole classes (more
than ``fraction`` when needed) while as many remain to train on; with fewer usable classes no
split can judge unseen classes, and the run keeps its starting model (mode ``start``:
``best.pt`` is the epoch-0 model, ``checkpoint.pt`` the last state) and says so.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

#: held-out classes (and classes left to train on) a pretrained backbone's validation needs
PRETRAINED_VAL_CLASSES = 4


@dataclass
class ValidationSplit:
    """Positions (into the training split) that train and that validate, and how they were chosen."""

    train: np.ndarray
    val: np.ndarray
    mode: str  # "none" | "classes" | "images" | "start"
    val_classes: int = 0

    def describe(self, fraction: float) -> str:
        if self.mode == "none":
            return "no validation split: the last epoch's model is kept"
        if self.mode == "start":
            n = PRETRAINED_VAL_CLASSES
            return (f"validation: a pretrained backbone needs {n} held-out training classes (and {n} to train on) "
                    f"to judge classes unseen in training, and this training set has fewer than {2 * n}; the "
                    "starting (epoch 0) model is kept as best.pt, the last state in checkpoint.pt")
        if self.mode == "classes":
            return (f"validation: {self.val_classes} of the training classes ({len(self.val)} images, "
                    f"{fraction:.0%}) held out to select the checkpoint; {len(self.train)} images train")
        return (f"validation: too few training classes to hold whole classes out, so {len(self.val)} "
                f"images ({fraction:.0%} of each class) are held out to select the checkpoint; "
                f"{len(self.train)} images train")


def validation_split(labels: np.ndarray, fraction: float, seed: int,
                     whole_classes: bool = False) -> ValidationSplit:
    """Split positions ``0..len(labels)-1`` of the training data (see the module docstring).

    Classes are drawn with a generator seeded by ``seed``; by images, each class with at least
    four images gives ``max(2, round(fraction * n))`` of them (at least two stay to train).
    ``whole_classes`` (pretrained backbones): at least ``PRETRAINED_VAL_CLASSES`` classes are held
    out and as many train, never images; mode ``start`` when that is impossible."""
    labels = np.asarray(labels)
    everything = np.arange(len(labels))
    if fraction <= 0:
        return ValidationSplit(everything, everything[:0], "none")
    rng = np.random.default_rng(seed + 7_777)
    classes, counts = np.unique(labels, return_counts=True)
    usable = classes[counts >= 2]
    n_val = int(round(fraction * len(usable)))
    if whole_classes:
        n_val = min(max(PRETRAINED_VAL_CLASSES, n_val), len(usable) - PRETRAINED_VAL_CLASSES)
        if n_val < PRETRAINED_VAL_CLASSES:
            return ValidationSplit(everything, everything[:0], "start")
    if n_val >= 2 and len(usable) - n_val >= 2:
        held = set(rng.choice(usable, size=n_val, replace=False).tolist())
        is_val = np.isin(labels, list(held))
        return ValidationSplit(everything[~is_val], everything[is_val], "classes", n_val)
    is_val = np.zeros(len(labels), dtype=bool)
    for c, n in zip(classes, counts):
        if n < 4:
            continue
        k = min(max(2, int(round(fraction * n))), n - 2)
        members = np.flatnonzero(labels == c)
        is_val[rng.choice(members, size=k, replace=False)] = True
    if not is_val.any():
        return ValidationSplit(everything, everything[:0], "none")
    return ValidationSplit(everything[~is_val], everything[is_val], "images",
                           len(np.unique(labels[is_val])))


class RunClock:
    """Time left in a run made of training steps and evaluation passes, each at its own
    measured rate, so that the ETA and the overall fraction account for evaluations too (a
    progress bar must not say 100 % while the final evaluation still runs)."""

    def __init__(self, steps_left: int, eval_images_left: int) -> None:
        self.steps_left = steps_left
        self.eval_left = eval_images_left
        self.start = time.perf_counter()
        self.step_s: list[float] = [0.0, 0]  # seconds, steps measured
        self.eval_s: list[float] = [0.0, 0]  # seconds, images measured

    def steps_done(self, n: int, seconds: float) -> None:
        self.steps_left = max(0, self.steps_left - n)
        self.step_s[0] += seconds
        self.step_s[1] += n

    def images_done(self, n: int, seconds: float) -> None:
        self.eval_left = max(0, self.eval_left - n)
        self.eval_s[0] += seconds
        self.eval_s[1] += n

    def eta(self) -> float | None:
        """Seconds left, or None before both kinds of work have a measured rate (when needed)."""
        left = 0.0
        for remaining, (seconds, done) in ((self.steps_left, self.step_s), (self.eval_left, self.eval_s)):
            if remaining == 0:
                continue
            if done == 0:
                return None
            left += remaining * seconds / done
        return left

    def fraction(self) -> float:
        """Share of the run done, by time (elapsed / (elapsed + left)); below 1 until the end."""
        eta = self.eta()
        elapsed = time.perf_counter() - self.start
        if eta is None:
            return 0.0
        return elapsed / (elapsed + eta) if elapsed + eta > 0 else 1.0


@dataclass
class Selection:
    """The best validation score so far and what belongs to it (saved in checkpoints)."""

    metric: str
    best_score: float = float("-inf")
    best_epoch: int = -1
    best_test: dict | None = None
    best_val: dict | None = None
    since_best: int = 0  # evaluations since the best one

    def offer(self, epoch: int, val: dict, test: dict, score: float | None = None) -> bool:
        """Record an evaluation; True when it is the new best (strictly better). ``score``
        replaces the validation metric (the starting model kept without a validation split)."""
        score = float(val.get(self.metric, float("-inf")) if score is None else score)
        if score > self.best_score:
            self.best_score, self.best_epoch = score, epoch
            self.best_test, self.best_val = dict(test), dict(val)
            self.since_best = 0
            return True
        self.since_best += 1
        return False

    def state_dict(self) -> dict:
        return {"metric": self.metric, "best_score": self.best_score, "best_epoch": self.best_epoch,
                "best_test": self.best_test or {}, "best_val": self.best_val or {}, "since_best": self.since_best}

    def load_state_dict(self, state: dict) -> None:
        self.metric = str(state["metric"])
        self.best_score, self.best_epoch = float(state["best_score"]), int(state["best_epoch"])
        self.best_test = dict(state["best_test"]) or None
        self.best_val = dict(state["best_val"]) or None
        self.since_best = int(state["since_best"])
