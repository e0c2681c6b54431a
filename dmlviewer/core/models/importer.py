"""Import a model trained elsewhere from its weights file(s) into a dmlviewer checkpoint
(``dmlviewer import-model``, File > Import Model; docs/internals.md "core.models.importer").

1. **Read** every file with ``read_weights_file`` (``torch.load(weights_only=True)`` or
   safetensors), unwrap common containers (``state_dict``, ``model``, ``net``, ...; a dict of
   state dicts such as ``{"trunk": ..., "embedder": ...}`` is flattened with those prefixes),
   and strip the ``module.`` (DDP/DataParallel) and ``_orig_mod.`` (torch.compile) prefixes a
   whole file carries. Several files (pytorch-metric-learning's ``trunk_*.pth`` and
   ``embedder_*.pth``) are merged: the file holding the backbone comes first, the others follow
   in the order given, as the forward pass does. NaN/Inf weights are refused (checkpoint.py's
   ``check_finite``).
   A timm Hugging Face folder gives its weights file and, from ``config.json``, the architecture,
   pooling and preprocessing (``read_hf_folder``); torchvision ViT keys are renamed to timm's
   layout, which computes the same function (``convert_torchvision_vit``), and so are torchvision's
   RegNet, ConvNeXt and Swin keys (``convert_torchvision_regnet``/``_convnext``/``_swin``).
2. **Recognize** the backbone from key names and shapes: every architecture in ``BACKBONES`` and,
   when timm is installed, ``TIMM_SHORTLIST`` plus any ``timm:NAME`` given as ``arch``. Candidates
   are built on the meta device (no memory, no initialization); a candidate matches under a key
   prefix when every backbone key is present with its shape (BatchNorm's
   ``num_batches_tracked`` may be absent). Several full matches with the same keys are compared
   on a random input with the file's weights: if they compute the same features the built-in one
   is taken, otherwise the file is ambiguous and ``arch`` must say which. timm vision transformers
   (``TIMM_VIT_SHORTLIST``, tried first when the file holds ``pos_embed``) match with position
   embeddings of any square grid, which gives the checkpoint's ``token_grid``.
3. **Propose the head** from the keys left over: Linear (2-D weight, or a 1x1 convolution on the
   pooled vector), eval-mode BatchNorm (running statistics) and GeM (a scalar ``p``) layers in
   the files' key order. Parameterless layers are not in a weights file: where the original
   architecture defines them (torchvision's and timm's own classifier modules) their types are
   taken from it; where a gap in a ``Sequential``'s indices implies one, or two linear layers
   meet in different named modules, a ReLU is assumed and the notes say so. A ``head`` spec
   overrides the proposal (``HEAD_SPEC_HELP``); a LayerNorm of the architecture's head that it
   skips is included (``_include_architecture_norms``). A classifier after the embedding layer
   (softmax-family DML code: ``embed`` -> [BN] -> ``classifier``) is left out
   (``split_classifier``); a given head that skips another non-trivial layer of the
   architecture's head is refused unless forced.
4. **Fold** the layers exactly into dmlviewer's head ``[BN] -> [Linear(hidden) -> ReLU] ->
   Linear(dim)`` (projection.py): consecutive affine layers (Linear, eval BatchNorm) compose into
   one; a ReLU right after the pooling is dropped when the backbone's last map is the output of a
   ReLU (the pooled feature is then non-negative), and otherwise becomes an identity hidden layer
   so that it stays exact. A head holding a LayerNorm (ConvNeXt's ``head.norm``, eps from the
   architecture) or a Hardswish/GELU/Tanh (MobileNetV3's classifier) cannot fold: it is kept layer
   by layer (config ``head_layers``, projection.LayerStack; the same function) and the report's
   ``decomposition rule`` line says how explanations decompose it: exact with the LayerNorm scale
   frozen at the input, first order with a Hardswish/GELU/Tanh. Other heads
   with two ReLU layers or a trailing ReLU are refused with one line.
5. **Write** the checkpoint (``save_checkpoint``; ``extra["import"]`` records the sources, their
   SHA-256, the mapping, the notes, the assumptions and the measured difference between the folded
   head and the layer sequence it replaces). With a reference file of the user's own embeddings
   (``check_against``) the written model must reproduce them within ``CHECK_TOLERANCE``.

Never a silent difference: whatever the files cannot tell (pooling, attention head count, input
size and normalization, a layer left out) is an assumption, printed on one ``ASSUMED`` line and
recorded in the checkpoint.

Nothing here runs code from a file: only tensors and plain values are read.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from dmlviewer.core.progress import CancelToken, Progress, run_to_end

from .backbones import BACKBONES, CHECKPOINT_FORMAT, format_keys, read_weights_file
from .checkpoint import check_finite  # the one NaN/Inf check of every door that reads weights
from .errors import CheckpointError
from .model import EmbeddingModel, build_model, default_config

log = logging.getLogger(__name__)

#: timm CNNs tried when no ``arch`` is given (timm's resnet18/34/50/101 are left out: their keys
#: and function equal torchvision's, which the built-in backbones cover; tests/core/models/
#: test_importer.py checks that). ``tf_`` twins share their layout with the plain models but
#: pad differently, so a match of one is always compared with the other.
TIMM_SHORTLIST = (
    "resnet50d", "resnext50_32x4d", "seresnext50_32x4d", "wide_resnet50_2", "resnetv2_50",
    "densenet121", "inception_resnet_v2", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
    "efficientnet_b3", "efficientnetv2_rw_s", "mobilenetv2_100", "mobilenetv3_large_100",
    "regnety_016", "convnext_tiny", "convnext_small",
)

#: timm vision transformers tried when no ``arch`` is given: one name per key layout (patch size,
#: width, depth, class/register/distillation tokens, layer scale). The number of attention heads
#: is not in a weights file; these names use the standard one of their width (3 for 192, 6 for
#: 384, 12 for 768, 16 for 1024 and 1280), and the report states it as an assumption.
TIMM_VIT_SHORTLIST = (
    "vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224", "vit_large_patch16_224",
    "vit_small_patch32_224", "vit_base_patch32_224", "vit_large_patch32_224", "vit_small_patch8_224",
    "vit_base_patch8_224", "vit_huge_patch14_224",
    "vit_small_patch14_dinov2", "vit_base_patch14_dinov2", "vit_large_patch14_dinov2",
    "vit_small_patch14_reg4_dinov2", "vit_base_patch14_reg4_dinov2", "vit_large_patch14_reg4_dinov2",
    "deit_tiny_distilled_patch16_224", "deit_small_distilled_patch16_224", "deit_base_distilled_patch16_224",
)

HEAD_SPEC_HELP = (
    "auto (propose from the keys), none (no projection: the embedding is the pooled feature), or "
    "a comma-separated list in forward order of source modules (as the report names them, e.g. "
    "fc or embedder.net.0) and parameterless layers relu / identity / hardswish / gelu / tanh, "
    "optionally starting with the "
    "pooling gap, gmp or gem (p from a module named by gem=MODULE, or gem=NUMBER)"
)

_WRAPPERS = ("state_dict", "model_state_dict", "model", "net", "network", "weights",
             "params", "module")
_STRIP = ("module.", "_orig_mod.")
_NOOP = (nn.Identity, nn.Flatten, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.AlphaDropout)
_BN_KEYS = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}
BN_EPS = 1e-5  # BatchNorm eps of head layers: not stored in weights files; PyTorch's default
#: parameterless head layers that are not piecewise linear, by the architecture's module type: a
#: head holding one is kept as a LayerStack and decomposed by the first-order rule
NONLINEAR_KINDS = {nn.Hardswish: "hardswish", nn.GELU: "gelu", nn.Tanh: "tanh"}
#: layers that do not fold into dmlviewer's exact head: a head holding one is kept layer by layer
#: (a LayerNorm is decomposed exactly with its scale frozen at the input, as vit.py's)
STACK_KINDS = ("layernorm", *NONLINEAR_KINDS.values())
CHECK_TOLERANCE = 1e-4  # folded head against the layer sequence, relative to the output scale


class LayoutError(CheckpointError):
    """The files' layout is not recognized or the head cannot be represented (one line);
    ``ranking`` holds the closest candidates ``(name, matched, total, jaccard)``, ``unmatched``
    the keys no layout explains."""

    def __init__(self, message: str, ranking: Sequence[tuple] = (), unmatched: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.ranking = list(ranking)
        self.unmatched = list(unmatched)


# --------------------------------------------------------------------------- reading

@dataclass
class Sources:
    """The tensors of the weights files, merged: ``tensors`` (key -> tensor, in file order),
    ``origin`` (key -> file index), ``notes`` (what unwrapping did), ``ignored`` (entry -> why),
    ``meta`` (a file's top-level ``meta`` dict, as cnnimageretrieval-pytorch saves its input
    normalization and pooling; the first file's that has one)."""

    files: list[str]
    tensors: dict[str, torch.Tensor]
    origin: dict[str, int]
    notes: list[str] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)


def _tensor_dict(value) -> bool:
    return isinstance(value, dict) and bool(value) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _unwrap(data: dict, label: str, notes: list[str], ignored: dict[str, str]) -> dict[str, torch.Tensor]:
    """The state dict inside ``data`` (see module docstring, step 1)."""
    where = label
    while True:
        if _tensor_dict(data):
            return dict(data)
        wrapper = next((w for w in _WRAPPERS if isinstance(data.get(w), dict)
                        and any(isinstance(v, (torch.Tensor, dict)) for v in data[w].values())), None)
        if wrapper is None:
            break
        for k in data:
            if k != wrapper:
                ignored[f"{where}[{k!r}]"] = "not the model's weights"
        notes.append(f"{label}: took the weights from {where}[{wrapper!r}]")
        where = f"{where}[{wrapper!r}]"
        data = data[wrapper]
    out: dict[str, torch.Tensor] = {}
    groups = []
    for k, v in data.items():
        if isinstance(k, str) and isinstance(v, torch.Tensor):
            out[k] = v
        elif isinstance(k, str) and _tensor_dict(v):
            groups.append(k)
            out.update({f"{k}.{name}": t for name, t in v.items()})
        else:
            ignored[f"{where}[{k!r}]"] = "not a tensor or a state dict"
    if groups:
        notes.append(f"{label}: merged the state dicts {', '.join(groups)} as key prefixes")
    if not out:
        raise CheckpointError(f"{label} holds no model weights (no tensors found)")
    return out


