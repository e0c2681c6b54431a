"""Names of models a person can tell apart (issue 31 item 1).

Every trained model is a ``checkpoint.pt``: a model is named by what tells it apart, its run
folder and the loss and backbone its checkpoint records (``ms-96px/checkpoint.pt · MS ·
small_cnn``), or by the label the user gave it (``ModelSource.label``). Paths are shortened from
the middle (their beginning, the folder that differs, and their end, the file, stay), and the
names of several models are made distinct: two runs in different folders never read the same
(more parent folders are shown until they differ). Used by the status bar, the window title,
the Compare Models tables and exports, and the recent-model menus.

No Qt here (a test enforces it), and nothing imported but the standard library at import time.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Sequence

#: The longest path part of a name (characters), shortened from the middle beyond it.
MAX_PATH_CHARS = 44
#: How losses are written in names (``TrainConfig.loss`` values).
LOSS_WORDS = {"ms": "MS", "triplet": "Triplet", "margin": "Margin", "contrastive": "Contrastive",
              "binomial": "Binomial", "proxy_nca": "ProxyNCA"}
ELLIPSIS = "…"


def shorten_middle(text: str, max_chars: int = MAX_PATH_CHARS) -> str:
    """``text`` at most ``max_chars`` long, its middle replaced by "…" (the beginning and the
    end, a path's file name, stay)."""
    text = str(text)
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - 1, 2)
    tail = (keep + 1) // 2
    return text[:keep - tail] + ELLIPSIS + text[len(text) - tail:]


def traits(info: dict | list | None) -> list[str]:
    """What a model's checkpoint says it is, for its name: the training loss (``MS``) and the
    backbone (``small_cnn``); ``[]`` when ``info`` (``open_model``'s) records neither. A list is
    traits read before (remembered beside a recent model) and is returned as it is."""
    if isinstance(info, list):
        return [str(t) for t in info]
    info = info or {}
    extra = info.get("extra") if isinstance(info.get("extra"), dict) else {}
    train = extra.get("train_config") if isinstance(extra.get("train_config"), dict) else {}
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    out = []
    loss = train.get("loss")
    if isinstance(loss, str) and loss:
        out.append(LOSS_WORDS.get(loss, loss))
    backbone = config.get("backbone") or train.get("backbone")
    branches = config.get("branches") if isinstance(config.get("branches"), dict) else {}
    if not backbone and isinstance(branches.get("query"), dict):  # a two-branch checkpoint: the query's
        backbone = branches["query"].get("backbone")
    if isinstance(backbone, str) and backbone:
        out.append(backbone)
    return out


def _where(source: Any, parents: int) -> str:
    """Where ``source`` comes from, with ``parents`` folders above its file (0: the file only)."""
    kind = getattr(source, "kind", None)
    if kind == "checkpoint":
        return _tail(source.path or "", parents)
    if kind == "pretrained":
        return str(source.path)
    if kind == "code":
        file, sep, name = (source.entry or "").rpartition(":")
        entry = f"{_tail(file, parents)}:{name}" if sep and file.endswith(".py") else str(source.entry)
        weights = "".join(f" + {_tail(w, parents)}" for w in (source.weights, source.reference_weights) if w)
        return entry + weights
    return "Python module" if source is None else str(source.display())


def _tail(path: str, parents: int) -> str:
    parts = PurePath(path).parts
    return PurePath(*parts[-(parents + 1):]).as_posix() if parts else path


def model_name(source: Any, info: dict | list | None = None, parents: int = 1) -> str:
    """One model's name: the user's label when it has one, else where it comes from (its file
    with ``parents`` folders above, shortened from the middle) and its :func:`traits`."""
    label = getattr(source, "label", None)
    if label and getattr(source, "kind", None) != "python":
        return str(label)
    where = shorten_middle(_where(source, parents)) if source is not None else "the model"
    if getattr(source, "kind", None) == "python":
        where = str(label or "Python module")
    return " · ".join([where] + traits(info))


def distinct_names(models: Sequence[tuple[Any, dict | list | None]], shared_traits: bool = True) -> list[str]:
    """The names (:func:`model_name`) of ``models`` (``(source, info or None)`` pairs), made
    distinct: models whose names read the same show more parent folders until they differ; the
    same name left over (one file opened twice, or the same label) is numbered ``(2)``.
    ``shared_traits=False``: a trait every one of several models has (the same backbone) is left
    out, it tells none apart (names side by side in a status bar)."""
    if not shared_traits and len(models) > 1:
        lists = [traits(info) for _, info in models]
        common = set(lists[0]).intersection(*map(set, lists[1:]))
        models = [(source, [t for t in own if t not in common]) for (source, _), own in zip(models, lists)]
    depth = [1] * len(models)
    names = [model_name(s, i, d) for (s, i), d in zip(models, depth)]
    for _ in range(32):  # a path deeper than this is not a path
        grown = False
        for name in {n for n in names if names.count(n) > 1}:
            group = [k for k, n in enumerate(names) if n == name]
            growable = [k for k in group if not getattr(models[k][0], "label", None)
                        and getattr(models[k][0], "kind", None) in ("checkpoint", "code")]
            if len({_where(models[k][0], 999) for k in growable}) < 2:
                continue  # one file (or one label) several times: numbered below
            for k in growable:
                if _where(models[k][0], depth[k] + 1) != _where(models[k][0], depth[k]):
                    depth[k] += 1
                    names[k] = model_name(models[k][0], models[k][1], depth[k])
                    grown = True
        if not grown:
            break
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


def full_description(source: Any) -> str:
    """Everything a source names, for a tooltip or a status tip (whole paths)."""
    if source is None:
        return ""
    kind = getattr(source, "kind", "")
    if kind in ("checkpoint", "pretrained"):
        return str(source.path)
    if kind == "code":
        return " + ".join(str(p) for p in (source.entry, source.weights, source.reference_weights) if p)
    return str(getattr(source, "label", "") or "Python module")


def describe_preprocessing(config: dict | None) -> str:
    """The preprocessing a model assumes, in words: ``"224 px, ImageNet mean and std"`` or
    ``"96 px, mean 0.5, 0.5, 0.5, std 0.25, 0.25, 0.25"`` (a two-branch model: per branch)."""
    config = config or {}
    branches = config.get("branches")
    if isinstance(branches, dict) and all(isinstance(branches.get(s), dict) for s in ("query", "reference")):
        shapes = config.get("input_shapes") or {}
        return "; ".join(f"{side} {describe_preprocessing({**branches[side], 'input_shape': shapes.get(side)})}"
                         for side in ("query", "reference"))
    from dmlviewer.core.data.transforms import IMAGENET_MEAN, IMAGENET_STD

    size = config.get("input_shape") or config.get("image_size")
    if isinstance(size, (list, tuple)) and len(size) == 2:
        side = f"{size[0]}x{size[1]} px"
    else:
        side = f"{size} px" if size else "the model's own size"
    mean, std = config.get("mean"), config.get("std")

    def close(values, reference) -> bool:
        return values is None or (len(values) == 3 and all(abs(float(a) - b) < 1e-6 for a, b in zip(values, reference)))

    if close(mean, IMAGENET_MEAN) and close(std, IMAGENET_STD):
        return f"{side}, ImageNet mean and std"
    return (f"{side}, mean {', '.join(f'{float(v):g}' for v in mean or IMAGENET_MEAN)}, "
            f"std {', '.join(f'{float(v):g}' for v in std or IMAGENET_STD)}")
