"""One way in for every model (issue 11): a checkpoint, a pretrained backbone, or a live module.

:func:`open_model` turns any of these into a model with the one interface the rest of dmlviewer
uses (``forward -> ModelOutput``, ``linearize``, ``head_function``, ``preprocess``,
``group_slices``, ``dim``, ``config``) plus an ``info`` dict saying where it came from:

- a dmlviewer checkpoint file (``load_checkpoint``; made by training or by ``import-model``);
- ``imagenet:BACKBONE``: a backbone with its ImageNet weights and no training, the embedding
  being the GAP of its last map (no projection), so real photographs can be looked at before
  any training;
- an ``nn.Module`` from Python: a timm vision transformer (:func:`vit_from_module`) or any
  other module (:class:`.module_model.ModuleModel`), with ``feature_layer``, ``output`` and the
  preprocessing (``transform``) the user gives.

``info["sha256"]`` identifies the model's weights (the file's hash for a checkpoint, a hash of
the state dict otherwise), so that feature files can be matched to the model that made them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import CheckpointError, ModelError, ModelFieldError
from .model import EmbeddingModel
from .projection import Projection
from .vit import TokenHead, ViTBackbone

log = logging.getLogger(__name__)

PRETRAINED_PREFIX = "imagenet:"


def model_fingerprint(model: nn.Module) -> str:
    """SHA-256 of the config and every tensor of the state dict (order of keys)."""
    digest = hashlib.sha256(json.dumps(getattr(model, "config", {}), sort_keys=True, default=str).encode())
    for key, value in model.state_dict().items():
        digest.update(key.encode())
        tensor = value.detach().cpu().contiguous()
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def pretrained_config(backbone: str, image_size: int | None = None) -> dict:
    """The config of an untrained embedding model on an ImageNet backbone: GAP of the last map,
    no projection (``dim`` 0), the backbone's usual input size."""
    from .model import check_config

    size = image_size or (299 if backbone == "inception_v3" else 224)
    return check_config({"backbone": backbone, "pretrained": "imagenet", "pooling": "gap", "dim": 0,
                         "image_size": size})


def as_preprocess(transform: Any = None, size: int | None = None, default_size: int = 224):
    """A :class:`~dmlviewer.core.data.transforms.Preprocess` from what a user passes:
    ``None`` (ImageNet statistics at ``size`` or ``default_size``), a ``Preprocess``, a dict with
    ``size``/``mean``/``std``, or a torchvision transform (``Resize``, ``CenterCrop`` and
    ``Normalize`` are read from it; dmlviewer stretches the whole image instead of cropping, so
    maps cover all of it)."""
    from dmlviewer.core.data.transforms import IMAGENET_MEAN, IMAGENET_STD, Preprocess

    if isinstance(transform, Preprocess):
        return transform.with_size(size) if size else transform
    if transform is None:
        return Preprocess(int(size or default_size))
    if isinstance(transform, dict):
        unknown = set(transform) - {"size", "mean", "std"}
        if unknown:
            raise ModelError(f"transform dict keys are size, mean and std; got {', '.join(sorted(unknown))}")
        return Preprocess(int(size or transform.get("size", default_size)), tuple(transform.get("mean", IMAGENET_MEAN)),
                          tuple(transform.get("std", IMAGENET_STD)))
    steps = getattr(transform, "transforms", [transform])
    found: dict[str, Any] = {}
    for step in steps:
        kind = type(step).__name__
        if kind in ("Resize", "CenterCrop", "RandomResizedCrop"):
            value = step.size if isinstance(step.size, int) else max(step.size)
            if kind == "CenterCrop" or "size" not in found:  # the crop is the size the model sees
                found["size"] = int(value)
            if kind == "CenterCrop":
                log.info("the transform crops the centre; dmlviewer resizes the whole image to %d px instead", value)
        elif kind == "Normalize":
            found["mean"], found["std"] = tuple(float(v) for v in step.mean), tuple(float(v) for v in step.std)
    if not found:
        raise ModelError(f"cannot read a size or normalization from the transform {type(transform).__name__}: "
                         "pass transform=dict(size=..., mean=..., std=...)")
    return Preprocess(int(size or found.get("size", default_size)), found.get("mean", IMAGENET_MEAN),
                      found.get("std", IMAGENET_STD))


