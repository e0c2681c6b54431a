"""Step 2 of an import: the known architectures as the importer sees them, and how a file's keys
match them.

A candidate is built once on the meta device (no memory, no initialization); it matches under a
key prefix when every backbone key is present with its shape (BatchNorm's
``num_batches_tracked`` may be absent). timm vision transformers match with position embeddings
of any square grid, which gives the checkpoint's ``token_grid``.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

import torch
from torch import nn

from ..backbones import BACKBONES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ViTLayout:
    """A timm vision transformer as the importer sees it: ``pos_embed`` is matched for any grid."""

    patch: int
    prefix_tokens: int        # class + register + distillation tokens
    embed_class: bool         # position embeddings cover the prefix tokens (not timm's no_embed_class)
    heads: int
    distilled: bool
    fc_norm: bool = False     # the final norm after the pooling (timm's global_pool="avg"), not before

    def grid(self, pos_embed: torch.Tensor) -> int | None:
        """The side of the square grid ``pos_embed`` (1 x T x C) was made for, or None."""
        if pos_embed.dim() != 3:
            return None
        n = pos_embed.shape[1] - (self.prefix_tokens if self.embed_class else 0)
        side = int(round(max(n, 0) ** 0.5))
        return side if side > 0 and side * side == n else None


@dataclass(frozen=True)
class Candidate:
    """A known architecture as the importer sees it (built once on the meta device)."""

    name: str
    keys: dict[str, tuple[int, ...]]      # backbone state-dict keys -> shape (classifier-less)
    ignored_prefixes: tuple[str, ...]      # auxiliary classifiers: keys ignored when present
    head: tuple[tuple[str, str], ...]      # the original net's modules after the features: (path, type)
    head_modules: dict[str, nn.Module]     # those modules (meta), to classify parameterless ones
    pool: str                              # gap, gmp, token, or the name of an unsupported pooling
    nonnegative: bool                      # the last map is a ReLU's output
    channels: int
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    image_size: int = 224
    vit: ViTLayout | None = None           # vision transformers: what the keys cannot show
    family: str = ""                       # the family that built it ("": the generic candidate)
    config: tuple[tuple[str, object], ...] = ()  # model config entries it needs beyond the name


def _is_leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None


def vit_candidate(name: str, family: str = "", **timm_kwargs) -> Candidate:
    """A ``timm:NAME`` vision transformer built on the meta device without classifier
    (``timm_kwargs``: ``fc_norm=True`` for the mean-pooled layout)."""
    from ..timm_backbones import import_timm

    timm = import_timm()
    with torch.device("meta"):
        net = timm.create_model(name[5:], pretrained=False, num_classes=0, **timm_kwargs)
    cfg = dict(getattr(net, "pretrained_cfg", {}) or {})
    keys = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    size = net.patch_embed.patch_size
    fc_norm = not isinstance(net.fc_norm, nn.Identity)
    layout = ViTLayout(int(size[0] if isinstance(size, (tuple, list)) else size), int(net.num_prefix_tokens),
                       not getattr(net, "no_embed_class", False), int(net.blocks[0].attn.num_heads),
                       getattr(net, "dist_token", None) is not None, fc_norm)
    mean = tuple(float(v) for v in cfg.get("mean", (0.485, 0.456, 0.406)))
    std = tuple(float(v) for v in cfg.get("std", (0.229, 0.224, 0.225)))
    return Candidate(name, keys, ("head_dist.",) if layout.distilled else (), (), {}, "gap" if fc_norm else "token",
                     False, int(net.embed_dim), mean, std, int(cfg.get("input_size", (3, 224, 224))[-1]), layout,
                     family, (("fc_norm", True),) if fc_norm else ())


@lru_cache(maxsize=None)
def candidate(name: str) -> Candidate:
    """Build ``name`` on the meta device and read its keys, head and pooling (``ValueError``
    for a name that is neither in ``BACKBONES`` nor a resolvable ``timm:NAME``). A family may
    build its own candidates of a name (``Family.build``: registry.build_candidate)."""
    from ..vit import timm_vit_name

    if timm_vit_name(name):
        return vit_candidate(name)
    try:
        spec = BACKBONES[name]  # ValueError for a timm:NAME that is not a CNN, or without timm
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; choose from {', '.join(BACKBONES)} or timm:NAME") from None
    mean, std, size = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 224
    if name.startswith("timm:"):
        from ..timm_backbones import timm_info

        info = timm_info(name[5:])
        mean, std, size = info.mean, info.std, max(info.input_size, 32)
    with torch.device("meta"):
        net = spec.build(size)
    net.eval()
    ignored = spec.dropped_keys + tuple(f"{c}." for c in spec.classifier)
    keys = {k: tuple(v.shape) for k, v in net.state_dict().items() if not k.startswith(ignored)}
    leaves = {n: m for n, m in net.named_modules() if n and _is_leaf(m)}
    record: list[tuple[str, object]] = []
    hooks = [m.register_forward_hook(lambda _m, _i, o, n=n: record.append((n, o))) for n, m in leaves.items()]
    x = torch.empty(1, 3, size, size, device="meta")
    try:
        with torch.no_grad():
            last = spec.features(net, x)["last"]
            in_features = list(record)
            record.clear()
            try:
                net(x)
            except Exception:  # noqa: BLE001 - no forward of its own (small_cnn): no known head
                log.debug("%s: no full forward on meta", name, exc_info=True)
                record.clear()
    finally:
        for h in hooks:
            h.remove()
    producer = next((n for n, o in reversed(in_features) if o is last), None)
    nonnegative = producer is not None and isinstance(leaves[producer], (nn.ReLU, nn.ReLU6))
    seen = {n for n, _ in in_features}
    head: list[tuple[str, str]] = []
    for n, _ in record:
        if n not in seen and all(n != h for h, _ in head):
            head.append((n, type(leaves[n]).__name__))
    pool = "gap"
    if head:
        first = leaves[head[0][0]]
        size_one = getattr(first, "output_size", None) in (1, (1, 1))
        pool = ("gap" if isinstance(first, nn.AdaptiveAvgPool2d) and size_one else
                "gmp" if isinstance(first, nn.AdaptiveMaxPool2d) and size_one else type(first).__name__)
        head = head[1:]
        if name.startswith("timm:") and pool not in ("gap", "gmp"):  # timm's own pooling modules (Swin's NHWC one)
            pool = {"avg": "gap", "fast_avg": "gap", "max": "gmp", "fast_max": "gmp"}.get(info.pool_type, pool)
    return Candidate(name, keys, spec.dropped_keys, tuple(head), {h: leaves[h] for h, _ in head},
                     pool, nonnegative, spec.channels_of["last"], mean, std, size)


@dataclass(frozen=True)
class Match:
    """``candidate``'s backbone keys found in the sources under ``prefix``."""

    name: str
    prefix: str
    matched: tuple[str, ...]         # candidate keys present with the right shape
    mismatched: tuple[str, ...]      # present with another shape
    missing: tuple[str, ...]         # absent (num_batches_tracked not counted)
    scope: int                       # source keys under the prefix
    candidate: Candidate | None = field(default=None, compare=False, repr=False)  # what was matched

    @property
    def family(self) -> str:
        """The family that built the candidate ("" for the generic one)."""
        return self.candidate.family if self.candidate is not None else ""

    @property
    def full(self) -> bool:
        return not self.mismatched and not self.missing

    @property
    def jaccard(self) -> float:
        total = len(self.matched) + len(self.mismatched) + len(self.missing)
        return len(self.matched) / max(total + self.scope - len(self.matched) - len(self.mismatched), 1)

    def describe(self) -> str:
        total = len(self.matched) + len(self.mismatched) + len(self.missing)
        where = f" under {self.prefix!r}" if self.prefix else ""
        return f"{self.name} ({len(self.matched)}/{total} keys{where})"


