"""A timm Hugging Face folder (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``, as
timm's ``save_for_hf``/``push_to_hub`` write it): its weights file, and from the config the
architecture, pooling and preprocessing, as if given (the user's own win)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import LayoutError
from ..family import Defaults, Family
from ..sources import triple

HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
#: ``model_args`` of a timm ``config.json`` that do not change the key layout or the function
#: (``global_pool``: the families of the key layout tell, and the pooling is read from it)
_HARMLESS_ARGS = {"img_size", "num_classes", "in_chans", "global_pool"}


def read_hf_folder(folder: str) -> tuple[str, Defaults]:
    """``(weights file, defaults)`` of the folder (the config's values it does not hold are
    None). ``LayoutError`` (one line) for a folder that is not one, or whose ``model_args``
    change the architecture beyond what its name builds."""
    folder = Path(folder)
    config_file = folder / "config.json"
    weights = next((folder / n for n in HF_WEIGHTS if (folder / n).is_file()), None)
    if not config_file.is_file() or weights is None:
        raise LayoutError(f"{folder} is a folder but not a timm Hugging Face folder (config.json with "
                          f"{' or '.join(HF_WEIGHTS)}): give the weights file itself")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LayoutError(f"{config_file}: not a readable JSON file ({exc})") from None
    arch = config.get("architecture") if isinstance(config, dict) else None
    if not isinstance(arch, str) or not arch:
        raise LayoutError(f"{config_file} names no timm architecture (\"architecture\"): give {{arch}}")
    args = config.get("model_args") or {}
    if not isinstance(args, dict):
        args = {}
    changed = sorted(set(args) - _HARMLESS_ARGS)
    if changed or args.get("in_chans", 3) != 3:
        raise LayoutError(f"{config_file}: model_args {', '.join(changed) or 'in_chans'} change {arch} beyond what "
                          "its name builds; dmlviewer builds timm models by name only")
    pool = args.get("global_pool", config.get("global_pool"))
    pooling = {"avg": "gap", "max": "gmp", "token": "token", None: None}.get(pool, "unsupported")
    if pooling == "unsupported":
        raise LayoutError(f"{config_file}: global_pool {pool!r} is not one dmlviewer decomposes "
                          "(avg, max, or token for transformers)")
    cfg = config.get("pretrained_cfg") if isinstance(config.get("pretrained_cfg"), dict) else {}
    size = cfg.get("input_size")
    out = Defaults(arch=f"timm:{arch.split('.')[0]}", pooling=pooling,
                   image_size=int(size[-1]) if triple(size) else None,
                   mean=[float(v) for v in cfg["mean"]] if triple(cfg.get("mean")) else None,
                   std=[float(v) for v in cfg["std"]] if triple(cfg.get("std")) else None)
    out.notes.append(f"config.json: architecture {out.arch}, pooling {out.pooling or 'not given'}, input "
                     f"{out.image_size or 'not given'} px, mean/std {'given' if out.mean else 'not given'}")
    return str(weights), out


FAMILY = Family("timm Hugging Face folder", folder=read_hf_folder)
