"""Steps 1-4 of an import as one generator, :func:`analyze`: read the files, walk the families
(registry.FAMILIES: each detects its layout, converts it, says what its metadata tells and which
candidates to try), recognize the backbone, propose the head and fold it; the result is an
:class:`ImportPlan`, whose ``report`` the command line prints and the dialog shows."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dmlviewer.core.progress import CancelToken, Progress

from ..backbones import format_keys
from ..model import default_config
from .candidates import Candidate, Match, candidate, features_close, match, matches, shape_overlap, timm_twins
from .errors import LayoutError, named
from .family import Defaults, Found, Options
from .fold import FoldedHead, fold_head
from .head import (BN_EPS, NONLINEAR_KINDS, Layer, apply_pooling, architecture_norms, include_architecture_norms,
                   module_params, parse_head_spec, propose_head, skipped_layers, split_classifier)
from .registry import FAMILIES, build_candidate, stages, walk
from .sources import Sources, fmt, read_sources

log = logging.getLogger(__name__)


@dataclass
class ImportPlan:
    """What an import will do; ``report()`` is the text the CLI prints and the dialog shows
    (``names``: how the door words the fields, see errors.FIELDS)."""

    sources: Sources
    arch: str
    match: Match
    layers: list[Layer]
    folded: FoldedHead
    config: dict
    head_spec: str
    head_auto: bool
    notes: list[str]
    unmatched: dict[str, str]                  # source key -> why it is not used
    ranking: list[Match]
    equivalents: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)  # what the files cannot tell (ASSUMED line)
    reference_check: dict | None = None        # set by write_checkpoint when given a reference

    @property
    def candidate(self) -> Candidate:
        """The recognized architecture as the importer sees it."""
        return self.match.candidate

    @property
    def backbone_mapping(self) -> dict[str, str]:
        """Source key -> key in the dmlviewer model's state dict."""
        return {self.match.prefix + k: f"backbone.net.{k}" for k in self.match.matched}

    @property
    def head_mapping(self) -> dict[str, str]:
        """Source key -> where it went: a key of the dmlviewer model, or the layer it was folded into."""
        where = {}
        for target, modules in self.folded.sources.items():
            for module in modules:
                where[module] = (target, len(modules) == 1)
        mapping = {}
        for layer in self.layers:
            if layer.module is None:
                continue
            for name in layer.params:
                if layer.kind == "gem":
                    mapping[f"{layer.module}.{name}"] = "head.pooling.p"
                    continue
                target, alone = where[layer.module]
                mapping[f"{layer.module}.{name}"] = (f"head.projection.{target}.{name}" if alone
                                                     else f"folded into head.projection.{target}")
        return mapping

    def summary(self) -> str:
        c = self.config
        parts = [f"pooling {c['pooling']}" + (f" (p={c['gem_p']:.4g})" if c["pooling"] == "gem" else "")]
        if c.get("fc_norm"):
            parts.append("fc_norm (LayerNorm)")
        if c["head_layers"]:
            return " -> ".join(parts + c["head_layers"])
        if c["bn"]:
            parts.append("BatchNorm")
        if c["hidden"]:
            parts.append(f"Linear {c['hidden']} + ReLU")
        parts.append(f"Linear {c['dim']}" if c["dim"] else "no projection")
        return " -> ".join(parts)

    def report(self, full_mapping: bool = False, names: dict[str, str] | None = None) -> str:
        """Several lines: the recognized architecture, head, mapping, unmatched keys, notes."""
        m = self.match
        lines = [f"architecture: {self.arch}" + (f" (keys under {m.prefix!r})" if m.prefix else "")
                 + f", {len(m.matched)} backbone keys matched"]
        if m.family:
            lines.append(f"  as {m.family}")
        if self.equivalents:
            lines.append(f"  also fits {', '.join(self.equivalents)}, which compute the same features")
        lines.append(f"head ({'proposed' if self.head_auto else 'given'}): {{head}} {self.head_spec}")
        for layer in self.layers:
            lines.append(f"  {layer.describe()}")
        dim = self.config["dim"] or self.candidate.channels
        lines.append(f"dmlviewer model: {self.arch} -> {self.summary()} (embedding dimension {dim})")
        lines.append(f"decomposition rule: {self.rule_line()}")
        lines.append(f"input: {self.config['image_size']} px, mean {fmt(self.config['mean'])}, "
                     f"std {fmt(self.config['std'])} (check them against your training code)")
        lines.append("mapping:")
        mapping = self.backbone_mapping
        if full_mapping:
            lines += [f"  {s} -> {t}" for s, t in mapping.items()]
        else:
            lines.append(f"  {m.prefix or ''}* -> backbone.net.* ({len(mapping)} keys)")
        lines += [f"  {s} -> {t}" for s, t in self.head_mapping.items()]
        if self.unmatched:
            lines.append(f"unmatched ({len(self.unmatched)}, not used):")
            lines += [f"  {k}: {why}" for k, why in self.unmatched.items()]
        else:
            lines.append("unmatched: none")
        if self.notes:
            lines.append("notes:")
            lines += [f"  {n}" for n in self.notes]
        lines.append(self._assumption_template())
        return named("\n".join(lines), names)

    def rule_line(self) -> str:
        """How explanations decompose the written head: exact, or first order and why."""
        stack = self.folded.stack or []
        nonlinear = list(dict.fromkeys(la.kind for la in stack if la.kind in NONLINEAR_KINDS.values()))
        if nonlinear:
            return (f"first order: {', '.join(nonlinear)} (not piecewise linear; gradient x activation, the "
                    "remainder in the bias)")
        if any(la.kind == "layernorm" for la in stack):
            return "exact, the LayerNorm scale frozen at each input"
        if self.config["token_grid"]:
            return "exact, the vision transformer's attention and LayerNorm scales frozen at each input"
        return "exact"

    def assumption_line(self, names: dict[str, str] | None = None) -> str:
        """One line: what the weights files cannot tell and the import assumed."""
        return named(self._assumption_template(), names)

    def _assumption_template(self) -> str:
        if not self.assumptions:
            return "ASSUMED: nothing (every choice was given or read from the files)"
        return "ASSUMED (the weights cannot tell; check these or state them with options): " + "; ".join(
            self.assumptions)