def read_sources(paths: Sequence[str | os.PathLike]) -> Sources:
    """Read and merge the weights files (module docstring, step 1); ``CheckpointError`` for an
    unreadable file, a dmlviewer checkpoint, or a key that two files both hold."""
    if not paths:
        raise CheckpointError("no weights file given")
    files = [str(p) for p in paths]
    sources = Sources(files, {}, {})
    for index, path in enumerate(files):
        data = read_weights_file(path)
        if data.get("format") == CHECKPOINT_FORMAT:
            raise CheckpointError(f"{path} is already a dmlviewer checkpoint: open it directly")
        label = Path(path).name
        if not sources.meta and isinstance(data.get("meta"), dict):
            sources.meta = dict(data["meta"])
        tensors = _unwrap(data, label, sources.notes, sources.ignored)
        check_finite(tensors, path)
        for prefix in _STRIP:
            while tensors and all(k.startswith(prefix) for k in tensors):
                tensors = {k[len(prefix):]: v for k, v in tensors.items()}
                sources.notes.append(f"{label}: stripped the prefix {prefix!r} from every key")
        clash = sorted(tensors.keys() & sources.tensors.keys())
        if clash:
            raise CheckpointError(f"{path} and {files[sources.origin[clash[0]]]} both hold the keys "
                                  f"[{format_keys(clash)}]: give files of one model")
        sources.tensors.update(tensors)
        sources.origin.update(dict.fromkeys(tensors, index))
    return sources


_TV_VIT_BLOCK = (("ln_1.", "norm1."), ("self_attention.in_proj_weight", "attn.qkv.weight"),
                 ("self_attention.in_proj_bias", "attn.qkv.bias"), ("self_attention.out_proj.", "attn.proj."),
                 ("ln_2.", "norm2."), ("mlp.0.", "mlp.fc1."), ("mlp.3.", "mlp.fc2."),
                 ("mlp.linear_1.", "mlp.fc1."), ("mlp.linear_2.", "mlp.fc2."))
_TV_VIT_TOP = (("class_token", "cls_token"), ("conv_proj.", "patch_embed.proj."),
               ("encoder.pos_embedding", "pos_embed"), ("encoder.ln.", "norm."), ("heads.head.", "head."))


def _first_replace(text: str, table: Sequence[tuple[str, str]]) -> str:
    """``text`` with its first prefix in ``table`` (``(old, new)`` pairs) replaced."""
    for old, new in table:
        if text.startswith(old):
            return new + text[len(old):]
    return text


def _rename_keys(sources: Sources, rename: Callable[[str, torch.Tensor], tuple[str, torch.Tensor] | None],
                 note: str) -> None:
    """Every key of ``sources`` through ``rename`` (``(key, tensor) -> (new key, tensor)``, or
    None to drop the key), each keeping its file of origin; ``note`` says what was renamed."""
    renamed: dict[str, torch.Tensor] = {}
    origin: dict[str, int] = {}
    for key, t in sources.tensors.items():
        out = rename(key, t)
        if out is not None:
            renamed[out[0]] = out[1]
            origin[out[0]] = sources.origin[key]
    sources.tensors, sources.origin = renamed, origin
    sources.notes.append(note)


#: cnnimageretrieval-pytorch's ``features`` (``list(resnet.children())[:-2]``) indices -> names
_CIRTORCH_RESNET = {"0": "conv1", "1": "bn1", "4": "layer1", "5": "layer2", "6": "layer3", "7": "layer4"}


def convert_cirtorch_resnet(sources: Sources) -> str | None:
    """Rename cnnimageretrieval-pytorch's ResNet layout (``features.N`` for the resnet's children,
    ``pool.p`` its GeM, optional ``whiten``) to torchvision's; returns the key prefix when it
    did (None otherwise)."""
    marker = "features.4.0.conv1.weight"
    prefix = next((k[: -len(marker)] for k in sources.tensors if k.endswith(marker)), None)
    if prefix is None or prefix + "features.1.running_mean" not in sources.tensors:
        return None
    head = prefix + "features."

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
        if key.startswith(head):
            index, _, rest = key[len(head):].partition(".")
            if index in _CIRTORCH_RESNET:
                return f"{prefix}{_CIRTORCH_RESNET[index]}.{rest}", t
        return key, t

    _rename_keys(sources, rename, "cnnimageretrieval layout (features.N of a ResNet) renamed to torchvision's")
    return prefix


#: cnnimageretrieval-pytorch's global poolings (``meta["pooling"]``) -> dmlviewer's; GeM's ``p``
#: is a weight (``pool.p``) and is read from it
_CIRTORCH_POOLING = {"mac": "gmp", "spoc": "gap", "gem": None}


def _cirtorch_meta(meta: dict, pooling_given: bool, mean, std) -> tuple[str | None, list | None, list | None,
                                                                        list[str]]:
    """What cnnimageretrieval's ``meta`` says that a weights file cannot: ``(pooling, mean, std,
    notes)`` (pooling None: not said, or given by the user), what the user gave winning. Regional
    pooling, local whitening and poolings that dmlviewer does not decompose are refused
    (``LayoutError``), not approximated."""
    pooling = None
    notes = []
    if meta.get("regional") or meta.get("local_whitening"):
        raise LayoutError("cnnimageretrieval model with " + ("regional pooling" if meta.get("regional") else
                          "local whitening") + " (its meta says so), which dmlviewer does not decompose")
    kind = meta.get("pooling")
    if isinstance(kind, str) and kind.lower() not in _CIRTORCH_POOLING:
        raise LayoutError(f"cnnimageretrieval pooling {kind!r} (its meta says so) is not one dmlviewer "
                          "decomposes (mac, spoc, gem)")
    if not pooling_given and isinstance(kind, str) and _CIRTORCH_POOLING[kind.lower()]:
        pooling = _CIRTORCH_POOLING[kind.lower()]
        notes.append(f"pooling {pooling} from the file's meta ({kind})")
    if not mean and not std and _triple(meta.get("mean")) and _triple(meta.get("std")):
        mean, std = [float(v) for v in meta["mean"]], [float(v) for v in meta["std"]]
        notes.append(f"input normalization from the file's meta: mean {_fmt(mean)}, std {_fmt(std)}")
    return pooling, mean, std, notes


def _cirtorch_whitening(prefix: str, layers: list[Layer], force: bool) -> list[str]:
    """cnnimageretrieval L2-normalizes the pooled vector *before* ``whiten``: with a bias, that
    is not the whitening of the pooled vector dmlviewer's head would compute. Refused unless
    ``force`` (then an assumption line); a bias-free whitening is exact (the final normalization
    removes the scale)."""
    whiten = next((la for la in layers if la.module == prefix + "whiten"), None)
    if whiten is None or "bias" not in whiten.params or not bool(whiten.params["bias"].abs().max() > 0):
        return []
    if not force:
        raise LayoutError(f"cnnimageretrieval's {whiten.module} (with a bias) runs on the L2-normalized pooled "
                          "vector, which dmlviewer's head cannot hold; give --head with the layers before it "
                          f"(e.g. --head {layers[0].token}), or --force to apply it to the unnormalized vector")
    return [f"LEFT OUT the L2 normalization before {whiten.module} (--force): the embedding differs from "
            "the source model's"]


def convert_dinov2_hub(sources: Sources) -> bool:
    """Convert the DINOv2 repository's layout (torch.hub ``dinov2_vits14``..., OML's DINOv2
    extractors under ``model.``) to timm's, as timm's own loader does: the training-only
    ``mask_token`` is dropped; with registers, ``register_tokens`` become ``reg_token`` and the
    class token's position embedding moves into the class token (timm's no_embed_class models add
    position embeddings to the patch tokens only). True when it did."""
    marker = "blocks.0.ls1.gamma"
    prefix = next((k[: -len("mask_token")] for k in sources.tensors if k.endswith("mask_token")
                   and k[: -len("mask_token")] + marker in sources.tensors), None)
    if prefix is None:
        return False
    t = sources.tensors
    mask = prefix + "mask_token"
    sources.ignored[mask] = "DINOv2's mask token (used in training only)"
    renamed = {k: v for k, v in t.items() if k != mask}
    if prefix + "register_tokens" in t and prefix + "pos_embed" in t and prefix + "cls_token" in t:
        pos = t[prefix + "pos_embed"]
        fixed = {prefix + "reg_token": t[prefix + "register_tokens"],
                 prefix + "cls_token": t[prefix + "cls_token"] + pos[:, :1], prefix + "pos_embed": pos[:, 1:]}
        renamed = {(prefix + "reg_token" if k == prefix + "register_tokens" else k): v for k, v in renamed.items()}
        renamed.update(fixed)
    origin = {k: sources.origin.get(k, sources.origin.get(prefix + "register_tokens", 0)) for k in renamed}
    sources.tensors, sources.origin = renamed, origin
    sources.notes.append("DINOv2 repository layout converted to timm's (mask_token dropped"
                         + (", register tokens and the class token's position embedding moved)"
                            if prefix + "reg_token" in renamed else ")"))
    return True


#: timm RegNets that torchvision's ``regnet_x_*``/``regnet_y_*`` equal once renamed (the shapes
#: decide which; the group width and SE ratio are in them), tried after a rename
TIMM_REGNETS = ("regnetx_004_tv", "regnety_008_tv", "regnety_080_tv", "regnetx_002", "regnetx_004",
                "regnetx_008", "regnetx_016", "regnetx_032", "regnetx_080", "regnetx_160", "regnetx_320",
                "regnety_002", "regnety_004", "regnety_008", "regnety_016", "regnety_032", "regnety_080",
                "regnety_160", "regnety_320")
_TV_REGNET_BLOCK = (("proj.0.", "downsample.conv."), ("proj.1.", "downsample.bn."), ("f.a.0.", "conv1.conv."),
                    ("f.a.1.", "conv1.bn."), ("f.b.0.", "conv2.conv."), ("f.b.1.", "conv2.bn."), ("f.se.", "se."),
                    ("f.c.0.", "conv3.conv."), ("f.c.1.", "conv3.bn."))


def convert_torchvision_regnet(sources: Sources) -> bool:
    """Rename torchvision's RegNet keys (``stem.0``, ``trunk_output.blockI.blockI-J.f.a``, ``fc``)
    to timm's (``stem.conv``, ``sI.bJ+1.conv1``, ``head.fc``), which compute the same function
    (same convolutions, BatchNorm, ReLU, SE and padding); True when it did."""
    import re

    marker = "trunk_output.block1.block1-0.f.a.0.weight"
    prefix = next((k[: -len(marker)] for k in sources.tensors if k.endswith(marker)), None)
    if prefix is None:
        return False
    block = re.compile(re.escape(prefix) + r"trunk_output\.block(\d+)\.block\d+-(\d+)\.(.*)")
    top = ((prefix + "stem.0.", prefix + "stem.conv."), (prefix + "stem.1.", prefix + "stem.bn."),
           (prefix + "fc.", prefix + "head.fc."))

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
        found = block.fullmatch(key)
        if found:
            rest = _first_replace(found.group(3), _TV_REGNET_BLOCK)
            return f"{prefix}s{found.group(1)}.b{int(found.group(2)) + 1}.{rest}", t
        return _first_replace(key, top), t

    _rename_keys(sources, rename, "torchvision RegNet layout (trunk_output.blockI) renamed to timm's, which computes "
                 "the same function")
    return True


