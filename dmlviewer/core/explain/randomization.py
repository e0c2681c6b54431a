"""Cascading model randomization (Adebayo et al. 2018, "Sanity checks for saliency maps",
Sec. 3.1), applied to similarity maps (issue 24).

A model's layers are re-initialized from the top down, one *unit* at a time, cumulatively: the
head first, then the backbone from its last layer to its first. An explanation method that
explains the model must lose agreement with its maps of the trained model as more layers are
randomized; a method whose maps stay the same explains the input (edges, the image's layout),
not what the model learned.

Units (:func:`cascade_units`): a model with a ``head`` and a ``backbone`` (every built-in and
imported model) has its whole head as the first unit (pooling, projections, gates: what maps
the feature map to the embedding), then the backbone's layers from the last to the first. The
layers are the modules that hold parameters of their own, in registration order (forward
order for the built-in backbones; for a user's module, the order its ``__init__`` registered
them), a normalization layer joined to the layer before it (a conv and its BatchNorm are one
unit: for ``small_cnn`` a unit is one stage). A model without ``head``/``backbone`` (a live
module) is cut into layers the same way as a whole. ``max_steps`` merges consecutive units
into at most that many steps (deep backbones have dozens of convolutions).

Re-initialization (:func:`reinitialize`): a module's own ``reset_parameters`` where it has one
(Conv, Linear, BatchNorm, LayerNorm ...: PyTorch's default initialization). **BatchNorm
running statistics are reset too** (mean 0, variance 1, as ``reset_parameters`` does): they
are statistics of the trained weights' activations; kept, they would shift and scale the
random layer's outputs by numbers that no longer mean anything. Parameters of modules without
``reset_parameters`` (e.g. a ViT's position embedding, GeM's exponent): tensors of two or more
dimensions are drawn as ``nn.Linear`` draws its weight (Kaiming uniform, ``a = sqrt(5)``),
one-dimensional ones and scalars are kept (a bias or GeM's ``p`` has no meaningful random
value); a unit that would change nothing is not a step.

Every depth is a fresh copy of the model (``copy.deepcopy``), with unit ``k`` drawn from the
seed ``seed + k``: depth ``d`` holds exactly the random weights of depth ``d - 1`` plus one
more unit, and the trained model is never touched.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from dmlviewer.core.explain import methods as registry

log = logging.getLogger(__name__)

#: module types joined to the unit registered before them
NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


@dataclass(frozen=True)
class CascadeStep:
    """Depth ``depth`` of the cascade: the modules randomized at this step (``modules``) and
    every module randomized up to it (``randomized``), by their ``named_modules`` names."""

    depth: int
    label: str
    modules: tuple[str, ...]
    randomized: tuple[str, ...]


def _own_tensors(module: nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))


def _changes_something(module: nn.Module) -> bool:
    return hasattr(module, "reset_parameters") or any(p.dim() >= 2 for p in module.parameters(recurse=False))


def _layers(module: nn.Module, prefix: str = "") -> list[list[str]]:
    """``module``'s layers in registration order (module docstring), names with ``prefix``."""
    units: list[list[str]] = []
    for name, sub in module.named_modules(prefix=prefix.rstrip(".")):
        if not _own_tensors(sub) or not _changes_something(sub):
            continue
        if isinstance(sub, NORMS) and units:
            units[-1].append(name)
        else:
            units.append([name])
    return units


def cascade_units(model: nn.Module) -> list[tuple[str, ...]]:
    """The cascade's units, top first (module docstring): each a tuple of module names. A
    two-branch model's branches are randomized side by side: unit ``k`` is unit ``k`` of the
    query branch together with unit ``k`` of the reference branch (both heads first)."""
    from dmlviewer.core.models.two_branch import BRANCHES, TwoBranchModel

    if isinstance(model, TwoBranchModel):
        per_branch = [[tuple(f"{side}.{n}" for n in unit) for unit in cascade_units(model.branch(side))]
                      for side in BRANCHES]
        depth = max(len(units) for units in per_branch)
        return [tuple(n for units in per_branch if k < len(units) for n in units[k]) for k in range(depth)]
    head, backbone = getattr(model, "head", None), getattr(model, "backbone", None)
    if isinstance(head, nn.Module) and isinstance(backbone, nn.Module):
        head_unit = [n for unit in _layers(head, "head") for n in unit]
        units = _layers(backbone, "backbone")[::-1]
        return [tuple(u) for u in ([head_unit] if head_unit else []) + units]
    return [tuple(u) for u in reversed(_layers(model))]