def _layout_error(what: str, sources: Sources, ranking: list[Match]) -> LayoutError:
    """One line: ``what``, the closest layouts ranked by key overlap plus tensor-shape overlap
    (which finds an architecture whose modules were renamed), the unmatched keys."""
    scored = sorted(((mm.jaccard + shape_overlap(mm.candidate, sources.tensors), mm) for mm in ranking),
                    key=lambda t: t[0], reverse=True)
    best = max(ranking, key=lambda mm: len(mm.matched), default=None)
    explained = {best.prefix + k for k in best.matched} if best else set()
    unmatched = [k for k in sources.tensors if k not in explained]
    parts = []
    for score, mm in scored[:3]:
        share = score - mm.jaccard
        text = f"{mm.describe()[:-1]}, {share:.0%} of its tensor shapes present)"
        if mm.matched and mm.missing:
            text += f", missing {format_keys(list(mm.missing), 3)}"
        if mm.matched and mm.mismatched:
            text += f", other shapes {format_keys(list(mm.mismatched), 3)}"
        parts.append(text)
    closest = "closest: " + "; ".join(parts) if parts else "no architecture to compare with"
    return LayoutError(f"{what}; {closest}; unmatched keys: [{format_keys(unmatched, 12)}]",
                       ranking=[(mm.name, len(mm.matched), len(mm.matched) + len(mm.missing) + len(mm.mismatched),
                                 score / 2) for score, mm in scored[:5]], unmatched=unmatched)