def matches(cand: Candidate, tensors: dict[str, torch.Tensor], prefix: str | None = None) -> list[Match]:
    """``cand``'s keys looked up under each plausible prefix (the key prefixes that end in one of a
    few of its keys, or ``prefix``), best first (most keys matched)."""
    keys = list(cand.keys)
    if prefix is None:
        votes: Counter[str] = Counter()
        probes = keys[:4] + keys[len(keys) // 2 : len(keys) // 2 + 2] + keys[-4:]
        for k in probes:
            for s in tensors:
                if s.endswith(k) and (len(s) == len(k) or s[-len(k) - 1] == "."):
                    votes[s[: len(s) - len(k)]] += 1
        prefixes = [p for p, _ in votes.most_common(8)] or [""]
    else:
        prefixes = [prefix]
    found = []
    for p in prefixes:
        matched, mismatched, missing = [], [], []
        for k in keys:
            t = tensors.get(p + k)
            if t is None:
                if not k.endswith("num_batches_tracked"):
                    missing.append(k)
            elif k == "pos_embed" and cand.vit is not None:  # any input size: a square grid
                if t.dim() == 3 and t.shape[2] == cand.keys[k][2] and cand.vit.grid(t):
                    matched.append(k)
                else:
                    mismatched.append(k)
            elif tuple(t.shape) == cand.keys[k]:
                matched.append(k)
            else:
                mismatched.append(k)
        scope = sum(1 for s in tensors if s.startswith(p))
        found.append(Match(cand.name, p, tuple(matched), tuple(mismatched), tuple(missing), scope, cand))
    return sorted(found, key=lambda m: (len(m.matched), -len(m.missing)), reverse=True)


def match(cand: Candidate, tensors: dict[str, torch.Tensor], prefix: str | None = None) -> Match:
    """The best prefix under which ``cand``'s keys appear in ``tensors``, and what matched."""
    return matches(cand, tensors, prefix)[0]


def shape_overlap(cand: Candidate, tensors: dict[str, torch.Tensor]) -> float:
    """Share of ``cand``'s backbone tensors whose shapes occur in ``tensors`` (as multisets): how
    close a file is to an architecture whatever its key names (renamed modules)."""
    have = Counter(tuple(t.shape) for t in tensors.values())
    need = Counter(s for k, s in cand.keys.items() if not k.endswith("num_batches_tracked"))
    return sum((have & need).values()) / max(sum(need.values()), 1)


def features_close(a: Match, b: Match, prefix: str, tensors: dict[str, torch.Tensor]) -> bool:
    """Whether the architectures of ``a`` and ``b`` compute the same last map with the files'
    weights (under ``prefix``)."""
    from ..backbones import Backbone

    if a.candidate.vit is not None or b.candidate.vit is not None:
        return False  # same keys, another head count: the file cannot tell ({arch})
    x = torch.randn(1, 3, 128, 128, generator=torch.Generator().manual_seed(0))
    outs = []
    for name in (a.name, b.name):
        net = Backbone(name, None, 128).eval()
        state = {k: tensors[prefix + k] for k in net.net.state_dict() if prefix + k in tensors}
        net.net.load_state_dict(state, strict=False)
        with torch.no_grad():
            outs.append(net(x)["last"])
    if outs[0].shape != outs[1].shape:
        return False
    return bool(torch.allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4 * float(outs[0].abs().max()) + 1e-6))


def timm_twins(name: str) -> list[str]:
    """timm models sharing ``name``'s layout with another padding (``tf_`` variants)."""
    if not name.startswith("timm:"):
        return []
    from ..timm_backbones import import_timm

    base = name[5:]
    twin = base[3:] if base.startswith("tf_") else f"tf_{base}"
    return [f"timm:{twin}"] if import_timm().is_model(twin) else []