def _label(names: Sequence[str], holders: set[str]) -> str:
    """A unit's name: the module that holds exactly the unit's layers (the longest common dotted
    prefix of ``names`` when no other module with tensors of its own, of ``holders``, lies
    under it: ``stages.3`` for a stage's conv and BatchNorm), else its first layer's name."""
    sides = {n.split(".", 1)[0] for n in names}
    if sides == {"query", "reference"}:  # a two-branch unit: named by the query branch's layers
        strip = len("query.")
        inner = _label([n[strip:] for n in names if n.startswith("query.")],
                       {h[strip:] for h in holders if h.startswith("query.")})
        return f"{inner} (both branches)"
    parts = [n.split(".") for n in names]
    common = []
    for pieces in zip(*parts):
        if len(set(pieces)) != 1:
            break
        common.append(pieces[0])
    prefix = ".".join(common)
    if len(names) == 1:
        return names[0]
    inside = {h for h in holders if prefix == "" or h == prefix or h.startswith(prefix + ".")}
    return prefix if prefix and inside <= set(names) else names[0]


def readable_name(label: str) -> str:
    """A randomized depth's label (a module name, ``"a .. b"`` for a merged step, with
    ``" (both branches)"`` for a two-branch model) as people name layers, 1-based like the
    README's table: ``backbone.stages.3`` -> ``stage 4``, ``backbone.layer4`` -> ``layer 4``,
    ``head.projection`` -> ``head``, ``a .. b`` -> ``stage 4 - stage 3``. The plot's axis, the
    command line's text and its JSON (``name``, beside ``label``) use it."""
    both = label.endswith(" (both branches)")
    core = label.removesuffix(" (both branches)")

    def one(name: str) -> str:
        parts = [p for p in name.strip().split(".") if p]
        while parts and parts[0] in ("backbone", "net"):  # the wrappers every layer of a backbone is under
            parts = parts[1:]
        if not parts or parts[0] == "head":
            return "head"
        words: list[str] = []
        for k, part in enumerate(parts):
            if part.isdigit() and words and not words[-1][-1].isdigit():
                noun = words.pop()
                words.append(f"{noun[:-1] if noun.endswith('s') and len(noun) > 3 else noun} {int(part) + 1}")
            elif part.isdigit():
                words.append(f"#{int(part) + 1}")
            else:
                head, tail = part.rstrip("0123456789"), part[len(part.rstrip("0123456789")):]
                words.append(f"{head} {tail}" if head and tail else part)  # layer4 -> layer 4 (1-based already)
        return " ".join(words)

    pieces = [one(p) for p in core.split(" .. ")]
    text = " - ".join(dict.fromkeys(pieces))
    return f"{text} (both branches)" if both else text


def cascade_steps(model: nn.Module, max_steps: int | None = None) -> list[CascadeStep]:
    """The cascade's steps (depth 1 first), units merged into at most ``max_steps`` steps (the
    head stays a step of its own); a merged step's label names its first and last unit."""
    units = cascade_units(model)
    chunks = [[u] for u in units]
    if max_steps is not None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be positive, got {max_steps}")
        if len(units) > max_steps:
            # the head stays a step of its own (the cascade's first); the rest is split evenly
            top = units[0][0].removeprefix("query.").removeprefix("reference.") if units else ""
            first = 1 if max_steps > 1 and top.startswith("head") else 0  # a two-branch model's heads, too
            rest = np.array_split(np.arange(first, len(units)), max_steps - first)
            chunks = [[units[0]]] * first + [[units[k] for k in g] for g in rest if len(g)]
    holders = {n for unit in units for n in unit}
    steps, done = [], []
    for depth, chunk in enumerate(chunks, start=1):
        names = tuple(n for unit in chunk for n in unit)
        done.extend(names)
        first, last = _label(chunk[0], holders), _label(chunk[-1], holders)
        label = first if len(chunk) == 1 else f"{first} .. {last}"
        steps.append(CascadeStep(depth, label, names, tuple(done)))
    return steps


