"""The run folder and resumption, shared by both trainers (one-branch :mod:`.loop`, two-branch
:mod:`.cross_view`), which keep only what they train differently (loss, sampler, metrics).

A run folder holds ``config.json`` (the run's options), ``checkpoint.pt`` (the last state,
written atomically after every epoch and on cancel; what ``resume`` continues) and
``metrics.jsonl`` (one JSON line per record; each trainer's lines are its own, see
docs/contracts.md). While a run trains in it the folder is locked (a second run is refused with
a message naming the process holding it); temporary files a killed run left there are removed
when the next run holds the lock; a run that fails before writing anything leaves no folder
behind. Resumption refuses other options, other training data and a run already finished, in
the same words for both trainers.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dmlviewer.core.progress import Progress

from .config import CHECKPOINT_NAME, CONFIG_NAME, METRICS_NAME
from .errors import TrainingError, TrainingFieldsError, literal

__all__ = ["CHECKPOINT_NAME", "CONFIG_NAME", "METRICS_NAME", "MetricsLog", "check_options", "check_same_data",
           "check_unfinished", "epoch_saved", "locked_run_folder", "non_finite_loss", "saved_on_cancel", "write_config"]


@contextlib.contextmanager
def locked_run_folder(folder: str | Path, main: bool = True) -> Iterator[Path]:
    """Hold ``folder``'s lock while a run trains in it (only ``main``, rank 0 of a distributed
    run, locks and cleans); stale temporary files are removed once the lock is held (also the
    ``.checkpoint.pt.*.tmp`` names of earlier versions). A folder this call created is removed
    again when the run fails while it is still empty (only the lock was written)."""
    from dmlviewer.core.files import FolderLock, remove_stale_temp_files

    folder = Path(folder)
    if not main:
        yield folder
        return
    created = not folder.exists()
    try:
        with FolderLock(folder, "a training run"):
            remove_stale_temp_files(folder, also=r"^\.checkpoint\.pt\..+\.tmp$")
            yield folder
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                if [entry.name for entry in folder.iterdir()] == [FolderLock.NAME]:
                    (folder / FolderLock.NAME).unlink()
                    folder.rmdir()
        raise


def write_config(folder: Path, options: dict) -> None:
    """``config.json``: the run's options (atomic)."""
    from dmlviewer.core.files import write_text_atomic

    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / CONFIG_NAME, json.dumps(options, indent=2) + "\n")


class MetricsLog:
    """``metrics.jsonl``: one line per record, appended; emptied for a new run, cut back to the
    checkpoint's length (``resume_bytes``) or rewritten from its lines (:meth:`restore`) on
    resumption. ``enabled`` false (ranks other than 0): nothing is written."""

    def __init__(self, path: Path, enabled: bool = True, resume_bytes: int | None = None) -> None:
        self.path, self.enabled = path, enabled
        self._lines: list[str] = []
        if not enabled:
            return
        if resume_bytes is None:
            path.write_text("")
        elif path.exists() and path.stat().st_size > resume_bytes:
            with open(path, "r+b") as fh:
                fh.truncate(resume_bytes)

    def restore(self, lines: Iterable[str]) -> None:
        """The file holds exactly ``lines`` (a checkpoint's record of them; atomic)."""
        from dmlviewer.core.files import write_text_atomic

        if self.enabled:
            write_text_atomic(self.path, "".join(line + "\n" for line in lines))

    def write(self, record: dict) -> str:
        """Append one line (one small write per record); returns the line."""
        line = json.dumps(record)
        if self.enabled:
            self._lines.append(line)
            self.flush()
        return line

    def flush(self) -> int:
        """Write buffered lines; returns the file's length in bytes."""
        if not self.enabled:
            return 0
        if self._lines:
            with open(self.path, "a") as fh:
                fh.write("\n".join(self._lines) + "\n")
            self._lines.clear()
        return self.path.stat().st_size if self.path.exists() else 0


def epoch_saved(path: Path, epoch: int, epochs: int) -> Progress:
    """The ``checkpoint`` event after epoch ``epoch``'s state was saved to ``path``."""
    return Progress("checkpoint", epoch, epochs, f"epoch {epoch} saved", data={"path": str(path)})


def saved_on_cancel(path: Path, current: int, total: int) -> Progress:
    """The ``checkpoint`` event of a cancelled run's state saved to ``path`` (what ``resume`` continues)."""
    return Progress("checkpoint", current, total, "saved on cancel", data={"path": str(path)})


# ---------------------------------------------------------------------- resumption


def check_options(changed: Sequence[tuple[str, Any, Any]]) -> None:
    """Refuse to resume with options (``(identifier, saved, given)``) other than the run's."""
    if changed:
        raise TrainingFieldsError("cannot resume with different options: " + ", ".join(
            f"{{{name}}} {literal(repr(saved))} -> {literal(repr(given))}" for name, saved, given in changed))


def check_same_data(recorded: dict | None, current: dict, dataset: str, noun: str, other: str, why: str = "") -> None:
    """Refuse to resume on other training data (``other``: "another dataset", "other pairs"):
    ``recorded`` (the checkpoint's fingerprint) and ``current`` (this run's) are ``{"sha256",
    noun: count, "root"}``."""
    recorded = recorded or {}
    if recorded.get("sha256") != current["sha256"]:
        raise TrainingFieldsError(
            f"cannot resume on {literal(other)}: the run trained on {recorded.get(noun)} {noun} of "
            f"{literal(recorded.get('root'))}, {{dataset}} {literal(dataset)} lists {current[noun]} other training "
            f"{noun}{literal(why)}; start a new run for this dataset")


def check_unfinished(epoch: int, within: bool, epochs: int, folder: str | Path) -> None:
    """Refuse to resume a run that already finished its ``epochs`` (``within``: it stopped
    inside an epoch, which is always left to finish)."""
    if epoch >= epochs and not within:
        raise TrainingFieldsError(f"nothing to resume: the run in {literal(folder)} already finished its {epoch} "
                                  "epoch(s); pass a larger {epochs} to train further")


def non_finite_loss(where: str, values: dict[str, float], checkpoint: Path) -> TrainingError | None:
    """The error that stops a run whose loss (``values``: the loss and its terms) is not finite
    at ``where``; None when every value is finite. The last good checkpoint stays."""
    bad = {name: v for name, v in values.items() if not math.isfinite(v)}
    if not bad:
        return None
    kept = f"the last good checkpoint is kept: {checkpoint}" if checkpoint.exists() else "no checkpoint was written yet"
    return TrainingFieldsError(f"non-finite loss at {literal(where)}: {literal(bad)}; training stopped, "
                               f"{literal(kept)}. Try a lower {{lr}}.")