def open_model(source: Any, device: str | torch.device = "cpu", *, feature_layer: str | None = None,
               output: Any = None, transform: Any = None, size: int | None = None) -> tuple[nn.Module, dict]:
    """``(model in eval mode on device, info)`` from a checkpoint path, ``imagenet:BACKBONE``, a
    dmlviewer model or any ``nn.Module`` (see the module docstring; a
    :class:`~.source.ModelSource` opens itself: ``source.open(device)``). ``info``: ``source``
    (``checkpoint``, ``pretrained``, ``python`` or ``code``), ``sha256``, ``path``, ``epoch``,
    ``metrics``, ``rule`` (the decomposition rule, one line), ``notes`` (one line for each way
    dmlviewer runs the model differently from how it was given: training mode, precision; logged
    at warning level)."""
    from .checkpoint import load_checkpoint
    from .device import resolve_device
    from .model import build_model
    from .module_model import ModuleModel
    from .two_branch import TwoBranchModel
    from .vit import is_vit

    dev = resolve_device(device)
    notes: list[str] = []
    if isinstance(source, (str, os.PathLike)):
        text = str(source)
        if text.startswith(PRETRAINED_PREFIX):
            try:
                config = pretrained_config(text[len(PRETRAINED_PREFIX):], size)
            except ValueError as exc:  # an unknown backbone name: bad input, one line
                raise ModelError(f"{text}: {exc}") from None
            model = build_model(config, dev).eval()
            info = {"source": "pretrained", "path": text, "epoch": 0, "metrics": {}, "config": config}
        else:
            model, info = load_checkpoint(Path(text).expanduser(), dev)
            info = {**info, "source": "checkpoint"}
            if size and "image_size" in model.config:  # a two-branch checkpoint has one per branch
                model.config["image_size"] = int(size)
    elif isinstance(source, tuple):  # (query, reference): a two-branch model (issue 25)
        from .two_branch import open_two_branch

        model, info = open_two_branch(source, dev, open_model, feature_layer=feature_layer, output=output,
                                      transform=transform, size=size)
    elif isinstance(source, (EmbeddingModel, ModuleModel, TwoBranchModel)):
        model = source.to(dev).eval()
        info = {"source": "python", "path": None, "epoch": None, "metrics": {}, "config": model.config}
    elif isinstance(source, nn.Module):
        source = _prepared_module(source, notes)
        source = source.to(dev).eval()
        default_size = _module_size(source)
        preprocess = as_preprocess(transform, size, default_size)
        check_input_size(source, preprocess.input_shape, "size" if size else "transform")
        if is_vit(source):
            model = vit_from_module(source, preprocess).eval()
        else:
            model = ModuleModel(source, feature_layer, preprocess, output).eval()
        info = {"source": "python", "path": None, "epoch": None, "metrics": {}, "config": model.config}
    else:
        raise ModelError(f"cannot open a model from a {type(source).__name__}: pass a checkpoint path, "
                         "'imagenet:BACKBONE' or a torch.nn.Module")
    info.setdefault("sha256", None)
    if not info["sha256"]:
        info["sha256"] = model_fingerprint(model)
    info["rule"] = describe_rule(model)
    info["notes"] = notes + list(info.get("notes") or [])
    for note in notes:  # logged where they arise, at warning level: the command line shows them
        log.warning("%s", note)
    return model, info


