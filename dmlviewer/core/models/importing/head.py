"""Step 3 of an import: the head, from the keys left over after the backbone.

Linear (2-D weight, or a 1x1 convolution on the pooled vector), eval-mode BatchNorm (running
statistics) and GeM (a scalar ``p``) layers in the files' key order. Parameterless layers are
not in a weights file: where the original architecture defines them (torchvision's and timm's
own classifier modules) their types are taken from it; where a gap in a ``Sequential``'s indices
implies one, or two linear layers meet in different named modules, a ReLU is assumed and the
notes say so. A ``head`` spec overrides the proposal (``HEAD_SPEC_HELP``); a LayerNorm of the
architecture's head that it skips is included (``include_architecture_norms``). A classifier
after the embedding layer (softmax-family DML code: ``embed`` -> [BN] -> ``classifier``) is left
out (``split_classifier``); a given head that skips another non-trivial layer of the
architecture's head is refused unless forced.

Messages name the user's inputs as ``{field}`` placeholders (errors.FIELDS).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from .candidates import Candidate, Match
from .errors import LayoutError
from .sources import Sources

HEAD_SPEC_HELP = (
    "auto (propose from the keys), none (no projection: the embedding is the pooled feature), or "
    "a comma-separated list in forward order of source modules (as the report names them, e.g. "
    "fc or embedder.net.0) and parameterless layers relu / identity / hardswish / gelu / tanh, "
    "optionally starting with the "
    "pooling gap, gmp or gem (p from a module named by gem=MODULE, or gem=NUMBER)"
)

_NOOP = (nn.Identity, nn.Flatten, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.AlphaDropout)
_BN_KEYS = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}
BN_EPS = 1e-5  # BatchNorm eps of head layers: not stored in weights files; PyTorch's default
#: parameterless head layers that are not piecewise linear, by the architecture's module type: a
#: head holding one is kept as a LayerStack and decomposed by the first-order rule
NONLINEAR_KINDS = {nn.Hardswish: "hardswish", nn.GELU: "gelu", nn.Tanh: "tanh"}
#: layers that do not fold into dmlviewer's exact head: a head holding one is kept layer by layer
#: (a LayerNorm is decomposed exactly with its scale frozen at the input, as vit.py's)
STACK_KINDS = ("layernorm", *NONLINEAR_KINDS.values())


@dataclass
class Layer:
    """One layer of the source head, in forward order."""

    kind: str                        # linear bn relu identity gem, layernorm and NONLINEAR_KINDS
    module: str | None = None        # source module path (None: parameterless)
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    note: str = ""                   # how it was known (assumed, from the architecture, given)
    eps: float | None = None         # layernorm: the architecture's eps

    def describe(self) -> str:
        if self.kind == "linear":
            w = self.params["weight"]
            text = f"Linear {w.shape[1]}->{w.shape[0]}" + ("" if "bias" in self.params else " (no bias)")
        elif self.kind == "bn":
            text = f"BatchNorm {self.params['running_mean'].numel()}"
        elif self.kind == "gem":
            text = f"GeM p={float(self.params['p'].reshape(-1)[0]):.4g}"
        elif self.kind == "layernorm":
            text = f"LayerNorm {self.params['weight'].numel()} (eps {self.eps:g})"
        else:
            text = {"relu": "ReLU", "identity": "Identity", "gap": "global average pooling",
                    "gmp": "global max pooling", "hardswish": "Hardswish", "gelu": "GELU",
                    "tanh": "Tanh"}[self.kind]
        where = f"{self.module}: " if self.module else ""
        return where + text + (f" ({self.note})" if self.note else "")

    @property
    def token(self) -> str:
        """This layer in ``head`` spec syntax."""
        if self.kind == "gem":
            return f"gem={self.module or float(self.params['p'].reshape(-1)[0])}"
        return self.module if self.module else self.kind


def module_params(keys: Sequence[str], tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """Group keys by module path (the key minus its last component), in key order."""
    modules: dict[str, dict[str, torch.Tensor]] = {}
    for k in keys:
        path, _, leaf = k.rpartition(".")
        modules.setdefault(path, {})[leaf] = tensors[k]
    return modules


def classify(params: dict[str, torch.Tensor]) -> str | None:
    """``linear``, ``bn`` or ``gem`` from a module's tensors, or None when it is none of them."""
    names = set(params)
    w = params.get("weight")
    if {"running_mean", "running_var"} <= names <= _BN_KEYS:
        n = params["running_mean"].numel()
        if all(params[k].dim() == 1 and params[k].numel() == n for k in names - {"num_batches_tracked"}):
            return "bn"
        return None
    if names <= {"weight", "bias"} and w is not None:
        flat = w.dim() == 2 or (w.dim() == 4 and tuple(w.shape[2:]) == (1, 1))
        if flat and ("bias" not in params or tuple(params["bias"].shape) == (w.shape[0],)):
            return "linear"
    if names == {"p"} and params["p"].numel() == 1:
        return "gem"
    return None


