"""Vision transformers (timm ``VisionTransformer`` and DeiT) as dmlviewer models (issue 11).

The feature map is the grid of patch tokens (``h x w`` positions, one per patch); the class,
register and distillation tokens ("prefix" tokens) are not positions on the image and are
handled explicitly. Two heads, after timm's own ``global_pool``:

- ``pooling="gap"`` (timm's ``avg``): the backbone runs every block; the head is the final
  norm, the mean over patch tokens, ``fc_norm`` and the projection. With the LayerNorm scales
  frozen at this input this is affine in each patch token, so the decomposition is exact as for
  GAP (seed 000 App. A.3), the prefix tokens owning nothing.
- ``pooling="token"`` (timm's ``token``; the mean of the class and distillation tokens for
  DeiT-distilled): the class token at the output only sees the patch tokens through the last
  block's attention, so the feature map is the token grid *entering the last block* and the head
  is that block, the final norm, the readout and the projection. It is linearized with the
  last block's attention weights, the LayerNorm scales and the MLP's activation gates (GELU:
  ``Phi(u)``) frozen at the input, the conservative propagation of Ali et al., "XAI for
  Transformers: Better Explanations through Conservative Propagation" (ICML 2022): the frozen
  block is affine in the tokens and equals the real block at this input, so completeness holds
  exactly there. The prefix tokens' share lands in the bias (``Linearization.nonspatial``).

Only timm's standard ``Block`` / ``Attention`` / ``Mlp`` / ``LayerNorm`` / ``LayerScale`` are
linearized in closed form (q/k norms, attention-output norms and gates included); another block
type falls back to the first-order Jacobian decomposition, and says so.
"""

from __future__ import annotations

import logging
import weakref

import torch
from torch import nn

from .heads import Head, make_output
from .output import EXACT, FIRST_ORDER, Linearization, ModelOutput
from .projection import Projection

log = logging.getLogger(__name__)

POOLINGS = ("token", "gap")


def is_vit(module: nn.Module) -> bool:
    """True for a timm ``VisionTransformer`` (DeiT's distilled variant included)."""
    try:
        from timm.models.vision_transformer import VisionTransformer
    except ImportError:
        return False
    return isinstance(module, VisionTransformer)


def readout_rows(vit: nn.Module) -> list[tuple[int, float]]:
    """``(token index, weight)`` of the ``token`` readout: the class token, or the mean of the
    class and distillation tokens (DeiT-distilled's ``pre_logits``)."""
    if getattr(vit, "dist_token", None) is not None:
        return [(0, 0.5), (1, 0.5)]
    if getattr(vit, "cls_token", None) is None:
        raise ValueError("this vision transformer has no class token: use pooling 'gap'")
    return [(0, 1.0)]


class ViTBackbone(nn.Module):
    """Patch tokens of a timm vision transformer after ``blocks`` blocks, as a feature map:
    ``{"last": B x C x h x w, "prefix": B x P x C}``."""

    def __init__(self, vit: nn.Module, blocks: int, name: str = "vit") -> None:
        super().__init__()
        self.net = vit
        self.blocks = int(blocks)
        self.name = name

    @property
    def channels(self) -> int:
        return int(self.net.embed_dim)

    @property
    def stride(self) -> int:
        size = self.net.patch_embed.patch_size
        return int(size[0] if isinstance(size, (tuple, list)) else size)

    @property
    def channels_of(self) -> dict[str, int]:
        return {"last": self.channels}

    @property
    def strides(self) -> dict[str, int]:
        return {"last": self.stride}

    @property
    def names(self) -> list[str]:
        return ["last"]

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        vit = self.net
        tokens = vit.patch_embed(x)
        if tokens.dim() == 4:  # NHWC (dynamic image size)
            h, w = tokens.shape[1:3]
        else:
            h, w = vit.patch_embed.dynamic_feat_size(tuple(x.shape[-2:]))
        tokens = vit.norm_pre(vit.patch_drop(vit._pos_embed(tokens)))
        for block in vit.blocks[: self.blocks]:
            tokens = block(tokens)
        p = vit.num_prefix_tokens
        patches = tokens[:, p:]
        grid = patches.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], h, w)
        return {"last": grid, "prefix": tokens[:, :p]}

    @torch.no_grad()
    def grid(self, image_size: int) -> tuple[int, int]:
        return tuple(int(v) for v in self.net.patch_embed.dynamic_feat_size((image_size, image_size)))