def reinitialize(module: nn.Module) -> None:
    """Re-initialize ``module``'s own parameters (and BatchNorm statistics) in place (module
    docstring), from the global torch generator."""
    with torch.no_grad():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
            return
        for p in module.parameters(recurse=False):
            if p.dim() >= 2:
                nn.init.kaiming_uniform_(p, a=math.sqrt(5))


def randomized_copy(model: nn.Module, step: CascadeStep, seed: int = 0) -> nn.Module:
    """A copy of ``model`` with every module of ``step.randomized`` re-initialized (module
    docstring: each unit from its own seed, so depths are nested), in ``model``'s mode."""
    twin = copy.deepcopy(model)
    modules = dict(twin.named_modules())
    units = cascade_units(model)
    unit_of = {name: k for k, unit in enumerate(units) for name in unit}
    cuda = sorted({p.device.index or 0 for p in twin.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=cuda):
        for name in step.randomized:
            torch.manual_seed(seed + unit_of[name])
            reinitialize(modules[name])
    return twin


def randomize_cascade(model: nn.Module, max_steps: int | None = None, seed: int = 0
                      ) -> Iterator[tuple[CascadeStep, nn.Module]]:
    """``(step, randomized copy)`` for depths 1, 2, ...: the head re-initialized first, then the
    backbone's layers from the last to the first (module docstring). Copies are made one at a
    time, when asked for."""
    for step in cascade_steps(model, max_steps):
        log.debug("cascade depth %d: re-initializing %s", step.depth, ", ".join(step.modules))
        yield step, randomized_copy(model, step, seed)


OCCLUSION = registry.method("occlusion").key


def pair_maps(model: nn.Module, image_q, image_r, methods: Sequence[str], device="cpu", baseline: str = "blur",
              cancel=None) -> Iterator:
    """Generator; result: ``(similarity, {method: {side: grid map}})`` of one pair for
    ``methods`` (the registry's ``sanity_check`` maps; occlusion of both sides with ``baseline``, uncached)."""
    from dmlviewer.core.explain.occlusion import occlusion
    from dmlviewer.core.explain.pair import SIDES, explain_pair
    from dmlviewer.core.explain.perturb import relay

    expl = explain_pair(model, image_q, image_r, device)
    maps = {m: {s: np.asarray(expl.overall_grid(m, s)) for s in SIDES} for m in methods if m != OCCLUSION}
    if OCCLUSION in methods:
        occ = yield from relay(occlusion(model, image_q, image_r, baseline, SIDES, device, use_cache=False,
                                         cancel=cancel), 0, 1)
        maps[OCCLUSION] = {s: occ.overall_grid(s) for s in SIDES}
    return float(expl.similarity), {m: maps[m] for m in methods}


def randomization_check(
    model: nn.Module,
    dataset,
    pairs: int | Sequence[tuple[int, int]] = 10,
    methods: Sequence[str] | None = None,
    split: str | None = "test",
    device: str | torch.device = "cpu",
    max_steps: int | None = None,
    baseline: str = "blur",
    seed: int = 0,
    cancel=None,
) -> Iterator:
    """The cascading randomization check (module docstring) on ``pairs`` (a number of seeded
    same-class pairs of ``split``, ``"both"``: half from each split; or explicit ``(query, reference)`` dataset indices): for every
    depth and method, the agreement (:func:`.compare.overall_agreement`: Spearman, IoU, peak
    distance, the mean over both images of a pair) of the randomized copy's overall maps with the
    trained model's. Yields progress; the ``done`` event's result: ``{"methods", "num_pairs",
    "pairs": [{query, reference, query_path, reference_path, similarity, randomized_similarity}],
    "depths": [{depth, label, name (:func:`readable_name`), modules, similarity, methods: {method: {overall_map_spearman,
    iou, peak_distance}: {mean, per_pair}}}]}``."""
    from dmlviewer.core.data.images import load_or_skip
    from dmlviewer.core.explain.compare import overall_agreement, sample_pairs
    from dmlviewer.core.explain.agreement import IOU_FRACTION, nanmean
    from dmlviewer.core.progress import EtaClock, Progress

    known = registry.methods("sanity_check")  # every overall map that needs nothing but the model
    methods = list(dict.fromkeys(known if methods is None else methods))
    bad = [m for m in methods if m not in known]
    if bad or not methods:
        raise ValueError(f"unknown method(s) {', '.join(bad) or '(none)'}; choose from {', '.join(known)}")
    if isinstance(pairs, int):
        chosen = [(q, r) for q, r, _ in sample_pairs(dataset, split, pairs, seed)]
    else:
        chosen = [tuple(p) for p in pairs]
    if not chosen:
        raise ValueError(f"split {split!r} has no two images of the same class")
    steps = cascade_steps(model, max_steps)
    if not steps:
        raise ValueError("the model has no layer to re-initialize")
    skipped: dict = {}
    images = []
    for q, r in chosen:
        image_q, image_r = load_or_skip(dataset, q, skipped), load_or_skip(dataset, r, skipped)
        if image_q is not None and image_r is not None:
            images.append((int(q), int(r), image_q, image_r))
    if not images:
        raise ValueError(f"none of the {len(chosen)} pairs could be read; see the warnings above")
    total = len(images) * (len(steps) + 1)
    clock = EtaClock(total)
    done = 0
    shapes = [{"query": iq.shape[:2], "reference": ir.shape[:2]} for _, _, iq, ir in images]

    def explain_all(net: nn.Module, label: str):
        nonlocal done
        out = []
        for _, _, image_q, image_r in images:
            if cancel is not None:
                cancel.raise_if_cancelled()
            job = pair_maps(net, image_q, image_r, methods, device, baseline, cancel)
            while True:  # occlusion's own steps are not relayed: one step per pair
                try:
                    next(job)
                except StopIteration as stop:
                    out.append(stop.value)
                    break
            done += 1
            yield Progress("step", done, total, label, eta_s=clock.eta(done))
        return out

    log.info("randomization check: %d pairs, %d depths, methods %s", len(images), len(steps), ", ".join(methods))
    trained = yield from explain_all(model, "trained model")
    depths = []
    for step, twin in randomize_cascade(model, max_steps, seed):
        twin.eval()
        randomized = yield from explain_all(twin, f"randomized to depth {step.depth} ({step.label})")
        del twin
        per_method = {}
        for m in methods:
            rows = [overall_agreement(t[1][m], x[1][m], shape, IOU_FRACTION)
                    for t, x, shape in zip(trained, randomized, shapes)]
            per_method[m] = {key: {"mean": nanmean(row[key] for row in rows), "per_pair": [row[key] for row in rows]}
                             for key in ("overall_map_spearman", "iou", "peak_distance")}
        depths.append({"depth": step.depth, "label": step.label, "name": readable_name(step.label),
                       "modules": list(step.modules),
                       "similarity": nanmean(x[0] for x in randomized), "methods": per_method,
                       "_similarities": [x[0] for x in randomized]})
    pair_rows = []
    for k, (q, r, _, _) in enumerate(images):
        pair_rows.append({"query": q, "reference": r, "query_path": dataset.paths[q], "reference_path": dataset.paths[r],
                          "similarity": trained[k][0],
                          "randomized_similarity": [d["_similarities"][k] for d in depths]})
    for d in depths:
        del d["_similarities"]
    result = {"methods": methods, "num_pairs": len(images), "pairs": pair_rows, "depths": depths}
    yield Progress("done", total, total, data={"result": result})