def _recognize(sources: Sources, found: list[Found], arch: str | None, prefix: str | None,
               cancel: CancelToken | None) -> Iterator[Progress | tuple[Match, list[Match], list[str]]]:
    """Step 2: try the candidates stage by stage; the last item is ``(match, ranking,
    equivalents)``. Several full matches with the same keys are compared on a random input with
    the file's weights: if they compute the same features the first is taken, otherwise the file
    is ambiguous and ``arch`` must say which."""
    tried = stages(found, sources.shapes(), arch)
    total = sum(len(stage) for stage in tried)
    results: list[Match] = []
    for stage in tried:
        for name, family in stage:
            if cancel is not None:
                cancel.raise_if_cancelled()
            yield Progress("step", len(results), total, f"trying {name}")
            try:
                cand = build_candidate(name, family)
            except (ValueError, ImportError) as exc:
                if arch:
                    raise LayoutError(f"{{arch}} {arch}: {exc}") from None
                log.debug("candidate %s unavailable: %s", name, exc)
                continue
            results.append(match(cand, sources.tensors, prefix))
        if any(mm.full for mm in results):
            break
    ranking = sorted(results, key=lambda mm: mm.jaccard, reverse=True)
    full = [mm for mm in results if mm.full]
    if not full:
        raise _layout_error(f"{{arch}} {arch} does not fit" if arch else "unknown layout: no known architecture fits",
                            sources, ranking)
    most = max(len(mm.matched) for mm in full)
    best = [mm for mm in full if len(mm.matched) == most]
    chosen, equivalents = best[0], []
    copies = [mm.prefix for mm in matches(chosen.candidate, sources.tensors, prefix) if mm.full]
    if len(copies) > 1:
        raise LayoutError(f"the files hold {chosen.name} under several prefixes ({', '.join(map(repr, copies))}): "
                          "choose one with {prefix}")
    if arch:
        yield chosen, ranking, equivalents
        return
    larger = [mm for mm in results if not mm.full and len(mm.matched) > most]
    if larger:
        raise _layout_error(f"the keys fit {chosen.name} but hold more layers of the same kind (a larger network "
                            f"with keys missing or reshaped?); give {{arch}} {chosen.name} if it is one", sources,
                            sorted(larger, key=lambda mm: len(mm.matched), reverse=True))
    for twin in timm_twins(chosen.name):
        try:
            tm = match(candidate(twin), sources.tensors, chosen.prefix)
        except (ValueError, ImportError):
            continue
        if tm.full and len(tm.matched) == most:
            best.append(tm)
    different = []
    for other in best[1:]:
        yield Progress("step", total, total, f"comparing {chosen.name} with {other.name}")
        if features_close(chosen, other, chosen.prefix, sources.tensors):
            equivalents.append(other.name)
        else:
            different.append(other.name)
    if different:
        raise LayoutError(f"the layout fits {' and '.join([chosen.name] + different)}, which compute different "
                          "features with these weights (padding, normalization): choose one with {arch}")
    yield chosen, ranking, equivalents


def _merge(options: Options, defaults: Defaults, notes: list[str]) -> None:
    """A family's metadata into ``options``: what the user stated wins; a pooling the head spec
    states too."""
    options.arch = options.arch or defaults.arch
    if defaults.pooling and not options.pooling and not options.head_pools:
        options.pooling = defaults.pooling
    options.image_size = options.image_size or defaults.image_size
    options.mean = options.mean or defaults.mean
    options.std = options.std or defaults.std
    notes += defaults.notes


def _unused(cand: Candidate, m: Match, sources: Sources) -> tuple[list[str], dict[str, str], bool]:
    """The keys left for the head (in forward order: the backbone's file first, the others in the
    order given), the keys not used and why, and whether a DeiT-distilled model's two
    classifiers were left out."""
    used = {m.prefix + k for k in cand.keys}
    rest = [k for k in sources.tensors if k not in used]
    unmatched: dict[str, str] = {}
    aux = tuple(m.prefix + p for p in cand.ignored_prefixes)
    for k in [k for k in rest if aux and k.startswith(aux)]:
        unmatched[k] = f"auxiliary classifier of {cand.name} (not part of the embedding)"
    distilled = cand.vit is not None and cand.vit.distilled and any(k.startswith(aux) for k in unmatched)
    if distilled:  # two classifiers averaged: their logits are not one Linear of the pooled tokens
        for k in [k for k in rest if k.startswith(m.prefix + "head.")]:
            unmatched[k] = "classifier of the class token (DeiT-distilled: averaged with head_dist)"
    for copy in matches(cand, sources.tensors):
        if copy.full and copy.prefix != m.prefix:  # e.g. a teacher beside the student chosen by the prefix
            for k in copy.matched:
                unmatched.setdefault(copy.prefix + k, f"another copy of the backbone (under {copy.prefix!r})")
    rest = [k for k in rest if k not in unmatched]
    storage: dict[tuple, str] = {}
    for k in list(sources.tensors):
        t = sources.tensors[k]
        if t.numel() == 0:
            continue
        ident = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())
        if ident in storage and k in rest:
            unmatched[k] = f"the same tensor as {storage[ident]} (an alias, e.g. pytorch-metric-learning's last_linear)"
        else:
            storage.setdefault(ident, k)
    rest = [k for k in rest if k not in unmatched]
    if len(sources.files) > 1:  # the backbone's file first, the others in the order given
        home = Counter(sources.origin[k] for k in used if k in sources.origin).most_common(1)[0][0]
        rest.sort(key=lambda k: (sources.origin[k] != home, sources.origin[k]))
    return rest, unmatched, distilled