def _shapes(params: dict[str, torch.Tensor]) -> str:
    return ", ".join(f"{k} {list(v.shape)}" for k, v in params.items())


def _siblings(a: str, b: str) -> bool:
    """Both paths are numbered children of one ``Sequential`` (``net.1``, ``net.2``)."""
    pa, _, ia = a.rpartition(".")
    pb, _, ib = b.rpartition(".")
    return pa == pb and ia.isdigit() and ib.isdigit()


def _parameterless_before(path: str, sources: Sources, file: int) -> str | None:
    """The indices right before ``path`` in its ``Sequential`` that hold no weights (``net.0`` or
    ``net.1-2``), or None: a parameterless layer (ReLU, Dropout, ...) sits there."""
    parent, _, last = path.rpartition(".")
    if not last.isdigit() or int(last) == 0:
        return None
    head = f"{parent}." if parent else ""
    weighted = set()
    for k in sources.tensors:
        if sources.origin[k] == file and k.startswith(head):
            first = k[len(head):].split(".", 1)[0]
            if first.isdigit() and int(first) < int(last):
                weighted.add(int(first))
    start = max(weighted) + 1 if weighted else 0
    if start >= int(last):
        return None
    return f"{head}{start}" + ("" if start == int(last) - 1 else f"-{int(last) - 1}")


def _known_between(cand: Candidate, rel_a: str | None, rel_b: str) -> list[tuple[str, str]] | None:
    """The original architecture's parameterless modules between head modules ``rel_a`` (None:
    the pooling) and ``rel_b``, when both are modules of it; else None."""
    paths = [p for p, _ in cand.head]
    if rel_b not in paths or (rel_a is not None and rel_a not in paths):
        return None
    start = 0 if rel_a is None else paths.index(rel_a) + 1
    end = paths.index(rel_b)
    if end < start:
        return None
    return list(cand.head[start:end])