def _tokens(features: dict[str, torch.Tensor]) -> torch.Tensor:
    grid = features["last"]
    return torch.cat([features["prefix"], grid.flatten(2).transpose(1, 2)], 1)


class TokenHead(Head):
    """The transformer's pooling head (see the module docstring) followed by ``projection``.

    The transformer's modules (last block, norms) stay registered in the backbone; this head only
    refers to them, so a state dict holds each parameter once."""

    def __init__(self, vit: nn.Module, pool: str, projection: Projection) -> None:
        super().__init__()
        if pool not in POOLINGS:
            raise ValueError(f"vision transformer pooling must be one of {', '.join(POOLINGS)}, got {pool!r}")
        object.__setattr__(self, "_vit", vit)  # not a submodule: see the class docstring
        self.pool = pool
        self.rows = readout_rows(vit) if pool == "token" else []
        self.projection = projection
        self.dim = projection.out_dim

    def forward(self, features: dict[str, torch.Tensor]) -> ModelOutput:
        vit, grid = self._vit, features["last"]
        tokens = _tokens(features)
        if self.pool == "token":
            x = vit.norm(vit.blocks[-1](tokens))
            z = sum(weight * x[:, r] for r, weight in self.rows)
        else:
            z = vit.norm(tokens)[:, vit.num_prefix_tokens :].mean(1)
        # the pooled vector, whose fc_norm scale linearize freezes (not computed again there: for
        # the token head that would run the last block once more)
        frozen = {"pooled": z.detach()}
        raw, mask = self.projection(vit.head_drop(vit.fc_norm(z)))
        if mask is not None:
            frozen["relu"] = mask
        return make_output(raw, grid, intermediates={"prefix": features["prefix"]}, frozen=frozen)

    def linearize(self, out: ModelOutput) -> Linearization:
        """Exact affine form at this input (frozen attention, LayerNorm scales and activation
        gates for the token head; frozen LayerNorm scales for the mean head)."""
        vit = self._vit
        tokens = _tokens({"last": out.feature_map, "prefix": out.intermediates["prefix"]}).float()
        p = vit.num_prefix_tokens
        if self.pool == "token":
            try:
                parts, frozen = _token_readout_parts(vit, tokens, self.rows)
            except _Unsupported as exc:
                return self._first_order(out, str(exc))
        else:
            parts, frozen = _mean_readout_parts(vit, tokens), ("LayerNorm scales",)
        parts = _layer_norm(parts, out.frozen["pooled"], vit.fc_norm)
        contributions, bias = self.projection.linearize(parts[:, :-1], parts[:, -1], out.frozen.get("relu"))
        nonspatial = contributions[:, :p].sum(1)
        if self.projection.hidden is not None:
            frozen = frozen + ("ReLU masks",)
        return Linearization(contributions[:, p:].contiguous(), bias + nonspatial, tuple(out.feature_map.shape[-2:]),
                             rule=EXACT, frozen=frozen, nonspatial=nonspatial)

    def _first_order(self, out: ModelOutput, reason: str) -> Linearization:
        from .jacobian import jacobian_decomposition

        log.warning("no closed-form rule for this transformer block (%s): first-order decomposition", reason)
        prefix = out.intermediates["prefix"]
        parts, biases = [], []
        for i in range(out.feature_map.shape[0]):
            def head(a, i=i):
                return self({"last": a, "prefix": prefix[i : i + 1].detach()}).embedding_raw
            c, b = jacobian_decomposition(head, out.feature_map[i : i + 1])
            parts.append(c)
            biases.append(b)
        return Linearization(torch.stack(parts), torch.stack(biases), tuple(out.feature_map.shape[-2:]),
                             rule=FIRST_ORDER, reason=f"no closed-form rule for {reason}")


class _Unsupported(Exception):
    pass


# --------------------------------------------------------------------------- affine pushes
# ``parts`` is B x S x C: slot s < S-1 is token s's share, the last slot the constant term; a
# linear map applies to every slot, a constant is added to the last slot only.