#: timm ConvNeXts (torchvision's ``convnext_*`` equal ``convnext_tiny/small/base/large`` once renamed; the
#: shapes decide which), tried first for a file with ConvNeXt keys
TIMM_CONVNEXTS = ("convnext_atto", "convnext_femto", "convnext_pico", "convnext_nano", "convnext_tiny",
                  "convnext_small", "convnext_base", "convnext_large", "convnext_xlarge")
#: their stem widths, so that only the ConvNeXts of a file's width are built (building each
#: candidate on the meta device takes seconds)
_CONVNEXT_STEM = {"convnext_atto": 40, "convnext_femto": 48, "convnext_pico": 64, "convnext_nano": 80,
                  "convnext_tiny": 96, "convnext_small": 96, "convnext_base": 128, "convnext_large": 192,
                  "convnext_xlarge": 256}
_TV_CONVNEXT_BLOCK = (("block.0.", "conv_dw."), ("block.2.", "norm."), ("block.3.", "mlp.fc1."),
                      ("block.5.", "mlp.fc2."), ("layer_scale", "gamma"))


def convert_torchvision_convnext(sources: Sources) -> bool:
    """Rename torchvision's ConvNeXt keys (``features.0`` stem, ``features.2i+1.J.block`` stages,
    ``features.2i`` downsampling, ``classifier.0`` LayerNorm2d and ``classifier.2`` Linear) to
    timm's (``stem``, ``stages.i.blocks.J``, ``stages.i.downsample``, ``head.norm``, ``head.fc``),
    which compute the same function (7x7 depthwise convolution, LayerNorm eps 1e-6 over channels,
    exact GELU, per-channel layer scale: torchvision's C x 1 x 1 ``layer_scale`` becomes timm's
    ``gamma`` of C); True when it did."""
    import re

    marker = "features.1.0.block.0.weight"
    prefix = next((k[: -len(marker)] for k in sources.tensors if k.endswith(marker)), None)
    if prefix is None or prefix + "features.1.0.layer_scale" not in sources.tensors:
        return False
    feature = re.compile(re.escape(prefix) + r"features\.(\d+)\.(.*)")
    top = ((prefix + "classifier.0.", prefix + "head.norm."), (prefix + "classifier.2.", prefix + "head.fc."))

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
        found = feature.fullmatch(key)
        if not found:
            return _first_replace(key, top), t
        index, rest = int(found.group(1)), found.group(2)
        if index == 0:
            return f"{prefix}stem.{rest}", t
        if index % 2 == 0:
            return f"{prefix}stages.{index // 2}.downsample.{rest}", t
        block, _, rest = rest.partition(".")
        rest = _first_replace(rest, _TV_CONVNEXT_BLOCK)
        return f"{prefix}stages.{index // 2}.blocks.{block}.{rest}", t.reshape(-1) if rest == "gamma" else t

    _rename_keys(sources, rename, "torchvision ConvNeXt layout (features.N, classifier.0/2) renamed to timm's (stem, "
                 "stages, head.norm, head.fc), which computes the same function")
    return True


#: timm Swin Transformers (v1) that torchvision's ``swin_t/s/b`` equal once renamed (the shapes decide)
TIMM_SWINS = ("swin_tiny_patch4_window7_224", "swin_small_patch4_window7_224", "swin_base_patch4_window7_224",
              "swin_large_patch4_window7_224")
_TV_SWIN_BLOCK = (("mlp.0.", "mlp.fc1."), ("mlp.3.", "mlp.fc2."))


def convert_torchvision_swin(sources: Sources) -> bool:
    """Rename torchvision's Swin Transformer (v1) keys (``features.0`` patch embedding,
    ``features.2i+1.J`` blocks, ``features.2i`` patch merging, ``norm``, ``head``) to timm's
    (``patch_embed``, ``layers.i.blocks.J``, ``layers.i.downsample``, ``norm``, ``head.fc``), which
    compute the same function (same qkv order, relative position bias tables, shifted windows,
    patch merging's 2x2 concatenation order and its norm before the reduction, exact GELU);
    torchvision's ``relative_position_index`` buffers are dropped (timm computes the same ones
    from the window size). True when it did."""
    import re

    marker = "features.1.0.attn.relative_position_bias_table"
    prefix = next((k[: -len(marker)] for k in sources.tensors if k.endswith(marker)), None)
    if prefix is None or prefix + "features.2.reduction.weight" not in sources.tensors:
        return False
    feature = re.compile(re.escape(prefix) + r"features\.(\d+)\.(.*)")
    top = ((prefix + "head.", prefix + "head.fc."),)

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor] | None:
        found = feature.fullmatch(key)
        if not found:
            return _first_replace(key, top), t
        if key.endswith(".attn.relative_position_index"):
            sources.ignored[key] = "Swin's relative position index (computed from the window size)"
            return None
        index, rest = int(found.group(1)), found.group(2)
        if index == 0:
            layer, _, rest = rest.partition(".")
            layer = {"0": "proj", "2": "norm"}.get(layer, layer)
            return f"{prefix}patch_embed.{layer}.{rest}", t
        if index % 2 == 0:
            return f"{prefix}layers.{index // 2}.downsample.{rest}", t
        block, _, rest = rest.partition(".")
        return f"{prefix}layers.{index // 2}.blocks.{block}.{_first_replace(rest, _TV_SWIN_BLOCK)}", t

    _rename_keys(sources, rename, "torchvision Swin layout (features.N, head) renamed to timm's (patch_embed, layers, "
                 "head.fc), which computes the same function")
    return True


def convert_torchvision_vit(sources: Sources) -> bool:
    """Rename a torchvision ``VisionTransformer``'s keys (``conv_proj``, ``class_token``,
    ``encoder.layers.encoder_layer_N``) to timm's layout, which computes the same function (same
    q/k/v order in one projection, LayerNorm eps 1e-6, exact GELU); True when it did."""
    marker = "encoder.layers.encoder_layer_0.ln_1.weight"
    prefix = next((k[: -len(marker)] for k in sources.tensors if k.endswith(marker)), None)
    if prefix is None:
        return False
    if prefix + "heads.pre_logits.weight" in sources.tensors:
        raise LayoutError("torchvision ViT with a representation layer (heads.pre_logits + Tanh): dmlviewer's "
                          "head cannot hold a Tanh")
    layers = prefix + "encoder.layers.encoder_layer_"

    def rename(key: str, t: torch.Tensor) -> tuple[str, torch.Tensor]:
        if key.startswith(layers):
            index, _, rest = key[len(layers):].partition(".")
            return f"{prefix}blocks.{index}.{_first_replace(rest, _TV_VIT_BLOCK)}", t
        if key.startswith(prefix):
            return prefix + _first_replace(key[len(prefix):], _TV_VIT_TOP), t
        return key, t

    _rename_keys(sources, rename, "torchvision ViT layout (conv_proj, encoder.layers) renamed to timm's, which "
                 "computes the same function")
    return True


HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
#: ``model_args`` of a timm ``config.json`` that do not change the key layout or the function
_HF_HARMLESS_ARGS = {"img_size", "num_classes", "in_chans", "global_pool"}


def _triple(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 3 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)


def read_hf_folder(folder: str | os.PathLike) -> tuple[str, dict]:
    """A timm Hugging Face folder (``config.json`` + ``model.safetensors`` or
    ``pytorch_model.bin``, as ``timm``'s ``save_for_hf``/``push_to_hub`` write it): ``(weights
    file, {"arch", "pooling", "image_size", "mean", "std"})`` read from the config (values it
    does not hold are None). ``LayoutError`` (one line) for a folder that is not one, or whose
    ``model_args`` change the architecture beyond what its name builds."""
    import json

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
        raise LayoutError(f"{config_file} names no timm architecture (\"architecture\"): give --arch")
    args = config.get("model_args") or {}
    if not isinstance(args, dict):
        args = {}
    changed = sorted(set(args) - _HF_HARMLESS_ARGS)
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
    info = {"arch": f"timm:{arch.split('.')[0]}", "pooling": pooling,
            "image_size": int(size[-1]) if _triple(size) else None,
            "mean": [float(v) for v in cfg["mean"]] if _triple(cfg.get("mean")) else None,
            "std": [float(v) for v in cfg["std"]] if _triple(cfg.get("std")) else None}
    return str(weights), info


# --------------------------------------------------------------------------- candidates

@dataclass(frozen=True)
class Candidate:
    """A known architecture as the importer sees it (built once on the meta device)."""

    name: str
    keys: dict[str, tuple[int, ...]]      # backbone state-dict keys -> shape (classifier-less)
    ignored_prefixes: tuple[str, ...]      # auxiliary classifiers: keys ignored when present
    head: tuple[tuple[str, str], ...]      # the original net's modules after the features: (path, type)
    head_modules: dict[str, nn.Module]     # those modules (meta), to classify parameterless ones
    pool: str                              # gap, gmp, or the name of an unsupported pooling
    nonnegative: bool                      # the last map is a ReLU's output
    channels: int
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    image_size: int = 224
    vit: "ViTLayout | None" = None         # vision transformers: what the keys cannot show


@dataclass(frozen=True)
class ViTLayout:
    """A timm vision transformer as the importer sees it: ``pos_embed`` is matched for any grid."""

    patch: int
    prefix_tokens: int        # class + register + distillation tokens
    embed_class: bool         # position embeddings cover the prefix tokens (not timm's no_embed_class)
    heads: int
    distilled: bool

    def grid(self, pos_embed: torch.Tensor) -> int | None:
        """The side of the square grid ``pos_embed`` (1 x T x C) was made for, or None."""
        if pos_embed.dim() != 3:
            return None
        n = pos_embed.shape[1] - (self.prefix_tokens if self.embed_class else 0)
        side = int(round(max(n, 0) ** 0.5))
        return side if side > 0 and side * side == n else None


def _is_leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None