def propose_head(cand: Candidate, m: Match, sources: Sources, keys: Sequence[str]) -> list[Layer]:
    """The layers the leftover ``keys`` form, in forward order (module docstring, step 3);
    ``LayoutError`` for a module that is not a Linear, BatchNorm or GeM layer, or a known
    parameterless module that is not a ReLU or a no-op."""
    modules = module_params(keys, sources.tensors)
    norms = architecture_norms(cand, m, modules)
    unknown = {p: v for p, v in modules.items() if classify(v) is None and p not in norms}
    if unknown:
        path, params = next(iter(unknown.items()))
        rel = path[len(m.prefix):] if path.startswith(m.prefix) else None
        what = f" ({m.name}'s {rel} is a {dict(cand.head)[rel]})" if rel in dict(cand.head) else ""
        usable = [p for p in modules if p not in unknown]
        example = ",".join(usable) if 0 < len(usable) <= 4 else "none"
        raise LayoutError(
            f"cannot tell what {path or '(top level)'} ({_shapes(params)}) does{what}: it is not a Linear, "
            f"BatchNorm or GeM layer ({len(unknown)} such module(s)); give {{head}} with the layers that make "
            f"the embedding, e.g. {{head}} {example}",
            unmatched=[k for k in keys if k.rpartition('.')[0] in unknown])
    layers: list[Layer] = []
    previous: str | None = None   # previous module path (source naming)
    previous_rel: str | None = None
    previous_file = None
    for path, params in modules.items():
        kind = "layernorm" if path in norms else classify(params)
        rel = path[len(m.prefix):] if path.startswith(m.prefix) else None
        file = sources.origin[next(k for k in keys if k.rpartition(".")[0] == path)]
        known = _known_between(cand, previous_rel if previous is not None else None, rel) if rel else None
        if known is not None and (previous is None or previous_rel is not None):
            for kpath, ktype in known:
                module = cand.head_modules[kpath]
                if isinstance(module, _NOOP):
                    continue
                if isinstance(module, nn.ReLU):
                    layers.append(Layer("relu", note=f"{kpath} of {cand.name}"))
                    continue
                if type(module) in NONLINEAR_KINDS:
                    layers.append(Layer(NONLINEAR_KINDS[type(module)], note=f"{kpath} of {cand.name}"))
                    continue
                raise LayoutError(
                    f"{m.name}'s head has {kpath} ({ktype}) between its layers: dmlviewer decomposes "
                    "Linear, BatchNorm and ReLU heads exactly, not this one; if your head differs, give "
                    "{head} with its layers")
        else:
            gap = _parameterless_before(path, sources, file)
            if gap:
                why = "; pytorch-metric-learning's MLP starts with a ReLU" if gap.endswith(".0") else ""
                layers.append(Layer("relu", note=f"assumed for {gap}, which has no weights{why}"))
            elif (kind == "linear" and layers and layers[-1].kind == "linear" and previous_file == file
                  and not _siblings(previous, path)):
                layers.append(Layer("relu", note=f"assumed between {previous} and {path}: named modules "
                                    "do not show what runs between them"))
        layers.append(Layer(kind, path, dict(params), eps=norms.get(path),
                            note=f"{rel} of {cand.name}" if path in norms else ""))
        previous, previous_rel, previous_file = path, rel, file
    return layers


def architecture_norms(cand: Candidate, m: Match, modules: dict[str, dict[str, torch.Tensor]]) -> dict[str, float]:
    """Source module path -> eps of the modules that the architecture's own head defines as a
    LayerNorm (ConvNeXt's ``head.norm``) and whose weights the files hold with its width; a
    weights file alone cannot tell a LayerNorm from another per-feature affine layer."""
    norms = {}
    for kpath, module in cand.head_modules.items():
        path = m.prefix + kpath
        params = modules.get(path)
        if isinstance(module, nn.LayerNorm) and params is not None and set(params) <= {"weight", "bias"} \
                and all(v.dim() == 1 and v.numel() == module.normalized_shape[-1] for v in params.values()):
            norms[path] = float(module.eps)
    return norms


def include_architecture_norms(cand: Candidate, m: Match, layers: list[Layer], sources: Sources,
                                available: Sequence[str]) -> tuple[list[Layer], list[str]]:
    """A given head that names a layer of the architecture's head (head ``head.fc``) runs the
    architecture's LayerNorms before it too (timm/torchvision ConvNeXt's ``head.norm``): they are
    inserted where the architecture runs them, with a note; leaving one out would change the
    embedding (``skipped_layers`` refuses that)."""
    norms = architecture_norms(cand, m, module_params(available, sources.tensors))
    given = {la.module for la in layers if la.module}
    out: list[Layer] = []
    notes = []
    previous: str | None = None
    for layer in layers:
        rel = layer.module[len(m.prefix):] if layer.module and layer.module.startswith(m.prefix) else None
        if rel is not None and rel in dict(cand.head):
            for kpath, _ in _known_between(cand, previous, rel) or []:
                path = m.prefix + kpath
                if path in norms and path not in given:
                    out.append(Layer("layernorm", path, dict(module_params(available, sources.tensors)[path]),
                                     note=f"{kpath} of {cand.name}, run before {rel}", eps=norms[path]))
                    notes.append(f"{path} (LayerNorm, eps {norms[path]:g}) included: {cand.name} runs it "
                                 f"before {layer.module}")
            previous = rel
        out.append(layer)
    return out, notes