def _transformer_pooling(cand: Candidate, layers: list[Layer], options: Options,
                         assumptions: list[str]) -> tuple[list[Layer], str, bool]:
    """A vision transformer's pooling: ``token`` (the class token) or ``gap`` (the mean of the
    patch tokens), stated or the candidate's own (assumed); ``(layers, pooling, stated)``."""
    pooling = options.pooling
    if layers and layers[0].kind == "gap" and not pooling:  # a head spec gap,...: the mean of the patch tokens
        layers, pooling = layers[1:], "gap"
    elif options.gem_p is not None or (pooling or "token").lower() not in ("token", "gap"):
        raise LayoutError(f"{cand.name} is a vision transformer: {{pooling}} token (the class token) or gap "
                          "(the mean of the patch tokens after the final norm)")
    if any(la.kind in ("gap", "gmp", "gem") for la in layers):
        raise LayoutError(f"{cand.name} is a vision transformer: give its pooling with {{pooling}} token|gap")
    if pooling:
        return layers, pooling.lower(), True
    if cand.vit.fc_norm:
        assumptions.insert(0, "pooling gap (the mean of the patch tokens, then fc_norm: the files hold fc_norm and "
                              "no final norm, as timm builds for global_pool='avg'; a weights file does not store "
                              "the pooling: {pooling} token for the class token)")
    else:
        assumptions.insert(0, "pooling token (the class token, timm's default; a weights file does not store "
                              "it: {pooling} gap for the mean of the patch tokens)")
    return layers, cand.pool, False