def _vit_candidate(name: str) -> Candidate:
    """A ``timm:NAME`` vision transformer built on the meta device without classifier."""
    from .timm_backbones import import_timm

    timm = import_timm()
    with torch.device("meta"):
        net = timm.create_model(name[5:], pretrained=False, num_classes=0)
    cfg = dict(getattr(net, "pretrained_cfg", {}) or {})
    keys = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    size = net.patch_embed.patch_size
    layout = ViTLayout(int(size[0] if isinstance(size, (tuple, list)) else size), int(net.num_prefix_tokens),
                       not getattr(net, "no_embed_class", False), int(net.blocks[0].attn.num_heads),
                       getattr(net, "dist_token", None) is not None)
    mean = tuple(float(v) for v in cfg.get("mean", (0.485, 0.456, 0.406)))
    std = tuple(float(v) for v in cfg.get("std", (0.229, 0.224, 0.225)))
    return Candidate(name, keys, ("head_dist.",) if layout.distilled else (), (), {}, "token", False,
                     int(net.embed_dim), mean, std, int(cfg.get("input_size", (3, 224, 224))[-1]), layout)


@lru_cache(maxsize=None)
def candidate(name: str) -> Candidate:
    """Build ``name`` on the meta device and read its keys, head and pooling (``ValueError``
    for a name that is neither in ``BACKBONES`` nor a resolvable ``timm:NAME``)."""
    from .vit import timm_vit_name

    if timm_vit_name(name):
        return _vit_candidate(name)
    try:
        spec = BACKBONES[name]  # ValueError for a timm:NAME that is not a CNN, or without timm
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; choose from {', '.join(BACKBONES)} or timm:NAME") from None
    mean, std, size = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 224
    if name.startswith("timm:"):
        from .timm_backbones import timm_info

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


def candidate_names(arch: str | None = None, keys: Sequence[str] = (),
                    shapes: dict[str, tuple[int, ...]] | None = None) -> list[list[str]]:
    """The candidates in the order they are tried: ``[[arch]]``, or the built-in backbones and
    then, when timm is installed, the timm shortlists. The shortlist is tried only when no built-in
    one fits: no shortlist model holds every key of a built-in one (test_importer.py checks it).
    Files whose ``keys`` hold position embeddings try the vision transformers first, ConvNeXt
    files the timm ConvNeXts of their stem width (``shapes``: key -> shape) first."""
    if arch:
        return [[arch]]
    from .timm_backbones import timm_available

    stages = [list(BACKBONES)]
    if timm_available():
        vits = [f"timm:{n}" for n in TIMM_VIT_SHORTLIST]
        stages.append([f"timm:{n}" for n in TIMM_SHORTLIST])
        if any(k == "pos_embed" or k.endswith(".pos_embed") for k in keys):
            stages.insert(0, vits)
        elif any(k.endswith("s1.b1.conv1.conv.weight") for k in keys):  # a RegNet (torchvision's, renamed)
            stages.insert(0, [f"timm:{n}" for n in TIMM_REGNETS])
        elif any(k.endswith("stages.0.blocks.0.conv_dw.weight") for k in keys) and any(
                k.endswith("stages.0.blocks.0.gamma") for k in keys):  # a ConvNeXt (torchvision's, renamed)
            widths = {v[0] for k, v in (shapes or {}).items() if k.endswith("stem.0.weight") and len(v) == 4}
            stages.insert(0, [f"timm:{n}" for n in TIMM_CONVNEXTS if not widths or _CONVNEXT_STEM[n] in widths])
        elif any(k.endswith("layers.0.blocks.0.attn.relative_position_bias_table") for k in keys):  # a Swin
            stages.insert(0, [f"timm:{n}" for n in TIMM_SWINS])
        else:
            stages[-1] += vits
    return stages


@dataclass(frozen=True)
class Match:
    """``candidate``'s backbone keys found in the sources under ``prefix``."""

    name: str
    prefix: str
    matched: tuple[str, ...]         # candidate keys present with the right shape
    mismatched: tuple[str, ...]      # present with another shape
    missing: tuple[str, ...]         # absent (num_batches_tracked not counted)
    scope: int                       # source keys under the prefix

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
        found.append(Match(cand.name, p, tuple(matched), tuple(mismatched), tuple(missing), scope))
    return sorted(found, key=lambda m: (len(m.matched), -len(m.missing)), reverse=True)


def match(cand: Candidate, tensors: dict[str, torch.Tensor], prefix: str | None = None) -> Match:
    """The best prefix under which ``cand``'s keys appear in ``tensors``, and what matched."""
    return matches(cand, tensors, prefix)[0]


# --------------------------------------------------------------------------- head

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