def parse_head_spec(spec: str, sources: Sources, available: Sequence[str],
                    norms: dict[str, float] | None = None) -> list[Layer]:
    """The layers of a ``head`` spec (``HEAD_SPEC_HELP``); ``LayoutError`` for a bad item.
    ``norms``: modules the architecture defines as LayerNorms (path -> eps)."""
    spec = spec.strip()
    if spec.lower() == "none":
        return []
    modules = module_params(available, sources.tensors)
    layers = []
    for i, item in enumerate(t.strip() for t in spec.split(",")):
        low = item.lower()
        if low in ("relu", "identity", *NONLINEAR_KINDS.values()):
            layers.append(Layer(low, note="given"))
        elif low in ("gap", "gmp") and i == 0:
            layers.append(Layer(low, note="given"))
        elif low.startswith("gem") and i == 0:
            _, _, arg = item.partition("=")
            try:
                p = float(arg) if arg else None
            except ValueError:
                p = None
            if p is not None:
                layers.append(Layer("gem", None, {"p": torch.tensor(p)}, note="given"))
            elif arg in modules and classify(modules[arg]) == "gem":
                layers.append(Layer("gem", arg, dict(modules[arg])))
            else:
                raise LayoutError(f"{{head}} {item}: give gem=NUMBER or gem=MODULE with a module holding p")
        elif item in modules and classify(modules[item]) in ("linear", "bn"):
            layers.append(Layer(classify(modules[item]), item, dict(modules[item]), note="given"))
        elif norms and item in norms:
            layers.append(Layer("layernorm", item, dict(modules[item]), note="given", eps=norms[item]))
        elif item in modules:
            raise LayoutError(f"{{head}} {item}: {item} ({_shapes(modules[item])}) is not a Linear or BatchNorm layer")
        else:
            choices = [p for p, v in modules.items() if classify(v) in ("linear", "bn", "gem")]
            raise LayoutError(f"{{head}}: no module {item!r} among the keys left after the backbone "
                              f"(modules: {', '.join(choices) or 'none'}; or relu, identity, gap, gmp, gem)")
    return layers


#: module-name words of a classifier trained beside an embedding (softmax-family DML losses:
#: ArcFace, CosFace, NormFace, proxy losses); matched against whole ``.``/``_`` separated words
CLASSIFIER_WORDS = ("classifier", "cls", "logits", "logit", "arcface", "cosface", "sphereface", "normface",
                    "proxies", "proxy", "softmax")


def _words(path: str) -> set[str]:
    return {w for w in path.lower().replace("_", ".").split(".") if w}