def analyze(paths: Sequence[str | os.PathLike], arch: str | None = None, head: str = "auto",
            prefix: str | None = None, image_size: int | None = None,
            mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
            cancel: CancelToken | None = None, pooling: str | None = None, gem_p: float | None = None,
            force: bool = False) -> Iterator[Progress]:
    """Generator: read, recognize, propose and fold (module docstring); the ``done`` event's
    result is an :class:`ImportPlan`. ``pooling`` (gap, gmp, gem; token or gap for transformers)
    and ``gem_p`` state the pooling a weights file cannot tell; ``force`` leaves out a layer of
    the architecture that the head skips (else refused). ``LayoutError`` (one line, naming the
    fields as ``{field}``) when the layout is not recognized or the head cannot be represented;
    ``CheckpointError``/``FileNotFoundError`` for unreadable files."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    options = Options(arch, head, prefix, image_size, mean, std, pooling, gem_p, force)
    notes: list[str] = []
    if any(Path(p).is_dir() for p in paths):
        if len(paths) > 1:
            raise LayoutError("give a Hugging Face folder alone, not with other weights files")
        reader = next(f for f in FAMILIES if f.folder is not None)
        weights, defaults = reader.folder(str(paths[0]))
        paths = [weights]
        _merge(options, defaults, notes)
    yield Progress("log", message=f"reading {len(paths)} file(s)")
    sources = read_sources(paths)
    sources.notes += notes
    found = walk(sources)
    normalization = None
    for f in found:
        if f.family.defaults is not None:
            defaults = f.family.defaults(f, options)
            _merge(options, defaults, sources.notes)
            normalization = normalization or defaults.normalization
    recognized = None
    for event in _recognize(sources, found, options.arch, prefix, cancel):
        if isinstance(event, Progress):
            yield event
        else:
            recognized = event
    m, ranking, equivalents = recognized
    cand = m.candidate
    rest, unmatched, distilled_heads = _unused(cand, m, sources)
    notes = list(sources.notes)
    assumptions: list[str] = []
    if head.strip().lower() == "auto":
        layers = propose_head(cand, m, sources, rest)
        layers, classifier = split_classifier(layers)
        if classifier:
            assumptions.append(classifier)
        head_auto = True
    else:
        layers = parse_head_spec(head, sources, rest, architecture_norms(cand, m, module_params(rest, sources.tensors)))
        layers, included = include_architecture_norms(cand, m, layers, sources, rest)
        notes += included
        head_auto = False
    if distilled_heads and head_auto:
        assumptions.append("classifiers head and head_dist left out: the embedding is timm's pre_logits "
                           "(the mean of the class and distillation tokens)")
    assumptions += skipped_layers(cand, m, layers, force)
    for f in found:
        if f.family.check is not None:
            assumptions += f.family.check(f, layers, options)
    if cand.vit is not None:
        layers, pool, explicit_pool = _transformer_pooling(cand, layers, options, assumptions)
    else:
        layers = apply_pooling(layers, options.pooling, gem_p)
        pool = cand.pool
        explicit_pool = bool(layers and layers[0].kind in ("gap", "gmp", "gem"))
    used_head = {f"{la.module}.{n}" for la in layers if la.module for n in la.params}
    for k in rest:
        if k not in used_head:
            unmatched[k] = "not part of the given head" if not head_auto else "not used"
    for layer in layers:
        if layer.note.startswith("assumed"):
            notes.append(f"a ReLU was {layer.note} (give {{head}} to say otherwise)")
            assumptions.append(f"a ReLU {layer.note.split(',')[0].split(';')[0]}")
    for key, why in sources.ignored.items():
        unmatched[key] = why
    if cand.vit is None and pool not in ("gap", "gmp") and not explicit_pool:
        raise LayoutError(f"{cand.name} pools with {pool}, which dmlviewer does not decompose; "
                          "give {pooling} (gap, gmp or gem with {gem_p}) if yours differs")
    if cand.vit is None and not explicit_pool:
        assumptions.insert(0, f"pooling {pool} ({cand.name}'s own; a weights file does not store its pooling: "
                              "OML and retrieval models often use GeM, give {pooling} gem {gem_p} P)")
    folded = fold_head(layers, cand.channels, pool, cand.nonnegative)
    notes += folded.notes
    if folded.bn is not None or any(la.kind == "bn" for la in layers):
        assumptions.append(f"BatchNorm eps {BN_EPS:g}")
    spec_tokens = [la.token for la in layers]
    head_spec = ",".join(spec_tokens) if spec_tokens else "none"
    if cand.name in ("googlenet", "inception_v3"):
        notes.append(f"{cand.name}: torchvision's transform_input is applied (its default with ImageNet "
                     "weights); a network trained without it is timm:inception_v3 (give {arch})")
    last = next((la for la in reversed(layers) if la.kind == "linear"), None)
    if head_auto and last is not None and last.params["weight"].shape[0] > last.params["weight"].shape[1]:
        notes.append(f"{last.module} widens {last.params['weight'].shape[1]} -> {last.params['weight'].shape[0]}: "
                     "if it is a classifier rather than part of the embedding, leave it out with {head}")
    size = int(options.image_size or cand.image_size)
    extra_config = dict(cand.config)
    default_mean, default_std = cand.mean, cand.std
    which = "timm's for this model" if cand.name.startswith("timm:") else "ImageNet's"
    if cand.vit is not None:
        grid = cand.vit.grid(sources.tensors[m.prefix + "pos_embed"])
        extra_config["token_grid"] = grid
        size = int(options.image_size or grid * cand.vit.patch)
        assumptions.append(f"{cand.vit.heads} attention heads ({cand.name[5:]}'s; a weights file does not store "
                           "them: give {arch} timm:NAME if yours differ)")
        notes.append(f"position embeddings for a {grid}x{grid} grid ({grid * cand.vit.patch} px); other input "
                     "sizes interpolate them as timm's dynamic_img_size does")
    if normalization is not None:
        default_mean, default_std, which = normalization
    if not options.image_size:
        assumptions.append(f"input {size} px" + (" (the position embeddings' grid)" if cand.vit else ""))
    if not options.mean or not options.std:
        assumptions.append(f"input normalization {which}")
    config = default_config(
        backbone=cand.name, pretrained=None, pooling=folded.pooling,
        gem_p=folded.gem_p if folded.gem_p is not None else 3.0, gem_learnable=True,
        bn=folded.bn is not None, hidden=int(folded.hidden[0].shape[0]) if folded.hidden is not None else 0,
        dim=folded.dim, head_layers=list(folded.stack_spec),
        image_size=size, mean=[float(v) for v in (options.mean or default_mean)],
        std=[float(v) for v in (options.std or default_std)], **extra_config)
    plan = ImportPlan(sources, cand.name, m, layers, folded, config, head_spec, head_auto, notes,
                      unmatched, ranking, equivalents, assumptions)
    yield Progress("done", data={"result": plan})