def _module_params(keys: Sequence[str], tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
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
    modules = _module_params(keys, sources.tensors)
    norms = _architecture_norms(cand, m, modules)
    unknown = {p: v for p, v in modules.items() if classify(v) is None and p not in norms}
    if unknown:
        path, params = next(iter(unknown.items()))
        rel = path[len(m.prefix):] if path.startswith(m.prefix) else None
        what = f" ({m.name}'s {rel} is a {dict(cand.head)[rel]})" if rel in dict(cand.head) else ""
        usable = [p for p in modules if p not in unknown]
        example = ",".join(usable) if 0 < len(usable) <= 4 else "none"
        raise LayoutError(
            f"cannot tell what {path or '(top level)'} ({_shapes(params)}) does{what}: it is not a Linear, "
            f"BatchNorm or GeM layer ({len(unknown)} such module(s)); give --head with the layers that make "
            f"the embedding, e.g. --head {example}",
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
                    "--head with its layers")
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


def _architecture_norms(cand: Candidate, m: Match, modules: dict[str, dict[str, torch.Tensor]]) -> dict[str, float]:
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


def _include_architecture_norms(cand: Candidate, m: Match, layers: list[Layer], sources: Sources,
                                available: Sequence[str]) -> tuple[list[Layer], list[str]]:
    """A given head that names a layer of the architecture's head (``--head head.fc``) runs the
    architecture's LayerNorms before it too (timm/torchvision ConvNeXt's ``head.norm``): they are
    inserted where the architecture runs them, with a note; leaving one out would change the
    embedding (``_skipped_layers`` refuses that)."""
    norms = _architecture_norms(cand, m, _module_params(available, sources.tensors))
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
                    out.append(Layer("layernorm", path, dict(_module_params(available, sources.tensors)[path]),
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
    modules = _module_params(available, sources.tensors)
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
                raise LayoutError(f"--head {item}: give gem=NUMBER or gem=MODULE with a module holding p")
        elif item in modules and classify(modules[item]) in ("linear", "bn"):
            layers.append(Layer(classify(modules[item]), item, dict(modules[item]), note="given"))
        elif norms and item in norms:
            layers.append(Layer("layernorm", item, dict(modules[item]), note="given", eps=norms[item]))
        elif item in modules:
            raise LayoutError(f"--head {item}: {item} ({_shapes(modules[item])}) is not a Linear or BatchNorm layer")
        else:
            choices = [p for p, v in modules.items() if classify(v) in ("linear", "bn", "gem")]
            raise LayoutError(f"--head: no module {item!r} among the keys left after the backbone "
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
                  f"is the output of {after}; give --head to include it")


def _skipped_layers(cand: Candidate, m: Match, layers: list[Layer], force: bool) -> list[str]:
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
                                  "it; give --head none (the pooled feature), or --force to leave it out anyway")
            lines.append(f"LEFT OUT {kpath} ({ktype}; --force): the embedding differs from the source model's")
    return lines


def _apply_pooling(layers: list[Layer], pooling: str | None, gem_p: float | None) -> list[Layer]:
    """The layers with the pooling the user stated (``--pooling``/``--gem-p``) first."""
    pools = ("gap", "gmp", "gem")
    if pooling is None:
        if gem_p is not None:
            raise LayoutError("--gem-p needs --pooling gem")
        return layers
    pooling = pooling.lower()
    if pooling not in pools:
        raise LayoutError(f"--pooling must be one of {', '.join(pools)}, got {pooling!r}")
    if layers and layers[0].kind in pools and layers[0].note == "given":
        raise LayoutError("the pooling is given twice (--pooling and first in --head): give it once")
    found = layers[0] if layers and layers[0].kind == "gem" else None  # a GeM p in the files
    rest = layers[1:] if layers and layers[0].kind in pools else list(layers)
    if pooling != "gem":
        if gem_p is not None:
            raise LayoutError("--gem-p needs --pooling gem")
        return [Layer(pooling, note="given")] + rest
    if gem_p is None:
        if found is None:
            raise LayoutError("--pooling gem needs --gem-p P: the files hold no GeM exponent")
        return [found] + rest
    if not (0 < gem_p <= 100):
        raise LayoutError(f"--gem-p must be in (0, 100], got {gem_p:g}")
    return [Layer("gem", None, {"p": torch.tensor(float(gem_p))}, note="given")] + rest


# --------------------------------------------------------------------------- folding

@dataclass
class FoldedHead:
    """dmlviewer's head stack for the layers: ``pooling``, ``gem_p``, ``bn`` (BatchNorm tensors or
    None), ``hidden``/``out`` ((W, b) float64 or None), the source modules each came from
    (``sources``: target -> module names) and what folding did (``notes``)."""

    pooling: str
    gem_p: float | None
    bn: dict[str, torch.Tensor] | None
    hidden: tuple[torch.Tensor, torch.Tensor] | None
    out: tuple[torch.Tensor, torch.Tensor] | None
    notes: list[str]
    sources: dict[str, list[str]] = field(default_factory=dict)
    stack: list[Layer] | None = None      # a head kept layer by layer (LayerNorm, Hardswish, ...)
    stack_spec: list[str] = field(default_factory=list)  # its ``head_layers`` config value

    @property
    def dim(self) -> int:
        """The embedding's width (0: the pooled feature)."""
        if self.stack is not None:
            linears = [la for la in self.stack if la.kind == "linear"]
            return int(linears[-1].params["weight"].shape[0]) if linears else 0
        return int(self.out[0].shape[0]) if self.out is not None else 0


def _stack_head(layers: list[Layer], pooling: str, gem_p: float | None, notes: list[str]) -> FoldedHead:
    """The layers kept one by one (projection.LayerStack) when one is not piecewise linear: a
    LayerNorm on the pooled vector or a Hardswish/GELU/Tanh between Linears cannot fold into
    dmlviewer's exact head, and explanations decompose it by the first-order rule."""
    ops = [la for la in layers if la.kind != "identity"]
    spec, sources = [], {}
    for i, layer in enumerate(ops):
        if layer.kind == "linear":
            spec.append(f"linear:{layer.params['weight'].shape[0]}")
        elif layer.kind == "layernorm":
            spec.append(f"layernorm:{layer.eps!r}")
        elif layer.kind == "bn":
            spec.append(f"batchnorm:{BN_EPS!r}")
        else:
            spec.append(layer.kind)
        if layer.module is not None:
            sources[f"layers.{i}"] = [layer.module]
    kept = list(dict.fromkeys(la.kind for la in ops if la.kind in STACK_KINDS))
    nonlinear = [k for k in kept if k != "layernorm"]
    how = ("explanations decompose it by the first-order rule (gradient x activation at each input, the "
           f"remainder in the bias; {', '.join(nonlinear)} not piecewise linear), not exactly" if nonlinear else
           "explanations decompose it exactly with the LayerNorm scale frozen at each input")
    notes.append(f"the head holds {', '.join(kept)}, which dmlviewer's folded head cannot: it is kept layer by "
                 f"layer (head.projection.layers, the same function) and {how}")
    return FoldedHead(pooling, gem_p, None, None, None, notes, sources, ops, spec)


def _affine(layer: Layer, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, b) float64 of a linear or eval-mode BatchNorm layer (BN eps ``BN_EPS``)."""
    p = {k: v.detach().double() for k, v in layer.params.items()}
    if layer.kind == "linear":
        w = p["weight"].reshape(p["weight"].shape[0], -1)
        return w, p.get("bias", torch.zeros(w.shape[0], dtype=torch.float64))
    scale = torch.rsqrt(p["running_var"] + BN_EPS) * p.get("weight", torch.ones(dim, dtype=torch.float64))
    shift = p.get("bias", torch.zeros(dim, dtype=torch.float64)) - p["running_mean"] * scale
    return torch.diag(scale), shift


def _compose(run: list[Layer], dim: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    w = torch.eye(dim, dtype=torch.float64)
    b = torch.zeros(dim, dtype=torch.float64)
    for layer in run:
        lw, lb = _affine(layer, w.shape[0])
        w, b = lw @ w, lw @ b + lb
    return w, b, w.shape[0]


def fold_head(layers: list[Layer], channels: int, pooling: str, nonnegative: bool) -> FoldedHead:
    """Fold the layer sequence into dmlviewer's head (module docstring, step 4); ``LayoutError``
    when its sizes do not chain or its shape cannot be represented exactly."""
    notes: list[str] = []
    gem_p = None
    layers = list(layers)
    if layers and layers[0].kind in ("gap", "gmp", "gem"):
        first = layers.pop(0)
        pooling = first.kind
        if first.kind == "gem":
            gem_p = float(first.params["p"].reshape(-1)[0])
    dim = channels
    for layer in layers:
        if layer.kind == "linear":
            w = layer.params["weight"]
            if w.shape[1] != dim:
                raise LayoutError(f"head layer {layer.module} takes {w.shape[1]} inputs but receives {dim}"
                                  + (" (the pooled feature)" if dim == channels else ""))
            dim = w.shape[0]
        elif layer.kind == "bn" and layer.params["running_mean"].numel() != dim:
            raise LayoutError(f"head layer {layer.module} normalizes {layer.params['running_mean'].numel()} "
                              f"features but receives {dim}")
        elif layer.kind == "layernorm" and layer.params["weight"].numel() != dim:
            raise LayoutError(f"head layer {layer.module} normalizes {layer.params['weight'].numel()} "
                              f"features but receives {dim}")
        elif layer.kind in ("gem", "gap", "gmp"):
            raise LayoutError(f"a pooling ({layer.kind}) can only come first in the head")
    if any(la.kind in STACK_KINDS for la in layers):
        if any(la.kind == "bn" for la in layers):
            notes.append(f"BatchNorm eps assumed {BN_EPS:g} (PyTorch's default; weights files do not store it)")
        return _stack_head(layers, pooling, gem_p, notes)
    ops = [la for la in layers if la.kind != "identity"]
    if any(la.kind == "bn" for la in ops):
        notes.append(f"BatchNorm eps assumed {BN_EPS:g} (PyTorch's default; weights files do not store it)")
    if ops and ops[0].kind == "relu" and (nonnegative or pooling == "gem"):
        why = "GeM output" if pooling == "gem" else "pooled output of a ReLU"
        notes.append(f"the ReLU right after the pooling changes nothing on the non-negative {why}: left out")
        ops.pop(0)
    runs: list[list[Layer]] = [[]]
    for layer in ops:
        if layer.kind == "relu":
            if runs[-1] or len(runs) == 1:
                runs.append([])
        else:
            runs[-1].append(layer)
    if len(runs) > 2:
        raise LayoutError(f"the head has {len(runs) - 1} ReLU layers: dmlviewer's head holds at most one "
                          "hidden FC+ReLU layer, so it cannot reproduce this one exactly")
    bn = None
    first = runs[0]
    sources: dict[str, list[str]] = {}
    if first and first[0].kind == "bn" and any(la.kind == "linear" for la in first[1:] + sum(runs[1:], [])):
        if len(first) == 1 or any(la.kind == "linear" for la in first[1:]) or len(runs) == 1:
            bn = dict(first[0].params)
            sources["bn"] = [first[0].module]
            first = first[1:]

    def fold(run: list[Layer], width: int, target: str) -> tuple[torch.Tensor, torch.Tensor]:
        sources[target] = [la.module for la in run]
        if len(run) > 1:
            notes.append(f"{' + '.join(la.module or la.kind for la in run)} folded exactly into "
                         f"head.projection.{target}")
        w, b, _ = _compose(run, width)
        return w, b

    if len(runs) == 1:
        if not first:
            return FoldedHead(pooling, gem_p, bn, None, None, notes, sources)
        if all(la.kind == "bn" for la in first) and bn is None:  # dim 0 with BatchNorm
            sources["bn"] = [la.module for la in first]
            if len(first) == 1:
                return FoldedHead(pooling, gem_p, dict(first[0].params), None, None, notes, sources)
            w, b, _ = _compose(first, channels)
            notes.append(f"{' + '.join(sources['bn'])} folded exactly into one BatchNorm")
            return FoldedHead(pooling, gem_p, _bn_from_affine(w, b), None, None, notes, sources)
        return FoldedHead(pooling, gem_p, bn, None, fold(first, channels, "out"), notes, sources)
    second = runs[1]
    if not second:
        raise LayoutError("the head ends with a ReLU: dmlviewer's head ends with a linear layer, so it cannot "
                          "reproduce this one exactly")
    if not first:
        hidden = (torch.eye(channels, dtype=torch.float64), torch.zeros(channels, dtype=torch.float64))
        sources["hidden"] = []
        notes.append("the ReLU right after the pooling is kept exactly as an identity hidden layer "
                     f"({channels} units): the pooled feature may be negative")
    else:
        hidden = fold(first, channels, "hidden")
    return FoldedHead(pooling, gem_p, bn, hidden, fold(second, hidden[0].shape[0], "out"), notes, sources)


def _bn_from_affine(w: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    """BatchNorm tensors computing ``diag(w) z + b`` (running_var = 1 - eps, so the scale is 1)."""
    scale = torch.diagonal(w)
    return {"weight": scale.float(), "bias": b.float(), "running_mean": torch.zeros_like(scale).float(),
            "running_var": torch.full_like(scale, 1.0 - BN_EPS).float()}


def reference_head(layers: list[Layer], z: torch.Tensor) -> torch.Tensor:
    """The source layers applied one after another to pooled features ``z`` (float32, eval mode)."""
    for layer in layers:
        p = {k: v.float() for k, v in layer.params.items()}
        if layer.kind == "linear":
            z = nn.functional.linear(z, p["weight"].reshape(p["weight"].shape[0], -1), p.get("bias"))
        elif layer.kind == "bn":
            z = nn.functional.batch_norm(z, p["running_mean"], p["running_var"], p.get("weight"),
                                         p.get("bias"), False, 0.0, BN_EPS)
        elif layer.kind == "layernorm":
            z = nn.functional.layer_norm(z, z.shape[-1:], p.get("weight"), p.get("bias"), layer.eps)
        elif layer.kind == "relu":
            z = torch.relu(z)
        elif layer.kind == "hardswish":
            z = nn.functional.hardswish(z)
        elif layer.kind == "gelu":
            z = nn.functional.gelu(z)
        elif layer.kind == "tanh":
            z = torch.tanh(z)
    return z


# --------------------------------------------------------------------------- plan

@dataclass
class ImportPlan:
    """What an import will do; ``report()`` is the text the CLI prints and the dialog shows."""

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
        if c["head_layers"]:
            return " -> ".join(parts + c["head_layers"])
        if c["bn"]:
            parts.append("BatchNorm")
        if c["hidden"]:
            parts.append(f"Linear {c['hidden']} + ReLU")
        parts.append(f"Linear {c['dim']}" if c["dim"] else "no projection")
        return " -> ".join(parts)

    def report(self, full_mapping: bool = False) -> str:
        """Several lines: the recognized architecture, head, mapping, unmatched keys, notes."""
        m = self.match
        lines = [f"architecture: {self.arch}" + (f" (keys under {m.prefix!r})" if m.prefix else "")
                 + f", {len(m.matched)} backbone keys matched"]
        if self.equivalents:
            lines.append(f"  also fits {', '.join(self.equivalents)}, which compute the same features")
        lines.append(f"head ({'proposed' if self.head_auto else 'given'}): --head {self.head_spec}")
        for layer in self.layers:
            lines.append(f"  {layer.describe()}")
        dim = self.config["dim"] or candidate(self.arch).channels
        lines.append(f"dmlviewer model: {self.arch} -> {self.summary()} (embedding dimension {dim})")
        lines.append(f"decomposition rule: {self.rule_line()}")
        lines.append(f"input: {self.config['image_size']} px, mean {_fmt(self.config['mean'])}, "
                     f"std {_fmt(self.config['std'])} (check them against your training code)")
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
        lines.append(self.assumption_line())
        return "\n".join(lines)

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

    def assumption_line(self) -> str:
        """One line: what the weights files cannot tell and the import assumed."""
        if not self.assumptions:
            return "ASSUMED: nothing (every choice was given or read from the files)"
        return ("ASSUMED (the weights cannot tell; check these or state them with options): "
                + "; ".join(self.assumptions))


def _fmt(values) -> str:
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"


def _features_close(a: str, b: str, m: Match, sources: Sources) -> bool:
    """Whether architectures ``a`` and ``b`` compute the same last map with the files' weights."""
    from .backbones import Backbone

    if candidate(a).vit is not None or candidate(b).vit is not None:
        return False  # same keys, another head count: the file cannot tell (--arch)
    x = torch.randn(1, 3, 128, 128, generator=torch.Generator().manual_seed(0))
    outs = []
    for name in (a, b):
        net = Backbone(name, None, 128).eval()
        state = {k: sources.tensors[m.prefix + k] for k in net.net.state_dict() if m.prefix + k in sources.tensors}
        net.net.load_state_dict(state, strict=False)
        with torch.no_grad():
            outs.append(net(x)["last"])
    if outs[0].shape != outs[1].shape:
        return False
    return bool(torch.allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4 * float(outs[0].abs().max()) + 1e-6))


def _timm_twins(name: str) -> list[str]:
    """timm models sharing ``name``'s layout with another padding (``tf_`` variants)."""
    if not name.startswith("timm:"):
        return []
    from .timm_backbones import import_timm

    base = name[5:]
    twin = base[3:] if base.startswith("tf_") else f"tf_{base}"
    return [f"timm:{twin}"] if import_timm().is_model(twin) else []


def shape_overlap(cand: Candidate, tensors: dict[str, torch.Tensor]) -> float:
    """Share of ``cand``'s backbone tensors whose shapes occur in ``tensors`` (as multisets): how
    close a file is to an architecture whatever its key names (renamed modules)."""
    have = Counter(tuple(t.shape) for t in tensors.values())
    need = Counter(s for k, s in cand.keys.items() if not k.endswith("num_batches_tracked"))
    return sum((have & need).values()) / max(sum(need.values()), 1)


def _layout_error(what: str, sources: Sources, ranking: list[Match]) -> LayoutError:
    """One line: ``what``, the closest layouts ranked by key overlap plus tensor-shape overlap
    (which finds an architecture whose modules were renamed), the unmatched keys."""
    scored = sorted(((mm.jaccard + shape_overlap(candidate(mm.name), sources.tensors), mm) for mm in ranking),
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


def _recognize(sources: Sources, arch: str | None, prefix: str | None,
               cancel: CancelToken | None) -> Iterator[Progress | tuple[Match, list[Match], list[str]]]:
    """Step 2 of the module docstring; the last item is ``(match, ranking, equivalents)``."""
    stages = candidate_names(arch, list(sources.tensors), {k: tuple(t.shape) for k, t in sources.tensors.items()})
    total = sum(len(stage) for stage in stages)
    found: list[Match] = []
    for stage in stages:
        for name in stage:
            if cancel is not None:
                cancel.raise_if_cancelled()
            yield Progress("step", len(found), total, f"trying {name}")
            try:
                cand = candidate(name)
            except (ValueError, ImportError) as exc:
                if arch:
                    raise LayoutError(f"--arch {arch}: {exc}") from None
                log.debug("candidate %s unavailable: %s", name, exc)
                continue
            found.append(match(cand, sources.tensors, prefix))
        if any(mm.full for mm in found):
            break
    ranking = sorted(found, key=lambda mm: mm.jaccard, reverse=True)
    full = [mm for mm in found if mm.full]
    if not full:
        raise _layout_error(f"--arch {arch} does not fit" if arch else "unknown layout: no known architecture fits",
                            sources, ranking)
    most = max(len(mm.matched) for mm in full)
    best = [mm for mm in full if len(mm.matched) == most]
    chosen, equivalents = best[0], []
    copies = [mm.prefix for mm in matches(candidate(chosen.name), sources.tensors, prefix) if mm.full]
    if len(copies) > 1:
        raise LayoutError(f"the files hold {chosen.name} under several prefixes ({', '.join(map(repr, copies))}): "
                          "choose one with --prefix")
    if arch:
        yield chosen, ranking, equivalents
        return
    larger = [mm for mm in found if not mm.full and len(mm.matched) > most]
    if larger:
        raise _layout_error(f"the keys fit {chosen.name} but hold more layers of the same kind (a larger network "
                            f"with keys missing or reshaped?); give --arch {chosen.name} if it is one", sources,
                            sorted(larger, key=lambda mm: len(mm.matched), reverse=True))
    for twin in _timm_twins(chosen.name):
        try:
            tm = match(candidate(twin), sources.tensors, chosen.prefix)
        except (ValueError, ImportError):
            continue
        if tm.full and len(tm.matched) == most:
            best.append(tm)
    different = []
    for other in best[1:]:
        yield Progress("step", total, total, f"comparing {chosen.name} with {other.name}")
        if _features_close(chosen.name, other.name, chosen, sources):
            equivalents.append(other.name)
        else:
            different.append(other.name)
    if different:
        raise LayoutError(f"the layout fits {' and '.join([chosen.name] + different)}, which compute different "
                          f"features with these weights (padding, normalization): choose one with --arch")
    yield chosen, ranking, equivalents


def analyze(paths: Sequence[str | os.PathLike], arch: str | None = None, head: str = "auto",
            prefix: str | None = None, image_size: int | None = None,
            mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
            cancel: CancelToken | None = None, pooling: str | None = None, gem_p: float | None = None,
            force: bool = False) -> Iterator[Progress]:
    """Generator: read, recognize, propose and fold (module docstring, steps 1-4); the ``done``
    event's result is an :class:`ImportPlan`. ``pooling`` (gap, gmp, gem) and ``gem_p`` state the
    pooling a weights file cannot tell; ``force`` leaves out a layer of the architecture that the
    head skips (else refused). ``LayoutError`` (one line) when the layout is not recognized or the
    head cannot be represented; ``CheckpointError``/``FileNotFoundError`` for unreadable files."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    hf_notes = []
    head_pools = head.strip().lower().split(",")[0].split("=")[0] in ("gap", "gmp", "gem")  # --head gives it
    if any(Path(p).is_dir() for p in paths):
        if len(paths) > 1:
            raise LayoutError("give a Hugging Face folder alone, not with other weights files")
        weights, hf = read_hf_folder(paths[0])
        paths = [weights]
        arch = arch or hf["arch"]
        pooling = pooling or (None if head_pools else hf["pooling"])
        image_size, mean, std = image_size or hf["image_size"], mean or hf["mean"], std or hf["std"]
        hf_notes.append(f"config.json: architecture {hf['arch']}, pooling {hf['pooling'] or 'not given'}, input "
                        f"{hf['image_size'] or 'not given'} px, mean/std {'given' if hf['mean'] else 'not given'}")
    yield Progress("log", message=f"reading {len(paths)} file(s)")
    sources = read_sources(paths)
    sources.notes += hf_notes
    tv_vit = convert_torchvision_vit(sources)
    tv_regnet = convert_torchvision_regnet(sources)
    tv_convnext = convert_torchvision_convnext(sources)
    tv_swin = convert_torchvision_swin(sources)
    cirtorch = convert_cirtorch_resnet(sources)
    if cirtorch is not None and sources.meta:
        meta_pool, mean, std, meta_notes = _cirtorch_meta(sources.meta, bool(pooling) or head_pools, mean, std)
        pooling = pooling or meta_pool
        sources.notes += meta_notes
        for key in [k for k in sources.ignored if k.endswith("['meta']")]:
            sources.ignored[key] = "read for the pooling and input normalization (cnnimageretrieval's meta)"
    convert_dinov2_hub(sources)
    recognized = None
    for event in _recognize(sources, arch, prefix, cancel):
        if isinstance(event, Progress):
            yield event
        else:
            recognized = event
    m, ranking, equivalents = recognized
    cand = candidate(m.name)
    used = {m.prefix + k for k in cand.keys}
    rest = [k for k in sources.tensors if k not in used]
    unmatched: dict[str, str] = {}
    aux = tuple(m.prefix + p for p in cand.ignored_prefixes)
    for k in [k for k in rest if aux and k.startswith(aux)]:
        unmatched[k] = f"auxiliary classifier of {cand.name} (not part of the embedding)"
    distilled_heads = cand.vit is not None and cand.vit.distilled and any(k.startswith(aux) for k in unmatched)
    if distilled_heads:  # two classifiers averaged: their logits are not one Linear of the pooled tokens
        for k in [k for k in rest if k.startswith(m.prefix + "head.")]:
            unmatched[k] = "classifier of the class token (DeiT-distilled: averaged with head_dist)"
    for copy in matches(cand, sources.tensors):
        if copy.full and copy.prefix != m.prefix:  # e.g. a teacher beside the student chosen by --prefix
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
    if sources.files and len(sources.files) > 1:  # the backbone's file first, the others in the order given
        home = Counter(sources.origin[k] for k in used if k in sources.origin).most_common(1)[0][0]
        rest.sort(key=lambda k: (sources.origin[k] != home, sources.origin[k]))
    notes = list(sources.notes)
    assumptions: list[str] = []
    if head.strip().lower() == "auto":
        layers = propose_head(cand, m, sources, rest)
        layers, classifier = split_classifier(layers)
        if classifier:
            assumptions.append(classifier)
        head_auto = True
    else:
        layers = parse_head_spec(head, sources, rest, _architecture_norms(cand, m, _module_params(rest, sources.tensors)))
        layers, included = _include_architecture_norms(cand, m, layers, sources, rest)
        notes += included
        head_auto = False
    if distilled_heads and head_auto:
        assumptions.append("classifiers head and head_dist left out: the embedding is timm's pre_logits "
                           "(the mean of the class and distillation tokens)")
    assumptions += _skipped_layers(cand, m, layers, force)
    if cirtorch is not None:
        assumptions += _cirtorch_whitening(cirtorch, layers, force)
    if cand.vit is None:
        layers = _apply_pooling(layers, pooling, gem_p)
    elif layers and layers[0].kind == "gap" and not pooling:  # --head gap,...: the mean of the patch tokens
        layers, pooling = layers[1:], "gap"
    elif gem_p is not None or (pooling or "token").lower() not in ("token", "gap"):
        raise LayoutError(f"{cand.name} is a vision transformer: --pooling token (the class token) or gap "
                          "(the mean of the patch tokens after the final norm)")
    used_head = {f"{la.module}.{n}" for la in layers if la.module for n in la.params}
    for k in rest:
        if k not in used_head:
            unmatched[k] = "not part of the given head" if not head_auto else "not used"
    for layer in layers:
        if layer.note.startswith("assumed"):
            notes.append(f"a ReLU was {layer.note} (give --head to say otherwise)")
            assumptions.append(f"a ReLU {layer.note.split(',')[0].split(';')[0]}")
    for key, why in sources.ignored.items():
        unmatched[key] = why
    pool = cand.pool if cand.vit is None or not pooling else pooling.lower()
    explicit_pool = bool(layers and layers[0].kind in ("gap", "gmp", "gem")) or (cand.vit is not None
                                                                                 and bool(pooling))
    if cand.vit is not None and any(la.kind in ("gap", "gmp", "gem") for la in layers):
        raise LayoutError(f"{cand.name} is a vision transformer: give its pooling with --pooling token|gap")
    if cand.vit is not None and not explicit_pool:
        assumptions.insert(0, "pooling token (the class token, timm's default; a weights file does not store "
                              "it: --pooling gap for the mean of the patch tokens)")
    elif pool not in ("gap", "gmp") and not explicit_pool:
        raise LayoutError(f"{cand.name} pools with {pool}, which dmlviewer does not decompose; "
                          "give --pooling (gap, gmp or gem with --gem-p) if yours differs")
    elif not explicit_pool:
        assumptions.insert(0, f"pooling {pool} ({cand.name}'s own; a weights file does not store its pooling: "
                              "OML and retrieval models often use GeM, give --pooling gem --gem-p P)")
    folded = fold_head(layers, cand.channels, pool, cand.nonnegative)
    notes += folded.notes
    if folded.bn is not None or any(la.kind == "bn" for la in layers):
        assumptions.append(f"BatchNorm eps {BN_EPS:g}")
    spec_tokens = [la.token for la in layers]
    head_spec = ",".join(spec_tokens) if spec_tokens else "none"
    if cand.name in ("googlenet", "inception_v3"):
        notes.append(f"{cand.name}: torchvision's transform_input is applied (its default with ImageNet "
                     "weights); a network trained without it is timm:inception_v3 (give --arch)")
    last = next((la for la in reversed(layers) if la.kind == "linear"), None)
    if head_auto and last is not None and last.params["weight"].shape[0] > last.params["weight"].shape[1]:
        notes.append(f"{last.module} widens {last.params['weight'].shape[1]} -> {last.params['weight'].shape[0]}: "
                     "if it is a classifier rather than part of the embedding, leave it out with --head")
    size = int(image_size or cand.image_size)
    extra_config = {}
    default_mean, default_std = cand.mean, cand.std
    which = "timm's for this model" if cand.name.startswith("timm:") else "ImageNet's"
    if cand.vit is not None:
        grid = cand.vit.grid(sources.tensors[m.prefix + "pos_embed"])
        extra_config["token_grid"] = grid
        size = int(image_size or grid * cand.vit.patch)
        assumptions.append(f"{cand.vit.heads} attention heads ({cand.name[5:]}'s; a weights file does not store "
                           "them: give --arch timm:NAME if yours differ)")
        notes.append(f"position embeddings for a {grid}x{grid} grid ({grid * cand.vit.patch} px); other input "
                     "sizes interpolate them as timm's dynamic_img_size does")
    if tv_vit or tv_regnet or tv_convnext or tv_swin:
        default_mean, default_std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
        which = "ImageNet's (torchvision's)"
    if not image_size:
        assumptions.append(f"input {size} px" + (" (the position embeddings' grid)" if cand.vit else ""))
    if not mean or not std:
        assumptions.append(f"input normalization {which}")
    config = default_config(
        backbone=cand.name, pretrained=None, pooling=folded.pooling,
        gem_p=folded.gem_p if folded.gem_p is not None else 3.0, gem_learnable=True,
        bn=folded.bn is not None, hidden=int(folded.hidden[0].shape[0]) if folded.hidden is not None else 0,
        dim=folded.dim, head_layers=list(folded.stack_spec),
        image_size=size, mean=[float(v) for v in (mean or default_mean)],
        std=[float(v) for v in (std or default_std)], **extra_config)
    plan = ImportPlan(sources, cand.name, m, layers, folded, config, head_spec, head_auto, notes,
                      unmatched, ranking, equivalents, assumptions)
    yield Progress("done", data={"result": plan})


# --------------------------------------------------------------------------- building

def build_imported(plan: ImportPlan) -> EmbeddingModel:
    """The dmlviewer model of ``plan`` with the files' weights (eval mode, CPU)."""
    model = build_model(plan.config, "cpu", load_pretrained=False).eval()
    m = plan.match
    state = {}
    for k, target in model.backbone.net.state_dict().items():
        source = plan.sources.tensors.get(m.prefix + k)
        if source is None:  # an absent num_batches_tracked
            state[k] = torch.zeros_like(target)
        else:
            state[k] = source.detach().to(target.dtype)
    model.backbone.net.load_state_dict(state, strict=True)
    head, f = model.head, plan.folded
    with torch.no_grad():
        if f.pooling == "gem":
            head.pooling.p.copy_(torch.tensor(float(f.gem_p)))
        proj = head.projection
        for i, layer in enumerate(f.stack or []):
            for name, value in layer.params.items():
                if name != "num_batches_tracked":
                    target = getattr(proj.layers[i], name)
                    target.copy_(value.detach().reshape(target.shape).to(target.dtype))
        if f.bn is not None:
            for name in ("weight", "bias", "running_mean", "running_var"):
                if name in f.bn:
                    getattr(proj.bn, name).copy_(f.bn[name].reshape(-1))
            proj.bn.eps = BN_EPS
        if f.hidden is not None:
            proj.hidden.weight.copy_(f.hidden[0])
            proj.hidden.bias.copy_(f.hidden[1])
        if f.out is not None:
            proj.out.weight.copy_(f.out[0])
            proj.out.bias.copy_(f.out[1])
    return model


def check_head(plan: ImportPlan, model: EmbeddingModel, samples: int = 64) -> float:
    """Max |folded head - source layer sequence| on random pooled features (non-negative where
    the folding relied on it), relative to the largest output; the check that folding was exact."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(samples, model.backbone.channels, generator=g)
    if plan.config["pooling"] == "gem" or candidate(plan.arch).nonnegative:
        z = z.abs()
    layers = [la for la in plan.layers if la.kind not in ("gap", "gmp", "gem")]
    with torch.no_grad():
        ours, _ = model.head.projection(z)
        ref = reference_head(layers, z)
    return float((ours - ref).abs().max() / ref.abs().max().clamp(min=1e-12))


#: the largest reference file (``--check-against``), on disk and each of its arrays in memory:
#: a check needs a few preprocessed images, not thousands
MAX_REFERENCE_BYTES = 2 << 30


def _read_reference_npz(path: Path) -> dict:
    """``images`` and ``embeddings`` of a ``numpy.savez`` file, each array's header read first
    so that a header claiming a huge or non-numeric array is refused before anything is
    allocated (``allow_pickle=False``)."""
    import zipfile

    import numpy as np

    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"--check-against {path}: not a .npz archive (numpy.savez)")
    values = {}
    with zipfile.ZipFile(path) as archive:
        for key in ("images", "embeddings"):
            if f"{key}.npy" not in archive.namelist():
                continue
            with archive.open(f"{key}.npy") as member:
                fmt = np.lib.format
                reader = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(
                    fmt.read_magic(member))
                if reader is None:
                    raise CheckpointError(f"--check-against {path}: its {key} is in an .npy format version "
                                          "this reader does not take (numpy.savez writes 1.0)")
                shape, _, dtype = reader(member)
                if dtype.kind not in "biuf" or int(np.prod(shape, dtype=np.float64)) * dtype.itemsize > MAX_REFERENCE_BYTES:
                    raise CheckpointError(f"--check-against {path}: its {key} ({dtype} {list(shape)}) is not an "
                                          f"array of numbers of at most {MAX_REFERENCE_BYTES >> 30} GiB")
            with archive.open(f"{key}.npy") as member:
                values[key] = torch.from_numpy(np.array(np.lib.format.read_array(member, allow_pickle=False)))
    return values


def read_reference(path: str | os.PathLike) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images N x 3 x H x W, embeddings N x D)`` float32 from a reference file (``.npz``, or a
    ``.pt`` dict read with ``weights_only=True``) holding ``images`` (already preprocessed) and
    ``embeddings`` (the user's model's outputs on them); ``CheckpointError`` (one line) otherwise."""
    from dmlviewer.core.files import file_problem

    from .backbones import _load_error_reason

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(2, "not found", str(path))
    problem = file_problem(path, MAX_REFERENCE_BYTES)
    if problem:
        raise CheckpointError(f"--check-against {path}: {problem}")
    try:
        if path.suffix.lower() == ".npz":
            values = _read_reference_npz(path)
        else:
            values = torch.load(path, map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
    except MemoryError:
        raise CheckpointError(f"--check-against {path}: not enough memory to read it") from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one line
        raise CheckpointError(f"--check-against {path}: cannot read it ({_load_error_reason(exc)[:200]}); nothing "
                              "in it was run") from None
    if not isinstance(values, dict) or not all(isinstance(values.get(k), torch.Tensor)
                                               for k in ("images", "embeddings")):
        raise CheckpointError(f"--check-against {path}: give a .npz or .pt holding the tensors 'images' "
                              "(N x 3 x H x W, preprocessed) and 'embeddings' (N x D, your model's outputs)")
    images, embeddings = values["images"].float(), values["embeddings"].float()
    if images.dim() != 4 or images.shape[1] != 3 or embeddings.dim() != 2 or images.shape[0] != embeddings.shape[0] \
            or images.shape[0] == 0:
        raise CheckpointError(f"--check-against {path}: images must be N x 3 x H x W and embeddings N x D with the "
                              f"same N, got {list(images.shape)} and {list(embeddings.shape)}")
    check_finite({"images": images, "embeddings": embeddings}, f"--check-against {path}")
    return images, embeddings


def compare_with_reference(model: EmbeddingModel, path: str | os.PathLike, tolerance: float = CHECK_TOLERANCE,
                           batch: int = 16) -> dict:
    """The imported model's embeddings on the reference's images against the reference's
    embeddings: ``relative_diff`` (max |ours - theirs| / max |theirs|, raw outputs),
    ``normalized_diff`` (the same after L2 normalization of both, for a model that normalizes),
    ``passed`` (either within ``tolerance``), ``compared`` (which one passed, or raw)."""
    images, theirs = read_reference(path)
    model.eval()
    with torch.no_grad():
        ours = torch.cat([model(images[i:i + batch]).embedding_raw.float() for i in range(0, len(images), batch)])
    if ours.shape != theirs.shape:
        raise CheckpointError(f"--check-against {path}: the reference's embeddings have {theirs.shape[1]} dimensions, "
                              f"the imported model's {ours.shape[1]} (check --head)")
    raw = float((ours - theirs).abs().max() / theirs.abs().max().clamp(min=1e-12))
    norm = float((nn.functional.normalize(ours, dim=1) - nn.functional.normalize(theirs, dim=1)).abs().max())
    compared = "raw" if raw <= tolerance else "normalized" if norm <= tolerance else "raw"
    return {"file": str(Path(path).resolve()), "images": int(len(images)), "relative_diff": raw,
            "normalized_diff": norm, "passed": raw <= tolerance or norm <= tolerance, "compared": compared,
            "tolerance": tolerance}


def describe_reference_check(check: dict) -> str:
    """One line for a ``compare_with_reference`` result."""
    where = f"embeddings vs. {Path(check['file']).name} ({check['images']} images)"
    numbers = (f"max relative difference {check['relative_diff']:.3g}, "
               f"{check['normalized_diff']:.3g} after L2 normalization")
    if check["passed"]:
        how = " (your model normalizes its outputs)" if check["compared"] == "normalized" else ""
        return f"{where}: {numbers}: they match within {check['tolerance']:g}{how}"
    return f"{where}: {numbers}: they DIFFER (above {check['tolerance']:g})"


def _checked_model(plan: ImportPlan, check_against: str | os.PathLike | None, force: bool,
                   option: str = "--check-against") -> tuple[EmbeddingModel, float]:
    """``(the built model, folding difference)``: the folded head checked against its source layers
    and, with ``check_against``, the model against the user's embeddings (``plan.reference_check``);
    ``LayoutError`` (nothing written) when either differs, the second unless ``force``."""
    model = build_imported(plan)
    diff = check_head(plan, model)
    if not diff <= CHECK_TOLERANCE:
        raise LayoutError(f"the folded head differs from the source layers by {diff:.3g} (relative): "
                          "not written")
    plan.reference_check = None
    if check_against is not None:
        check = compare_with_reference(model, check_against)
        if not check["passed"] and not force:
            where = "" if option == "--check-against" else f"{option}: "
            error = LayoutError(f"{where}{describe_reference_check(check)}: not written; check the pooling "
                                "(--pooling, --gem-p), the head (--head) and the input, or give --force to write "
                                "it anyway")
            error.reference_check = check  # the app words its own message from it
            raise error
        check["forced"] = not check["passed"]
        plan.reference_check = check
    return model, diff


def _import_record(plan: ImportPlan, diff: float) -> dict:
    """What ``extra["import"]`` records of one plan (sources and their hashes, choices, checks)."""
    from .checkpoint import file_sha256

    return {
        "sources": [{"path": str(Path(p).resolve()), "sha256": file_sha256(p)} for p in plan.sources.files],
        "arch": plan.arch, "prefix": plan.match.prefix, "head": plan.head_spec,
        "head_auto": plan.head_auto, "notes": list(plan.notes), "assumptions": list(plan.assumptions),
        "unmatched": dict(plan.unmatched), "head_check_relative_diff": diff,
        "reference_check": dict(plan.reference_check) if plan.reference_check else None,
    }


def write_checkpoint(plan: ImportPlan, out: str | os.PathLike, check_against: str | os.PathLike | None = None,
                     force: bool = False) -> tuple[Path, float]:
    """Build, check and save the imported model atomically; returns ``(path, relative difference
    of the folded head from its own source layers)`` (a check of the folding, not of the model
    against the user's). ``check_against``: a reference file (``read_reference``) whose embeddings
    the written model must reproduce within ``CHECK_TOLERANCE``, else ``LayoutError`` (nothing
    written) unless ``force``; the result is ``plan.reference_check`` and in the checkpoint."""
    from .checkpoint import save_checkpoint

    model, diff = _checked_model(plan, check_against, force)
    path = save_checkpoint(out, model, epoch=0, extra={"import": _import_record(plan, diff)})
    log.info("imported %s as %s (%s)", ", ".join(plan.sources.files), plan.arch, plan.summary())
    if plan.reference_check and plan.reference_check["forced"]:
        log.warning("written with --force although %s", describe_reference_check(plan.reference_check))
    return path, diff


# --------------------------------------------------------------------------- two branches (issue 25)

def plan_dim(plan: ImportPlan) -> int:
    """The embedding width ``plan`` writes (its projection's, else the backbone's channels)."""
    return int(plan.config["dim"] or candidate(plan.arch).channels)


def check_two_branch_plans(query: ImportPlan, reference: ImportPlan,
                           hint: str = "check --head and --reference-head") -> None:
    """``LayoutError`` (one line) when the two imported branches cannot share one embedding space:
    their embedding widths differ (a similarity between them would be undefined). ``hint`` ends
    the line: what to change, in the words of the door (options, or the app's fields)."""
    dq, dr = plan_dim(query), plan_dim(reference)
    if dq != dr:
        raise LayoutError(f"the two branches must embed into one space: the query branch ({query.arch}, "
                          f"{query.summary()}) gives {dq} dimensions, the reference branch ({reference.arch}, "
                          f"{reference.summary()}) {dr}; {hint}")


#: a reference-branch option -> the name of the query option it defaults to (the command line's)
TWO_BRANCH_INHERITED = {"arch": "--arch", "head": "--head", "prefix": "--prefix", "mean": "--mean", "std": "--std",
                        "pooling": "--pooling", "gem_p": "--gem-p"}


def analyze_two_branch(query_paths: Sequence[str | os.PathLike], reference_paths: Sequence[str | os.PathLike],
                       query_options: dict, reference_options: dict | None = None,
                       query_shape: Sequence[int] | None = None, reference_shape: Sequence[int] | None = None,
                       force: bool = False, cancel: CancelToken | None = None,
                       names: dict | None = None, not_given: str = "no --reference-* option gave them",
                       ) -> tuple[ImportPlan, ImportPlan, dict]:
    """Both branches' plans of a two-branch import (issue 25) and their input shapes:
    ``(query plan, reference plan, {"query": (h, w), "reference": (h, w)})``.

    ``query_options``/``reference_options``: :func:`analyze` keyword arguments (``arch``,
    ``head``, ``prefix``, ``mean``, ``std``, ``pooling``, ``gem_p``); a reference option that is
    ``None`` is the query's, said in the reference plan's assumptions (``names``: how the door
    calls each option, default the command line's; ``not_given``: why the query's was taken).
    The shapes are ``(h, w)`` or ``None`` (the branch's architecture's side). The reference is
    read first (each file set is read before any report); a ``LayoutError`` says which branch."""
    reference_options = reference_options or {}
    names = {**TWO_BRANCH_INHERITED, **(names or {})}
    chosen, inherited = {}, []
    for key in TWO_BRANCH_INHERITED:
        own, query_value = reference_options.get(key), query_options.get(key)
        if own is None and query_value is not None and not (key == "head" and query_value == "auto"):
            inherited.append(names[key])
        chosen[key] = own if own is not None else query_value
    chosen["head"] = chosen["head"] or "auto"
    query_kwargs = {key: query_options.get(key) for key in TWO_BRANCH_INHERITED}
    query_kwargs["head"] = query_kwargs["head"] or "auto"
    try:
        side = "reference"
        reference = run_to_end(analyze(reference_paths, image_size=max(reference_shape) if reference_shape else None,
                                       force=force, cancel=cancel, **chosen))
        side = "query"
        query = run_to_end(analyze(query_paths, image_size=max(query_shape) if query_shape else None,
                                   force=force, cancel=cancel, **query_kwargs))
    except LayoutError as exc:  # which branch's files were not understood
        raise LayoutError(f"{side} branch: {exc}", exc.ranking, exc.unmatched) from None
    if inherited:  # said in the reference branch's report, as what was assumed for it
        reference.assumptions.append(f"the query's {', '.join(inherited)} ({not_given})")
    shapes = {"query": tuple(query_shape) if query_shape else (query.config["image_size"],) * 2,
              "reference": tuple(reference_shape) if reference_shape else (reference.config["image_size"],) * 2}
    return query, reference, shapes


def two_branch_report(query: ImportPlan, reference: ImportPlan, shapes: dict, full_mapping: bool = False) -> str:
    """The report of a two-branch import: each branch's report (what was recognized and ASSUMED
    for that branch, indented), then the two-branch model it makes."""
    lines = []
    for side, plan in (("query", query), ("reference", reference)):
        lines.append(f"{side} branch:")
        (h, w), size = shapes[side], plan.config["image_size"]
        lines += [f"  {line}".replace(f"input: {size} px,", f"input: {h}x{w} px,", 1)
                  for line in plan.report(full_mapping).splitlines()]
    (hq, wq), (hr, wr) = shapes["query"], shapes["reference"]
    lines.append(f"two-branch model: query {query.arch} at {hq}x{wq} px, reference {reference.arch} at "
                 f"{hr}x{wr} px, one embedding space of {plan_dim(query)} dimensions")
    return "\n".join(lines)


def write_two_branch_checkpoint(query: ImportPlan, reference: ImportPlan, out: str | os.PathLike,
                                shapes: dict, check_against: Sequence = (None, None),
                                force: bool = False) -> tuple[Path, float]:
    """Build both branches (each checked as :func:`write_checkpoint` checks one; ``check_against``
    is a ``(query file, reference file)`` pair, either ``None``) and save one two-branch checkpoint
    (:mod:`.two_branch`: config ``branches`` + ``input_shapes``, keys ``query.``/``reference.``)
    atomically. ``shapes``: ``{"query": (h, w), "reference": (h, w)}``. Returns ``(path, the
    larger folding difference)``; ``LayoutError`` when the embedding widths differ."""
    from .checkpoint import save_checkpoint
    from .two_branch import TwoBranchModel, check_two_branch_config

    check_two_branch_plans(query, reference)
    options = ("--check-against", "--reference-check-against")
    built = [_checked_model(plan, path, force, option)
             for plan, path, option in zip((query, reference), check_against, options)]
    for (model, _), side in zip(built, ("query", "reference")):
        model.config["image_size"] = max(shapes[side])  # as check_two_branch_config records it
    try:
        model = TwoBranchModel(built[0][0], built[1][0], input_shapes=dict(shapes)).eval()
        check_two_branch_config(model.config)
    except ValueError as exc:
        raise LayoutError(str(exc)) from None
    extra = {"import": {"branches": {side: _import_record(plan, diff) for side, plan, (_, diff)
                                     in zip(("query", "reference"), (query, reference), built)}}}
    path = save_checkpoint(out, model, epoch=0, extra=extra)
    log.info("imported a two-branch model: query %s (%s), reference %s (%s)", query.arch, query.summary(),
             reference.arch, reference.summary())
    for plan in (query, reference):
        if plan.reference_check and plan.reference_check["forced"]:
            log.warning("written with --force although %s", describe_reference_check(plan.reference_check))
    return path, max(diff for _, diff in built)