def _prepared_module(module: nn.Module, notes: list[str]) -> nn.Module:
    """A user's module as dmlviewer runs it, every difference said in ``notes`` (issue 22 item 3):
    NaN or infinite weights are refused (``ModelError`` naming the first tensor); a module in
    training mode is run in eval mode (BatchNorm's running statistics, no dropout); a module whose
    weights are not float32 (half, bfloat16, float64) is run as a float32 copy, the caller's module
    left as it is (its embeddings may differ from the original's at that precision)."""
    from .checkpoint import check_finite

    state = module.state_dict()
    try:
        check_finite(state, type(module).__name__)
    except CheckpointError as exc:
        raise ModelError(str(exc)) from None
    if any(m.training for m in module.modules()):
        notes.append(f"the {type(module).__name__} was in training mode: dmlviewer runs it in eval mode "
                     "(BatchNorm's running statistics, no dropout)")
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in state.values()
                     if t.is_floating_point() and t.dtype != torch.float32})
    if dtypes:
        import copy

        notes.append(f"the {type(module).__name__}'s weights are {', '.join(dtypes)}: dmlviewer runs a float32 copy "
                     "of it (its embeddings may differ from the original's at that precision)")
        module = copy.deepcopy(module).float()
    return module


def vit_from_module(vit: nn.Module, preprocess, pool: str | None = None, name: str | None = None):
    """A user's timm vision transformer (its own modules, shared, not copied) as an
    :class:`~dmlviewer.core.models.model.EmbeddingModel`: feature map on the patch-token grid,
    head per ``pool`` (default: timm's own ``global_pool``), projection = the model's ``head``."""
    pool = pool or ("gap" if vit.global_pool == "avg" else "token")
    if pool == "token" and vit.global_pool not in ("token", ""):
        log.warning("the transformer was built with global_pool=%r; reading out its class token", vit.global_pool)
    head = vit.head
    width = int(vit.embed_dim)
    if isinstance(head, nn.Linear):
        projection = Projection(width, head.out_features)
        projection.out = head
    elif isinstance(head, nn.Identity):
        projection = Projection(width, width, final=False)
    else:
        raise ValueError(f"the transformer's head is a {type(head).__name__}: only Linear or Identity is supported")
    backbone = ViTBackbone(vit, len(vit.blocks) - 1 if pool == "token" else len(vit.blocks), name or type(vit).__name__)
    config = {
        "backbone": f"module:{type(vit).__name__}", "pretrained": None, "pooling": pool, "gem_p": 3.0,
        "gem_learnable": False, "bn": False, "hidden": 0, "grouping": "none", "groups": 1,
        "dim": projection.out_dim, "multilayer": [], "image_size": preprocess.size,
        "mean": list(preprocess.mean), "std": list(preprocess.std), "source": "python",
    }
    return EmbeddingModel(config, backbone, TokenHead(vit, pool, projection))


def _fixed_input(module: nn.Module) -> tuple[tuple[int, int], str] | None:
    """``((height, width), owner)``: the one input a module takes and the type of the network
    that asserts it, or ``None``. A timm patch embedding built with a strict ``img_size`` (a ViT
    or DINOv2 without ``dynamic_img_size=True``) takes one size."""
    if not _any_may_have(module, "strict_img_size"):  # the common case, told without naming modules
        return None
    for name, sub in module.named_modules():
        if not _may_have(sub, "strict_img_size"):
            continue
        img_size = getattr(sub, "img_size", None)
        if getattr(sub, "strict_img_size", False) and isinstance(img_size, (tuple, list)) and len(img_size) == 2:
            owner = module.get_submodule(name.rpartition(".")[0]) if name else module
            return (int(img_size[0]), int(img_size[1])), type(owner).__name__
    return None


def _any_may_have(module: nn.Module, attribute: str) -> bool:
    """Whether :func:`_may_have` holds for ``module`` or any module under it."""
    stack, seen = [module], set()
    while stack:
        sub = stack.pop()
        if sub is None or id(sub) in seen:
            continue
        seen.add(id(sub))
        if _may_have(sub, attribute):
            return True
        stack.extend(sub._modules.values())
    return False