def _layer_norm(parts: torch.Tensor, actual: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """A LayerNorm (or Identity) with its scale ``1 / sqrt(var + eps)`` of the ``actual`` input
    (B x C) frozen: ``gamma * (x - mean(x)) / s + beta``, linear in each slot."""
    if isinstance(norm, nn.Identity):
        return parts
    if not isinstance(norm, nn.LayerNorm):
        raise _Unsupported(f"{type(norm).__name__} is not a LayerNorm")
    scale = torch.rsqrt(actual.float().var(-1, unbiased=False) + norm.eps)[:, None, None]
    out = (parts - parts.mean(-1, keepdim=True)) * scale
    if norm.weight is not None:
        out = out * norm.weight
    if norm.bias is not None:
        out = out.clone()
        out[:, -1] += norm.bias
    return out


def _linear(parts: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    out = parts @ layer.weight.float().T
    if layer.bias is not None:
        out[:, -1] += layer.bias.float()
    return out


def _mean_readout_parts(vit: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Mean head: the final norm per patch token (scale frozen per token), then the mean."""
    b, t, c = tokens.shape
    p = vit.num_prefix_tokens
    n = t - p
    parts = tokens.new_zeros(b, t + 1, c)
    if isinstance(vit.norm, nn.Identity):
        parts[:, p:t] = tokens[:, p:] / n
        return parts
    if not isinstance(vit.norm, nn.LayerNorm):
        raise _Unsupported(f"{type(vit.norm).__name__} is not a LayerNorm")
    x = tokens[:, p:]
    scale = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + vit.norm.eps)
    y = (x - x.mean(-1, keepdim=True)) * scale
    if vit.norm.weight is not None:
        y = y * vit.norm.weight
    parts[:, p:t] = y / n
    if vit.norm.bias is not None:
        parts[:, -1] = vit.norm.bias
    return parts


def _activation_gate(act: nn.Module, u: torch.Tensor) -> torch.Tensor:
    """``g`` with ``act(u) = g * u`` elementwise at this input (GELU: ``Phi(u)``; ReLU: the mask)."""
    if not _zero_at_zero(act):
        raise _Unsupported(f"activation {type(act).__name__} is not zero at zero")
    value = act(u)
    safe = torch.where(u == 0, torch.ones_like(u), u)
    return torch.where(u == 0, torch.zeros_like(u), value / safe)


def _zero_at_zero(act: nn.Module) -> bool:
    """Whether ``act(0) == 0``, asked once per activation module and on the host: reading a
    value back from the GPU on every pass would synchronise (and stop a CUDA graph's recording)."""
    known = _ZERO_AT_ZERO.get(act)
    if known is None:
        param = next(act.parameters(), None)
        zero = torch.zeros(1) if param is None else param.new_zeros(1)
        with torch.no_grad():
            known = _ZERO_AT_ZERO[act] = bool(act(zero).abs().item() == 0)
    return known


_ZERO_AT_ZERO: "weakref.WeakKeyDictionary[nn.Module, bool]" = weakref.WeakKeyDictionary()


def _token_readout_parts(vit: nn.Module, tokens: torch.Tensor, rows) -> tuple[torch.Tensor, tuple[str, ...]]:
    """Token head: the last block at the readout rows, linearized with frozen factors, then the
    final norm and the readout; B x (T + 1) x C parts."""
    from timm.layers import Attention, LayerScale, Mlp
    from timm.models.vision_transformer import Block

    block = vit.blocks[-1]
    attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
    if type(block) is not Block or type(attn) is not Attention or type(mlp) is not Mlp:
        raise _Unsupported(f"block {type(block).__name__} with {type(attn).__name__}/{type(mlp).__name__}")
    for ls in (block.ls1, block.ls2):
        if not isinstance(ls, (LayerScale, nn.Identity)):
            raise _Unsupported(f"layer scale {type(ls).__name__}")
    b, t, c = tokens.shape
    heads, head_dim, width = attn.num_heads, attn.head_dim, attn.attn_dim
    out = tokens.new_zeros(b, t + 1, c)
    frozen = ("attention weights", "LayerNorm scales", "activation gates")
    readout = [r for r, _ in rows]
    with torch.no_grad():
        h = block.norm1(tokens)
        # the readout rows by slicing: an index list would be copied from the host on every pass
        # (which a CUDA graph cannot record)
        h_readout = torch.cat([h[:, r : r + 1] for r in readout], 1)
        # the attention of the readout rows only: their queries and every token's key (the
        # values come from the tokens' linear parts below; the whole qkv would cost three times
        # the keys)
        w_qkv, b_qkv = attn.qkv.weight, attn.qkv.bias
        q = torch.nn.functional.linear(h_readout, w_qkv[:width], None if b_qkv is None else b_qkv[:width])
        k = torch.nn.functional.linear(h, w_qkv[width : 2 * width], None if b_qkv is None else b_qkv[width : 2 * width])
        q = attn.q_norm(q.reshape(b, len(readout), heads, head_dim).transpose(1, 2))
        k = attn.k_norm(k.reshape(b, t, heads, head_dim).transpose(1, 2))
        weights = ((q * attn.scale) @ k.transpose(-2, -1)).softmax(-1)  # B x heads x rows x T
        # token s's share of h_s (norm1 with its scale frozen per token)
        h_parts = _per_token_layer_norm(tokens, block.norm1)  # B x T x C (linear parts), constant C
        w_v = attn.qkv.weight[2 * width : 3 * width].float()
        b_v = attn.qkv.bias[2 * width : 3 * width].float() if attn.qkv.bias is not None else None
        v_lin = h_parts[0] @ w_v.T  # B x T x A
        v_const = h_parts[1] @ w_v.T + (b_v if b_v is not None else 0.0)  # A
        for i, (r, readout_weight) in enumerate(rows):
            att = weights[:, :, i, :]  # B x heads x T
            att_a = att.repeat_interleave(head_dim, dim=1).transpose(1, 2)  # B x T x A
            parts = torch.cat([att_a * v_lin, (att_a.sum(1) * v_const)[:, None]], 1)  # B x (T+1) x A
            o_actual = parts.sum(1)
            parts = _layer_norm(parts, o_actual, attn.norm)
            if attn.gate is not None:
                parts = parts * attn.gate(h[:, r]).sigmoid()[:, None]
            parts = _linear(parts, attn.proj)
            if isinstance(block.ls1, LayerScale):
                parts = parts * block.ls1.gamma
            parts[:, r] += tokens[:, r]  # residual: the readout token's own input
            x1 = parts.sum(1)
            m = _layer_norm(parts, x1, block.norm2)
            u_parts = _linear(m, mlp.fc1)
            gate = _activation_gate(mlp.act, u_parts.sum(1))
            m = u_parts * gate[:, None]
            m = _layer_norm(m, m.sum(1), mlp.norm)
            m = _linear(m, mlp.fc2)
            if isinstance(block.ls2, LayerScale):
                m = m * block.ls2.gamma
            parts = parts + m
            parts = _layer_norm(parts, parts.sum(1), vit.norm)
            out += readout_weight * parts
    return out, frozen


def _per_token_layer_norm(tokens: torch.Tensor, norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """``(linear part per token (B x T x C), constant (C))`` of a LayerNorm applied to each token
    with its own scale frozen."""
    if isinstance(norm, nn.Identity):
        return tokens, tokens.new_zeros(tokens.shape[-1])
    if not isinstance(norm, nn.LayerNorm):
        raise _Unsupported(f"{type(norm).__name__} is not a LayerNorm")
    scale = torch.rsqrt(tokens.var(-1, unbiased=False, keepdim=True) + norm.eps)
    lin = (tokens - tokens.mean(-1, keepdim=True)) * scale
    if norm.weight is not None:
        lin = lin * norm.weight
    const = norm.bias.float() if norm.bias is not None else tokens.new_zeros(tokens.shape[-1])
    return lin, const


# --------------------------------------------------------------------------- built by name

TIMM_PREFIX = "timm:"


def timm_vit_name(backbone: str) -> str | None:
    """The timm model name when ``backbone`` names a timm vision transformer (``timm:NAME``)."""
    if not isinstance(backbone, str) or not backbone.startswith(TIMM_PREFIX):
        return None
    name = backbone[len(TIMM_PREFIX):]
    try:
        import timm
    except ImportError:
        return None
    if not timm.is_model(name):
        return None
    from timm.models import model_entrypoint

    module = model_entrypoint(name).__module__
    return name if module.endswith(("vision_transformer", "deit")) else None


def read_timm_weights(path: str, ignore: tuple[str, ...] = ("head.", "head_dist.")) -> dict:
    """A local timm state dict (``.pth`` read with ``weights_only=True``, or ``.safetensors``),
    unwrapped (``state_dict``/``model`` keys, ``module.`` prefixes), classifier keys dropped."""
    from .backbones import read_weights_file

    state = read_weights_file(path)  # .safetensors included
    for key in ("state_dict", "model"):
        if isinstance(state.get(key), dict):
            state = state[key]
    state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}
    return {k: v for k, v in state.items() if not k.startswith(ignore)}


def _file_image_size(state: dict, patch: int, prefix: int) -> int | None:
    """The square input size a state dict's position embeddings were made for."""
    pos = state.get("pos_embed")
    if not isinstance(pos, torch.Tensor) or pos.dim() != 3:
        return None
    for p in (prefix, 0):
        side = int(round((pos.shape[1] - p) ** 0.5))
        if side * side == pos.shape[1] - p:
            return side * patch
    return None


def load_timm_weights(net: nn.Module, state: dict, path: str, ignore: tuple[str, ...] = ("head.", "head_dist.")) -> None:
    """``state`` (from :func:`read_timm_weights`) into ``net``, strictly except the classifier
    keys; position embeddings of another grid are resampled as timm does."""
    from .backbones import format_keys
    from .errors import CheckpointError

    pos = state.get("pos_embed")
    own = net.state_dict()
    if isinstance(pos, torch.Tensor) and "pos_embed" in own and pos.shape != own["pos_embed"].shape:
        from timm.layers import resample_abs_pos_embed

        prefix = 0 if getattr(net, "no_embed_class", False) else net.num_prefix_tokens
        state["pos_embed"] = resample_abs_pos_embed(pos, new_size=net.patch_embed.grid_size,
                                                    num_prefix_tokens=prefix)
    expected = {k for k in own if not k.startswith(ignore)}
    missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
    if missing or unexpected:
        raise CheckpointError(f"{path} does not match {type(net).__name__}: missing keys "
                              f"[{format_keys(missing)}]; unexpected keys [{format_keys(unexpected)}]")
    try:
        net.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise CheckpointError(f"{path} does not match the transformer: {' '.join(str(exc).split())}") from None


def build_vit(config: dict, load_pretrained: bool = True) -> tuple[ViTBackbone, TokenHead]:
    """Backbone and head of a ``timm:NAME`` vision transformer config (see ``default_config``):
    built without weights (never from a hub), weights from the local file ``pretrained``,
    ``pooling`` ``token`` or ``gap`` (``fc_norm``: timm's norm after the pooling instead of the final
    norm before it), then ``[BN] -> [FC+ReLU] -> Linear(dim)`` (dim 0: none)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import timm

    name = timm_vit_name(config["backbone"])
    if name is None:
        raise ValueError(f"{config['backbone']!r} is not a timm vision transformer")
    pretrained = config.get("pretrained") if load_pretrained else None
    if pretrained == "imagenet":
        raise FileNotFoundError(f"timm weights for {name} come from a local file only (dmlviewer never downloads): "
                                "pass the .pth or .safetensors file as pretrained")
    options = dict(pretrained=False, num_classes=0, dynamic_img_size=True)
    if config.get("fc_norm"):  # timm's global_pool="avg" layout: no final norm before the pooling, fc_norm after
        options["fc_norm"] = True
    grid = int(config.get("token_grid") or 0)
    net = timm.create_model(name, **options)
    patch = ViTBackbone(net, 0).stride
    state = None
    if pretrained:
        state = read_timm_weights(pretrained)
        size = _file_image_size(state, patch, net.num_prefix_tokens)
        grid = size // patch if size else grid
    if grid and grid * patch != net.patch_embed.img_size[0]:  # position embeddings for that grid
        net = timm.create_model(name, img_size=grid * patch, **options)
    config["token_grid"] = int(net.patch_embed.grid_size[0])  # saved with the model, rebuilt alike
    if state is not None:
        load_timm_weights(net, state, pretrained)
    pool = config["pooling"]
    if pool not in POOLINGS:
        raise ValueError(f"a vision transformer pools by 'token' or 'gap', got pooling {pool!r}")
    width, dim = int(net.embed_dim), int(config["dim"])
    projection = (Projection(width, dim, bool(config["bn"]), int(config["hidden"])) if dim
                  else Projection(width, width, bool(config["bn"]), 0, final=False))
    blocks = len(net.blocks) - 1 if pool == "token" else len(net.blocks)
    return ViTBackbone(net, blocks, name), TokenHead(net, pool, projection)