def split_classifier(layers: list[Layer]) -> tuple[list[Layer], str | None]:
    """Leave out a classifier that follows the embedding layer (issue 26: ``embed`` Linear ->
    [BN] -> ``classifier`` Linear to the classes). The last Linear is the classifier when an
    earlier Linear feeds it (through BatchNorm, no-ops or an assumed ReLU only) and either its
    module's name says so (``CLASSIFIER_WORDS``, not shared with the earlier layer's name: VGG's
    ``classifier.0 ... classifier.6`` is one head) or it has no bias and no known ReLU precedes it
    and nothing but a ReLU assumed between two named modules precedes it (a class-proxy matrix:
    a gap in a ``Sequential`` is real evidence of a ReLU, two named modules are not). Returns
    the layers up to the embedding and a line saying what was left out (None: nothing)."""
    if len(layers) < 2 or layers[-1].kind != "linear" or layers[-1].module is None:
        return layers, None
    last = layers[-1]
    i = len(layers) - 2
    while i >= 0 and layers[i].kind in ("bn", "identity", "relu"):
        if layers[i].kind == "relu" and not layers[i].note.startswith("assumed"):
            break
        i -= 1
    if i < 0 or layers[i].kind != "linear" or layers[i].module is None:
        return layers, None
    embed = layers[i]
    named = (_words(last.module) & set(CLASSIFIER_WORDS)) - _words(embed.module)
    proxy = "bias" not in last.params and all(la.note.startswith("assumed between")  # not a Sequential's gap
                                              for la in layers[i + 1:-1] if la.kind == "relu")
    if not named and not proxy:
        return layers, None
    keep = list(layers[:-1])
    while keep and keep[-1].kind in ("relu", "identity"):  # a ReLU assumed before the classifier
        keep.pop()
    w = last.params["weight"]
    why = f"named {sorted(named)[0]!r}" if named else "no bias: a class-proxy matrix"
    after = keep[-1].module
    return keep, (f"classifier {last.module} (Linear {w.shape[1]}->{w.shape[0]}, {why}) left out: the embedding "
                  f"is the output of {after}; give {{head}} to include it")


def skipped_layers(cand: Candidate, m: Match, layers: list[Layer], force: bool) -> list[str]:
    """A head that names modules of the architecture's own head but skips one of its layers that
    is neither a no-op nor a ReLU (timm convnext's ``head.norm`` before ``head.fc``) would compute
    something else than the source: ``LayoutError``, or with ``force`` an assumption line."""
    given = {la.module for la in layers if la.module}
    previous: str | None = None
    lines = []
    for layer in layers:
        if layer.module is None or not layer.module.startswith(m.prefix):
            continue
        rel = layer.module[len(m.prefix):]
        known = _known_between(cand, previous, rel) or []
        previous = rel if rel in dict(cand.head) else previous
        for kpath, ktype in known:
            module = cand.head_modules[kpath]
            if isinstance(module, (*_NOOP, nn.ReLU)) or m.prefix + kpath in given:
                continue
            if type(module) in NONLINEAR_KINDS and any(la.module is None and la.kind == NONLINEAR_KINDS[type(module)]
                                                       for la in layers):
                continue
            what = f"{cand.name} runs {kpath} ({ktype}) between the pooling and {rel}"
            if not force:
                raise LayoutError(f"{what}: leaving it out changes the embedding and dmlviewer's head cannot hold "
                                  "it; give {head} none (the pooled feature), or {force} to leave it out anyway")
            lines.append(f"LEFT OUT {kpath} ({ktype}; {{force}}): the embedding differs from the source model's")
    return lines


def apply_pooling(layers: list[Layer], pooling: str | None, gem_p: float | None) -> list[Layer]:
    """The layers with the pooling the user stated (``pooling``/``gem_p``) first."""
    pools = ("gap", "gmp", "gem")
    if pooling is None:
        if gem_p is not None:
            raise LayoutError("{gem_p} needs {pooling} gem")
        return layers
    pooling = pooling.lower()
    if pooling not in pools:
        raise LayoutError(f"{{pooling}} must be one of {', '.join(pools)}, got {pooling!r}")
    if layers and layers[0].kind in pools and layers[0].note == "given":
        raise LayoutError("the pooling is given twice ({pooling} and first in {head}): give it once")
    found = layers[0] if layers and layers[0].kind == "gem" else None  # a GeM p in the files
    rest = layers[1:] if layers and layers[0].kind in pools else list(layers)
    if pooling != "gem":
        if gem_p is not None:
            raise LayoutError("{gem_p} needs {pooling} gem")
        return [Layer(pooling, note="given")] + rest
    if gem_p is None:
        if found is None:
            raise LayoutError("{pooling} gem needs {gem_p} P: the files hold no GeM exponent")
        return [found] + rest
    if not (0 < gem_p <= 100):
        raise LayoutError(f"{{gem_p}} must be in (0, 100], got {gem_p:g}")
    return [Layer("gem", None, {"p": torch.tensor(float(gem_p))}, note="given")] + rest

