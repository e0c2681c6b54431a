"""cnnimageretrieval-pytorch (cirtorch) ResNets: ``features.N`` for the ResNet's children, ``pool.p``
its GeM, optional ``whiten``, renamed to torchvision's layout. Its file's ``meta`` says the
pooling and input normalization, which a weights file alone cannot; regional pooling, local
whitening and poolings that dmlviewer does not decompose are refused, not approximated."""

from __future__ import annotations

import torch

from ..errors import LayoutError
from ..family import Defaults, Family, Found, Options
from ..head import Layer
from ..sources import Sources, fmt, triple

#: ``features`` (``list(resnet.children())[:-2]``) indices -> torchvision's names
_RESNET = {"0": "conv1", "1": "bn1", "4": "layer1", "5": "layer2", "6": "layer3", "7": "layer4"}
#: cirtorch's global poolings (``meta["pooling"]``) -> dmlviewer's; GeM's ``p`` is a weight (``pool.p``)
_POOLING = {"mac": "gmp", "spoc": "gap", "gem": None}


def detect(sources: Sources) -> str | None:
    prefix = sources.prefix_of("features.4.0.conv1.weight")
    return prefix if prefix is not None and prefix + "features.1.running_mean" in sources.tensors else None


def convert(sources: Sources, prefix: str) -> None:
    head = prefix + "features."

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
        if key.startswith(head):
            index, _, rest = key[len(head):].partition(".")
            if index in _RESNET:
                return f"{prefix}{_RESNET[index]}.{rest}", t
        return key, t

    sources.rename(rename, "cnnimageretrieval layout (features.N of a ResNet) renamed to torchvision's")


def defaults(found: Found, options: Options) -> Defaults:
    """What the file's ``meta`` says, what the user gave winning."""
    sources, meta = found.sources, found.sources.meta
    out = Defaults()
    if not meta:
        return out
    if meta.get("regional") or meta.get("local_whitening"):
        raise LayoutError("cnnimageretrieval model with " + ("regional pooling" if meta.get("regional") else
                          "local whitening") + " (its meta says so), which dmlviewer does not decompose")
    kind = meta.get("pooling")
    if isinstance(kind, str) and kind.lower() not in _POOLING:
        raise LayoutError(f"cnnimageretrieval pooling {kind!r} (its meta says so) is not one dmlviewer "
                          "decomposes (mac, spoc, gem)")
    if not (options.pooling or options.head_pools) and isinstance(kind, str) and _POOLING[kind.lower()]:
        out.pooling = _POOLING[kind.lower()]
        out.notes.append(f"pooling {out.pooling} from the file's meta ({kind})")
    if not options.mean and not options.std and triple(meta.get("mean")) and triple(meta.get("std")):
        out.mean, out.std = [float(v) for v in meta["mean"]], [float(v) for v in meta["std"]]
        out.notes.append(f"input normalization from the file's meta: mean {fmt(out.mean)}, std {fmt(out.std)}")
    for key in [k for k in sources.ignored if k.endswith("['meta']")]:
        sources.ignored[key] = "read for the pooling and input normalization (cnnimageretrieval's meta)"
    return out


def check(found: Found, layers: list[Layer], options: Options) -> list[str]:
    """cirtorch L2-normalizes the pooled vector *before* ``whiten``: with a bias, that is not the
    whitening of the pooled vector dmlviewer's head would compute. Refused unless forced (then
    an assumption line); a bias-free whitening is exact (the final normalization removes the
    scale)."""
    whiten = next((la for la in layers if la.module == found.prefix + "whiten"), None)
    if whiten is None or "bias" not in whiten.params or not bool(whiten.params["bias"].abs().max() > 0):
        return []
    if not options.force:
        raise LayoutError(f"cnnimageretrieval's {whiten.module} (with a bias) runs on the L2-normalized pooled "
                          "vector, which dmlviewer's head cannot hold; give {head} with the layers before it "
                          f"(e.g. {{head}} {layers[0].token}), or {{force}} to apply it to the unnormalized vector")
    return [f"LEFT OUT the L2 normalization before {whiten.module} ({{force}}): the embedding differs from "
            "the source model's"]


FAMILY = Family("cnnimageretrieval ResNet", detect=detect, convert=convert, defaults=defaults, check=check)
