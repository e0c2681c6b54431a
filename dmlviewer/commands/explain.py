"""``dmlviewer explain``: one pair's explanation written to an npz (DESIGN.md, "Explanation npz").

Keys: ``similarity``, ``point_to_point`` (h1 x w1 x h2 x w2, divided by |Eq||Er|), ``bias_query``,
``bias_reference``, ``bias_both`` (Eq. 3 of seed 000; ``bias_query`` = sum_ij Cq_ij . Br / Z, the
term that varies over the query), ``overall_query``, ``overall_reference`` (full-resolution signed
maps of ``--method``), ``overall_query_grid``, ``overall_reference_grid`` (the same maps at
grid resolution, the values colour bars are read from), ``grid_query``, ``grid_reference``.
Completeness holds in the file: ``point_to_point.sum() + bias_query + bias_reference + bias_both
== similarity``.

``--figure FILE`` (.png, .svg, .pdf; issue 39) also draws the pair view's figure from the same
headless scene as the app's Export View (``core.scene``), at ``--figure-scale K`` (1-4: only
the pixels change), with the display options by their session names (``--sign``, ``--scale``,
``--colormap``, ``--opacity``), ``--point X,Y`` (a pinned query point in image pixels: its
partial map on the reference) and ``--matches N`` (the N strongest matches drawn, 0: none);
``--figure-source`` also writes the figure's arrays (``FILE.npz``, beside it) and a short
matplotlib script (``FILE.py``) that redraws it (``core.scene.source``).

``--method grad_transfer`` needs ``--features F.h5`` holding ``grad_weights`` (seed 002): the
Grad-CAM weights of the file's labelled images; when the file has none they are computed from the
images it lists, for this run only: the user's file is changed only with ``--save-grad-weights``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from dmlviewer.commands.common import add_model_options, add_save_grad_weights
from dmlviewer.core.explain import methods as registry

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dmlviewer.commands.common import MAX_IMAGE_SIZE, add_device, int_range

    p = sub.add_parser("explain", help="explain one image pair's similarity (npz)",
                       description="Point-to-point activation maps, bias terms and overall maps of one pair.")
    add_model_options(p)
    p.add_argument("--query", required=True, help="query image file")
    p.add_argument("--reference", required=True, help="reference image file")
    p.add_argument("--method", default="decomposition", choices=registry.methods("explain"),
                   help="overall map method")
    p.add_argument("--out", required=True, help="output .npz (.npz is added to a name without it)")
    p.add_argument("--features", help="feature file with grad_weights (for --method grad_transfer); it is only "
                                      "read, unless --save-grad-weights")
    add_save_grad_weights(p)
    p.add_argument("--size", type=int_range(16, MAX_IMAGE_SIZE), metavar="S",
                   help="network input size in pixels (default: the model's image_size)")
    add_device(p)
    figure = p.add_argument_group("figure (the pair view's picture, as Export View draws it)")
    figure.add_argument("--figure", metavar="FILE", help="also draw the figure to FILE (.png, .svg or .pdf)")
    figure.add_argument("--figure-scale", type=int_range(1, 4), default=1, metavar="K",
                        help="pixels of the figure's maps and PNG, 1 to 4 times (default: 1); the text is the same")
    figure.add_argument("--point", metavar="X,Y", help="a pinned query point in image pixels: its partial map "
                                                       "is drawn on the reference (default: none)")
    figure.add_argument("--figure-source", action="store_true",
                        help="also write FILE's arrays (.npz) and a short matplotlib script (.py) that redraws it")
    figure.add_argument("--matches", type=int_range(0, 50), default=0, metavar="N",
                        help="draw the N strongest matches (default: 0, none)")
    for name, default in (("sign", "positive"), ("scale", "map"), ("colormap", "jet"), ("opacity", 0.6)):
        figure.add_argument(f"--{name}", default=default, help=f"display option {name!r} (default: {default})")
    p.set_defaults(func=run)


def figure_options(args: argparse.Namespace) -> tuple:
    """The display options and pinned point of ``--figure`` (``UsageError`` naming the option)."""
    from dmlviewer.cli import UsageError
    from dmlviewer.core.display import DisplayError, DisplayOptions, check

    display = DisplayOptions()
    values = {"method": args.method, "sign": args.sign, "scale": args.scale, "colormap": args.colormap,
              "opacity": args.opacity, "matches": args.matches > 0, "match_count": max(args.matches, 1)}
    for name, value in values.items():
        try:
            if name == "method":  # every explain method has overall maps; the pair view offers the same
                display.method = value
                continue
            setattr(display, name, check(name, value))
        except DisplayError as exc:
            raise UsageError(f"--{name}{str(exc)[len(name):]}") from None  # the core's message names the field
    point = None
    if args.point is not None:
        try:
            x, y = (float(v) for v in args.point.split(","))
        except ValueError:
            raise UsageError(f"--point: {args.point!r} is not X,Y (two numbers, image pixels)") from None
        point = (x, y)
    if args.figure is None and (args.point is not None or args.matches or args.figure_source):
        raise UsageError("--point, --matches and --figure-source draw on the figure: give --figure FILE too")
    return display, point


def npz_path(out: str) -> Path:
    """Where ``numpy.savez`` puts ``out`` (it adds ``.npz`` to a name without it)."""
    path = Path(out)
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def run(args: argparse.Namespace) -> int:
    from dmlviewer.cli import UsageError
    from dmlviewer.commands.common import check_output_file, open_command_model

    if Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a folder; give a file name (.npz)")
    out = check_output_file(str(npz_path(args.out)))
    if args.method == "grad_transfer" and not args.features:
        raise UsageError("--method grad_transfer needs --features F.h5 (the labelled images' grad weights)")
    if args.features and args.method != "grad_transfer":
        raise UsageError("--features is only used with --method grad_transfer")
    display, point = figure_options(args)
    if args.figure is not None:
        from dmlviewer.core.scene.draw import FORMATS

        if Path(args.figure).suffix.lower() not in FORMATS:
            raise UsageError(f"--figure {args.figure}: give a .png, .svg or .pdf file")
        check_output_file(args.figure, "--figure")
        if args.figure_source and Path(args.figure).with_suffix(".npz").resolve() == out.resolve():
            raise UsageError(f"--figure-source would write {out} over --out: give the figure another name")
    check_point(point, Path(args.query))  # before anything is computed or written
    from dmlviewer.core.explain import Explanation, explain_pair

    try:
        model, device = open_command_model(args, args.device)
    except FileNotFoundError as exc:
        advice = timm_weights_advice(args.checkpoint, exc)
        if advice is None:
            raise
        raise UsageError(advice) from None
    check_two_branch_options(model, args.size, args.method)
    bank = (grad_bank_from_features(model, args.features, device, save=args.save_grad_weights)
            if args.method == "grad_transfer" else None)
    pair = explain_pair(model, Path(args.query), Path(args.reference), device, size=args.size, grad_bank=bank)
    written = Explanation.from_pair(pair, args.method).save(out)  # atomic: never a half-written npz
    log.info("similarity %.4f; decomposition %s; wrote %s", pair.similarity, pair.rule_detail, written)
    if args.figure is not None:
        drawn = draw_figure(pair, display, point, Path(args.query), Path(args.reference), args.figure,
                            args.figure_scale, args.figure_source)
        log.info("wrote %s", drawn)
    return 0


def check_point(point: tuple[float, float] | None, query: Path) -> None:
    """``UsageError`` for a ``--point`` outside the query image (checked before the npz is written)."""
    from dmlviewer.cli import UsageError
    from dmlviewer.core.data.images import load_image

    if point is None:
        return
    h, w = load_image(query).shape[:2]
    if not (0 <= point[0] < w and 0 <= point[1] < h):
        raise UsageError(f"--point: ({point[0]:g}, {point[1]:g}) is outside the query image ({w} x {h} pixels)")


def draw_figure(pair, display, point, query: Path, reference: Path, figure: str, scale: int,
                source: bool = False) -> Path:
    """The pair view's figure of ``pair`` (one row) with ``display`` and the pinned query
    ``point``, written to ``figure`` (``source``: and its ``.npz`` and ``.py`` beside it)."""
    from dmlviewer.core.data.images import load_image
    from dmlviewer.core.explain.inputs import as_rgb
    from dmlviewer.core.scene import RowSource, build_scene
    from dmlviewer.core.scene.draw import write

    images = (as_rgb(load_image(query)), as_rgb(load_image(reference)))
    pinned = None if point is None else (0, point[0], point[1])
    scene = build_scene(display, images, [RowSource("A", pair)], (f"Query {query.name}", f"Reference {reference.name}"),
                        pinned)
    if source:
        from dmlviewer.core.scene.source import write_source

        write_source(scene, figure)
    return write(scene, figure, scale)


def check_two_branch_options(model, size: int | None, method: str | None = None) -> None:
    """``UsageError`` for options that have no meaning for a two-branch model: one ``--size``
    (each branch takes its own input shape) and ``grad_transfer`` (its bank holds one network's
    Grad-CAM weights)."""
    from dmlviewer.cli import UsageError
    from dmlviewer.core.models.two_branch import TwoBranchModel

    if not isinstance(model, TwoBranchModel):
        return
    shapes = ", ".join(f"{side} {h}x{w}" for side, (h, w) in model.input_shapes.items())
    if size is not None:
        raise UsageError(f"--size does not apply to a two-branch model: each branch takes its own input shape "
                         f"({shapes}); leave --size out")
    if method is not None and method not in registry.methods("two_branch"):
        raise UsageError(f"--method {method} is not available for a two-branch model (its grad-weight bank "
                         "holds one network's Grad-CAM weights; street and aerial images go through different "
                         "branches); choose another --method")


def timm_weights_advice(checkpoint: str, exc: Exception) -> str | None:
    """The one line for ``--checkpoint imagenet:timm:NAME`` without timm's weights on this machine:
    what the core says is missing (cut before its advice about a ``pretrained`` setting, which
    ``explain`` has not), then how to use a local weights file here (``import-model``)."""
    prefix = "imagenet:timm:"
    if not str(checkpoint).startswith(prefix):
        return None
    name = str(checkpoint)[len(prefix):]
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "no weights on this machine"
    for cut in (" or pass the weights file", ": pass the .pth or .safetensors file"):
        reason = reason.split(cut)[0]
    return (f"{checkpoint}: {reason}; explain takes a checkpoint: with a local timm weights file, write one with "
            f"`dmlviewer import-model FILE --arch timm:{name} --out model.pt` and pass --checkpoint model.pt")


def grad_bank_from_features(model, features_path: str, device, save: bool = False):
    """The :class:`GradWeightBank` of a feature file. When the file has no ``grad_weights`` they
    are computed from the images it lists; with ``save`` they are stored in it (the file is
    rewritten atomically), otherwise the file is left as it is and the user is told. A file that
    cannot give them is a ``UsageError`` (one line)."""
    import numpy as np

    from dmlviewer.cli import UsageError

    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.evaluate import read_features
    from dmlviewer.core.explain import GradWeightBank, add_grad_weights, compute_grad_weights
    from dmlviewer.core.explain.grad_transfer import GRAD_WEIGHTS
    from dmlviewer.core.progress import run_to_end

    features = read_features(features_path, include_raw=False, include_groups=False)
    weights = features.extra.get(GRAD_WEIGHTS)
    if weights is None:
        root = features.attrs.get("dataset_root")
        if not root:
            raise UsageError(f"{features_path} has no grad_weights and no dataset_root to compute them from (write "
                             "the file with evaluate, which records its dataset, or store grad weights in it)")
        dataset = open_dataset(root, features.attrs.get("dataset_format") or None)
        index = {p: i for i, p in enumerate(dataset.paths)}
        missing = [p for p in features.paths if p not in index]
        if missing:
            raise UsageError(f"{features_path}: {len(missing)} stored image(s) are not in {root}, e.g. {missing[0]}")
        rows = dataset.subset([index[p] for p in features.paths])
        log.info("computing grad weights of %d images in %s", len(rows), features_path)
        result = run_to_end(compute_grad_weights(model, rows, device=device))
        weights = result["weights"]
        if save:
            add_grad_weights(features_path, weights)
            log.info("stored the grad weights in %s", features_path)
        else:
            log.warning("%s has no grad_weights: computed them for this run only (the file is not changed; "
                        "--save-grad-weights stores them there)", features_path)
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim != 2 or len(weights) != len(features):
        raise UsageError(f"{features_path}: grad_weights of shape {weights.shape} for {len(features)} images")
    return GradWeightBank(features.embeddings, weights)