def _may_have(sub: nn.Module, attribute: str) -> bool:
    """Whether ``getattr(sub, attribute)`` can find anything (the instance, its class, or
    ``nn.Module.__getattr__``'s parameters, buffers and submodules), told without the
    AttributeError a miss raises: what made :func:`_fixed_input`'s walk cost a tenth of a
    millisecond per pair on a small network."""
    if type(sub).__getattr__ is not nn.Module.__getattr__:  # a module of its own rules: ask it
        return hasattr(sub, attribute)
    own = sub.__dict__
    return (attribute in own or hasattr(type(sub), attribute) or attribute in own.get("_parameters", ())
            or attribute in own.get("_buffers", ()) or attribute in own.get("_modules", ()))


def check_input_size(module: nn.Module, shape: tuple[int, int], field: str = "size") -> None:
    """:class:`ModelFieldError` on ``field`` when ``module`` takes one input size and ``shape`` is
    another (issue 31 item 11: instead of timm's bare ``AssertionError`` at the first forward)."""
    found = _fixed_input(module)
    if found is None or tuple(shape) == found[0]:
        return
    fixed, owner = found
    given = f"{shape[0]}" if shape[0] == shape[1] else f"{shape[0]} x {shape[1]}"
    takes = f"{fixed[0]}" if fixed[0] == fixed[1] else f"{fixed[0]} x {fixed[1]}"
    raise ModelFieldError(field, f"{{field}} asks for {given} px, but the {owner} takes {takes} px "
                                 f"input only (its img_size): give {takes}, or build the model with img_size={given} "
                                 "or dynamic_img_size=True to take other sizes")


def _module_size(module: nn.Module) -> int:
    """The input size a module expects: the one it takes (:func:`_fixed_input`, square), else
    what it says (timm's ``pretrained_cfg``), else 224."""
    found = _fixed_input(module)
    if found is not None and found[0][0] == found[0][1]:
        return found[0][0]
    cfg = getattr(module, "pretrained_cfg", None) or getattr(module, "default_cfg", None) or {}
    size = cfg.get("input_size") if isinstance(cfg, dict) else None
    return int(size[-1]) if size else 224


def describe_rule(model: nn.Module) -> str:
    """The decomposition rule of ``model`` in one line, without running it: what the UI shows
    next to the maps (the exact rule per pair comes with each ``Linearization``)."""
    from .two_branch import BRANCHES, TwoBranchModel

    if isinstance(model, TwoBranchModel):  # each branch's rule (issue 25)
        rules = [describe_rule(model.branch(side)) for side in BRANCHES]
        return rules[0] if rules[0] == rules[1] else f"query branch: {rules[0]}; reference branch: {rules[1]}"
    describe = getattr(model, "describe_rule", None)
    if callable(describe):
        return describe()
    from .model import frozen_quantities, stack_rule

    head = getattr(model, "head", None)
    if getattr(model, "config", None) is not None and stack_rule(model.config):  # head_layers (imported)
        return stack_rule(model.config)
    if isinstance(head, TokenHead):
        if head.pool == "token":
            return ("exact (last block's attention weights, LayerNorm scales and activation gates frozen at "
                    "this input; Ali et al. 2022)")
        return "exact (LayerNorm scales frozen at this input)"
    frozen = frozen_quantities(model.config)
    return "exact" + (f" ({', '.join(frozen)} frozen at this input)" if frozen else "")


def pretrained_backbones() -> list[tuple[str, str | None]]:
    """``(name, problem)`` for every listed backbone that has ImageNet weights: ``problem`` is
    ``None`` when its weights are on this machine (torch's hub cache, or a weights package),
    else the one line saying which file is missing and where it must go. Nothing is downloaded."""
    from .backbones import BACKBONES, imagenet_weights_path

    out = []
    for name in BACKBONES:
        spec = BACKBONES[name]
        if spec.weights_file is None:
            continue
        try:
            imagenet_weights_path(spec)
            problem = None
        except (FileNotFoundError, ModelError, ValueError) as exc:
            problem = str(exc)
        out.append((name, problem))
    return out
