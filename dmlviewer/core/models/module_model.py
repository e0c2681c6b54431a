"""A user's own ``nn.Module`` as a dmlviewer model (issue 11: the Python door).

Any module whose output is the embedding (a tensor, or a tuple/dict/object from which
``output`` selects it) becomes a :class:`ModuleModel` with the interface every dmlviewer model
has (``forward -> ModelOutput``, ``linearize``, ``head_function``, ``preprocess``,
``group_slices``, ``dim``, ``config``), so the pair view, retrieval, evaluation, localization
and correspondence work on it unchanged.

- The feature map ``A`` is the output of ``feature_layer`` (a name as in ``named_modules()``),
  taken by a forward hook; ``None`` picks the last module whose output is a spatial map.
  Channels-last maps (B x h x w x C: timm's Swin with ``output_fmt`` NHWC, torchvision's
  ``swin_t`` features, ConvNeXt-style blocks) are recognized (:func:`map_layout`) and seen as
  B x C x h x w; a map whose layout cannot be told is refused, naming its shape.
- The output's first axis must be the batch (checked on a batch of two): a D x B output
  (cnnimageretrieval's descriptors as columns) is refused with the ``output=`` that fixes it.
- The *head* is everything the forward computes after that layer. It is decomposed by the
  Jacobian at this input (seed 000 Sec. 4, :mod:`.jacobian`):
  ``C_ij = sum_c A_c,ij dE/dA_c,ij`` and ``B = E - sum_ij C_ij``. A
  :class:`~.tail.TailRecorder` watches the head's ops: when all of them are linear or piecewise
  linear (pooling, Linear, eval BatchNorm, ReLU/LeakyReLU, max, Dropout in eval, Flatten,
  Identity) the decomposition is *exact* with the masks frozen (``rule`` :data:`~.output.EXACT`);
  otherwise it is *first order* (:data:`~.output.FIRST_ORDER`) and the report names the ops.
  A head that starts by pooling each channel on its own (GAP, GMP, GeM, then anything) is
  differentiated at the pooled vector, not at the map (:meth:`.tail.TailRecorder.pooled`,
  :func:`.jacobian.pooled_gradient_x_activation`: the same numbers; for GAP + Linear the closed
  form ``C_ij = W A_ij / hw``), so a pair costs about what the same network as a dmlviewer
  checkpoint costs (issue 22 item 5).
- The probe pass at construction also follows the head's degree of homogeneity
  (:class:`~.homogeneity.DegreeTracker`), so opening needs no second pass for it.
- A final L2 normalization of the output is recognized and stripped: ``embedding_raw`` is the
  vector before it (seed 000 Eq. 3 decomposes the unnormalized embedding; the cosine is the same).
- Replacing the hooked layer's output (``head_function``) re-runs the module with that map in
  place of the layer's output, so Grad-CAM and the Jacobian see exactly the user's forward.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .errors import ModelError, ModelFieldError
from .jacobian import gradient_x_activation, pooled_gradient_x_activation
from .homogeneity import DegreeTracker, euler_report, is_degree_one
from .output import EXACT, Linearization, ModelOutput
from .tail import TailRecorder, TailReport

log = logging.getLogger(__name__)

OutputSelector = int | str | Callable[[Any], torch.Tensor] | None
_OUTPUT_KEYS = ("embedding", "embeddings", "features", "feature", "pooler_output", "image_embeds")


def select_output(result: Any, output: OutputSelector) -> torch.Tensor:
    """The embedding tensor (B x D) in a module's output.

    ``output``: ``None`` (a tensor as it is; a tuple or list of one element: that element; a
    dict or an object: the first of ``embedding embeddings features feature pooler_output
    image_embeds``), an int (index into a tuple/list), a str (dict key or attribute), or a
    callable. A tuple or list of several elements (``(logits, embedding)``) is never guessed:
    :class:`ModelFieldError` on ``output`` names the elements' shapes (issue 31 item 11), and
    ``{output_forms}`` where each door says what it takes (a function only in Python, issue 42
    item 10).
    """
    if callable(output):
        value = output(result)
    elif output is None:
        if isinstance(result, torch.Tensor):
            value = result
        elif isinstance(result, (tuple, list)) and len(result) == 1:
            value = result[0]
        elif isinstance(result, (tuple, list)) and result:
            kind = type(result).__name__
            raise ModelFieldError("output", f"the model returned a {kind} of {len(result)} elements "
                                  f"({describe_elements(result)}): say which one is the embedding with {{field}} "
                                  "({output_forms})", also=("output_forms",))
        else:
            value = None
            for key in _OUTPUT_KEYS:
                if isinstance(result, Mapping) and key in result:
                    value = result[key]
                    break
                if not isinstance(result, Mapping) and hasattr(result, key):
                    value = getattr(result, key)
                    break
            if value is None:
                raise ModelFieldError("output", f"the model returned a {type(result).__name__}: say which part is the "
                                      "embedding with {field} ({output_forms})", also=("output_forms",))
    elif isinstance(output, int):
        try:
            value = result[output]
        except (TypeError, IndexError, KeyError):
            raise ModelError(f"output={output}: the model returned a {type(result).__name__} "
                             "that has no such element") from None
    elif isinstance(output, str):
        value = result.get(output) if isinstance(result, Mapping) else getattr(result, output, None)
        if value is None:
            raise ModelError(f"output={output!r}: the model's {type(result).__name__} output has no such key or attribute")
    else:
        raise ModelError(f"output must be None, an int, a str or a function, got {type(output).__name__}")
    if not isinstance(value, torch.Tensor):
        raise ModelError(f"the selected output is a {type(value).__name__}, not a tensor")
    if value.dim() == 4 and value.shape[-2:] == (1, 1):
        value = value.flatten(1)
    if value.dim() != 2:
        raise ModelError(f"the embedding must be batch x dimensions, got shape {tuple(value.shape)} "
                         "(select another output with output=)")
    return value


def describe_elements(result: tuple | list, limit: int = 6) -> str:
    """The elements of a tuple or list output in a few words: ``0: 2 x 100, 1: 2 x 64``."""
    parts = []
    for k, item in enumerate(result[:limit]):
        shape = " x ".join(map(str, item.shape)) if isinstance(item, torch.Tensor) else type(item).__name__
        parts.append(f"{k}: {shape}")
    return ", ".join(parts) + (f", ... ({len(result)} in all)" if len(result) > limit else "")


#: Layouts of a feature layer's 4-D output.
NCHW, NHWC = "NCHW", "NHWC"


def check_batch(embedding: torch.Tensor, batch: int) -> None:
    """``ModelError`` unless the selected output's first axis is the batch: a D x B output
    (descriptors as columns, as cnnimageretrieval's networks return them) says which ``output=``
    turns it into B x D."""
    if embedding.shape[0] == batch:
        return
    shape = " x ".join(map(str, embedding.shape))
    if embedding.shape[1] == batch:
        raise ModelError(f"the model's output is {shape} for a batch of {batch} images: descriptors as columns "
                         "(as cnnimageretrieval's networks return them); pass output=lambda o: o.T")
    raise ModelError(f"the model's output is {shape} for a batch of {batch} images: its first axis is not the "
                     "batch; pass output= a function that returns batch x dimensions")


def _declared_layout(layer: nn.Module, shape: tuple[int, ...]) -> str | None:
    """The layout ``layer``'s own type says its output ``shape`` has, or ``None``: timm's
    ``output_fmt``, torchvision's ``Permute``, or the last op (a convolution or 2-d norm over axis
    1; a LayerNorm or Linear over the last axis), looking into a ``Sequential``'s last module."""
    while True:
        fmt = getattr(layer, "output_fmt", None)
        if fmt is not None:
            text = str(getattr(fmt, "value", fmt)).upper()
            if text in (NCHW, NHWC):
                return text
        if isinstance(layer, nn.Sequential) and len(layer):
            layer = layer[-1]
            continue
        break
    first, last = shape[1], shape[-1]
    dims = getattr(layer, "dims", None)
    if type(layer).__name__ == "Permute" and dims is not None and len(dims) == 4:
        return {(0, 2, 3, 1): NHWC, (0, 3, 1, 2): NCHW}.get(tuple(int(d) for d in dims))
    if isinstance(layer, (nn.Conv2d, nn.ConvTranspose2d)):
        return NCHW if layer.out_channels == first else None
    if isinstance(layer, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
        return NCHW if layer.num_features == first else None
    if isinstance(layer, nn.GroupNorm):
        return NCHW if layer.num_channels == first else None
    if isinstance(layer, nn.LayerNorm):
        if "2d" in type(layer).__name__.lower():  # timm's LayerNorm2d: over the channels of an NCHW map
            return NCHW if tuple(layer.normalized_shape) == (first,) else None
        return NHWC if tuple(layer.normalized_shape) == (last,) else None
    if isinstance(layer, nn.Linear):
        return NHWC if layer.out_features == last else None
    return None


def map_layout(layer: nn.Module, shape: tuple[int, ...]) -> str | None:
    """Whether ``layer``'s 4-D output of ``shape`` is channels first (:data:`NCHW`) or channels
    last (:data:`NHWC`), or ``None`` when it cannot be told.

    dmlviewer's inputs are square, so the grid is square: the two equal axes are the grid (1, 2
    for NHWC; 2, 3 for NCHW). The layer's own type (:func:`_declared_layout`) decides when the
    shape cannot (three equal axes, or none) and must agree with it when both speak."""
    _, d1, d2, d3 = shape
    by_shape = NCHW if (d2 == d3 and d1 != d2) else NHWC if (d1 == d2 and d3 != d1) else None
    declared = _declared_layout(layer, shape)
    if declared and by_shape and declared != by_shape:
        return None
    return declared or by_shape


def as_channels_first(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """``(C, h, w)`` of a 4-D output ``shape`` in ``layout``."""
    return tuple(shape[1:]) if layout == NCHW else (shape[3], shape[1], shape[2])


def spatial_layers(module: nn.Module, x: torch.Tensor) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, C x h x w)`` of every named module whose output is a spatial map (B x C x h x w,
    or channels last B x h x w x C, h*w > 1; maps whose layout cannot be told are left out), in
    the order they finish during one forward pass of ``x``."""
    found: list[tuple[str, tuple[int, ...]]] = []
    handles = []

    def make(name):
        def hook(mod, _inp, out):
            if isinstance(out, torch.Tensor) and out.dim() == 4:
                layout = map_layout(mod, tuple(out.shape))
                if layout is not None:
                    c, h, w = as_channels_first(tuple(out.shape), layout)
                    if h * w > 1:
                        found.append((name, (c, h, w)))
        return hook

    for name, sub in module.named_modules():
        if name:
            handles.append(sub.register_forward_hook(make(name)))
    try:
        with torch.no_grad():
            module(x)
    finally:
        for h in handles:
            h.remove()
    return found


def _outer_names(layers: list[tuple[str, tuple[int, ...]]]) -> list[str]:
    """The distinct names of the least nested layers among ``layers`` (for messages)."""
    names = list(dict.fromkeys(name for name, _ in layers))
    depth = min((n.count(".") for n in names), default=0)
    return [n for n in names if n.count(".") == depth]


@dataclass
class _Run:
    """One forward pass: the layer's output, the selected output, the raw embedding, the report."""

    feature_map: torch.Tensor
    output: torch.Tensor
    raw: torch.Tensor
    report: TailReport
    layout: str
    pooled: torch.Tensor | None = None  # the head's first, channel-wise pooling (TailRecorder.pooled)


class _Capture:
    """One forward pass's business at the feature layer: keep (or replace) its output, then start
    recording the head (see :class:`~.tail.TailRecorder`). The map is kept channels first; a
    channels-last layer's output goes on into the module as it came (permuted back)."""

    def __init__(self, layer_name: str, layer: nn.Module, layout: str | None, replace: torch.Tensor | None,
                 recorder: TailRecorder, grad_tail: bool, degrees: DegreeTracker | None = None) -> None:
        self.layer_name, self.layer, self.layout = layer_name, layer, layout
        self.replace, self.recorder, self.grad_tail = replace, recorder, grad_tail
        self.degrees = degrees  # also follow the head's degree of homogeneity (the probe pass)
        self.feature_map: torch.Tensor | None = None
        self.calls = 0
        self.recording = False

    def __call__(self, out):
        self.calls += 1
        if self.calls > 1:
            raise ModelError(f"feature layer {self.layer_name!r} runs more than once in a forward pass: "
                             "choose a layer that runs once")
        if not isinstance(out, torch.Tensor) or out.dim() != 4:
            what = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ModelError(f"feature layer {self.layer_name!r} gives {what}, not a spatial map "
                             "(batch x channels x height x width)")
        layout = self.layout or map_layout(self.layer, tuple(out.shape))
        if layout is None:
            raise ModelError(f"feature layer {self.layer_name!r} gives {tuple(out.shape)}: cannot tell whether its "
                             "channels come first (batch x channels x height x width) or last (batch x height x "
                             "width x channels); choose another feature_layer")
        self.layout = layout
        channels_last = layout == NHWC
        amap = out.permute(0, 3, 1, 2).contiguous() if channels_last else out
        if self.replace is not None:
            if self.replace.shape != amap.shape:
                raise ModelError(f"replacement map {tuple(self.replace.shape)} does not match the layer's "
                                 f"output {tuple(amap.shape)} (channels first)")
            amap = self.replace
        if self.grad_tail:
            if self.replace is None:  # differentiate the head with respect to this very map
                amap = amap.detach().requires_grad_(True)
            torch.set_grad_enabled(True)
        if channels_last:  # back to the layer's own layout, derived from the map (in the graph)
            out = out if (self.replace is None and not self.grad_tail) else amap.permute(0, 2, 3, 1).contiguous()
        else:
            out = amap
        self.recorder.start(out)
        self.recorder.__enter__()
        self.recording = True
        if self.degrees is not None:
            self.degrees.start(out)
            self.degrees.__enter__()
        self.feature_map = amap
        return out


class ModuleModel(nn.Module):
    """A live ``nn.Module`` with the dmlviewer model interface (see the module docstring).

    ``preprocess`` (a :class:`~dmlviewer.core.data.transforms.Preprocess`) is how images become
    the module's input. Construction runs one probe forward pass (eval mode) that checks the
    layer, the output and the input size, and fixes ``dim`` and the decomposition rule."""

    def __init__(self, module: nn.Module, feature_layer: str | None, preprocess,
                 output: OutputSelector = None) -> None:
        super().__init__()
        while isinstance(module, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            module = module.module
        self.net = module
        self.output_selector = output
        self._preprocess = preprocess
        self._local = threading.local()  # the capture of the forward pass running in this thread
        self._handle = None
        self.layout: str | None = None  # the feature layer's output layout, fixed by the probe
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        # a batch of two: a D x B output (descriptors as columns) is told from B x D
        probe = torch.zeros(2, 3, preprocess.size, preprocess.size, device=device)
        was_training = module.training
        module.eval()
        try:
            if feature_layer is None:
                feature_layer = self._auto_layer(probe)
            try:
                self.layer = module.get_submodule(feature_layer)
                self._handle = self.layer.register_forward_hook(self._hook)
            except AttributeError:
                raise ModelError(f"the model has no layer {feature_layer!r}; layers with spatial maps: "
                                 f"{', '.join(_outer_names(spatial_layers(module, probe))[-8:]) or 'none'}") from None
            self.feature_layer = feature_layer
            with torch.no_grad():  # one pass: the head's ops classified and its degree followed
                degrees = DegreeTracker()
                run = self._run(probe, degrees=degrees)
                # a head that is not piecewise linear may still be exact: degree-1 homogeneous (GeM), Euler
                self.homogeneous = run.report.rule != EXACT and is_degree_one(degrees.degree(run.raw))
        except BaseException:
            self.release()
            raise
        finally:
            module.train(was_training)
        self.layout = run.layout
        self._dim = int(run.raw.shape[1])
        self.stride = max(1, preprocess.size // int(run.feature_map.shape[-2]))  # nominal, for resolutions
        self.probe_report = euler_report(run.report) if self.homogeneous else run.report
        self.config = {
            "backbone": f"module:{type(module).__name__}", "feature_layer": feature_layer,
            "pretrained": None, "pooling": "module", "grouping": "none", "groups": 1, "bn": False,
            "hidden": 0, "multilayer": [], "dim": self._dim, "image_size": preprocess.size,
            "mean": list(preprocess.mean), "std": list(preprocess.std),
            "normalized_output": run.report.normalized, "source": "python", "feature_layout": self.layout,
        }
        log.info("%s: feature layer %s (%d x %d x %d at %d px%s), embedding %d, decomposition %s",
                 type(module).__name__, feature_layer, *run.feature_map.shape[1:], preprocess.size,
                 ", channels last" if self.layout == NHWC else "", self._dim, run.report.explain())

    def release(self) -> None:
        """Remove the forward hook this model put on the user's module (the model no longer works
        afterwards): ``dmlviewer.explain`` hands the module back as it came."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    # ------------------------------------------------------------------ interface
    @property
    def preprocess(self):
        return self._preprocess

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def group_slices(self) -> list[slice]:
        return [slice(0, self._dim)]

    def forward(self, x: torch.Tensor) -> ModelOutput:
        run = self._run(x)
        raw = run.raw
        return ModelOutput(F.normalize(raw.float(), dim=1), raw, run.feature_map, intermediates={"input": x})

    def head_function(self, out: ModelOutput, index: int = 0):
        """``A (1 x C x h x w) -> embedding_raw (1 x D)``: the module re-run on image ``index``
        with ``A`` in place of the feature layer's output."""
        x = out.intermediates["input"][index : index + 1]

        def run(feature_map: torch.Tensor) -> torch.Tensor:
            return self._run(x, replace=feature_map, grad_tail=torch.is_grad_enabled()).raw

        return run

    def linearize(self, out: ModelOutput) -> Linearization:
        """Jacobian decomposition of the head at this input, batched over images (see the module
        docstring); ``rule`` exact when the head's ops are piecewise linear, else first order.
        Re-runs the module on ``out``'s input; :meth:`forward_decomposed` saves that pass."""
        leaf = out.feature_map.detach().clone().requires_grad_(True)
        return self._decompose(self._run(out.intermediates["input"], replace=leaf, grad_tail=True))

    def forward_decomposed(self, x: torch.Tensor) -> tuple[ModelOutput, Linearization]:
        """``forward`` and ``linearize`` from one pass through the module (the layers before the
        feature map without a graph, the head with one)."""
        run = self._run(x, grad_tail=True)
        out = ModelOutput(F.normalize(run.raw.detach().float(), dim=1), run.raw.detach(),
                          run.feature_map.detach(), intermediates={"input": x})
        return out, self._decompose(run)

    def _decompose(self, run: _Run) -> Linearization:
        leaf = run.feature_map
        contributions = None
        with torch.enable_grad():
            if run.pooled is not None and run.pooled.requires_grad:  # the rows at the pooled vector
                try:
                    contributions = pooled_gradient_x_activation(run.raw, run.pooled, leaf)
                except RuntimeError as exc:  # e.g. the head detaches after the pooling
                    log.debug("pooled Jacobian rows failed (%s): rows at the feature map", exc)
            if contributions is None:
                contributions = gradient_x_activation(run.raw, leaf)
        raw = run.raw.detach()
        bias = raw.float() - contributions.sum(1)
        report = euler_report(run.report) if self.homogeneous else run.report
        if report.rule != "exact":
            log.info("decomposition of %s is first order: %s", self.config["backbone"], report.explain())
        return Linearization(contributions, bias, tuple(leaf.shape[-2:]), rule=report.rule,
                             frozen=tuple(report.frozen), reason=report.explain() if report.rule != "exact" else "")

    def describe_rule(self) -> str:
        """The decomposition rule, with its reason, for the UI."""
        return self.probe_report.explain()

    # ------------------------------------------------------------------ internals
    def _auto_layer(self, probe: torch.Tensor) -> str:
        layers = spatial_layers(self.net, probe)
        if not layers:
            raise ModelError("the model has no layer with a spatial output map (batch x channels x height x "
                             "width); pass feature_layer=")
        name = layers[-1][0]
        log.info("feature layer not given: using %s (%s), the last spatial map", name, "x".join(map(str, layers[-1][1])))
        return name

    def __getstate__(self) -> dict:
        """A copy (``copy.deepcopy``: the perturbation methods' folded copy) starts with no
        capture in flight; the layer's hook, a bound method, is copied bound to the copy."""
        return {**super().__getstate__(), "_local": None}

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._local = threading.local()

    def _hook(self, _module, _inputs, out):
        """The layer's one forward hook: a no-op unless this thread is inside :meth:`_run` (the
        module may run elsewhere, or in several threads at once)."""
        capture = getattr(self._local, "capture", None)
        return None if capture is None else capture(out)

    def _run(self, x: torch.Tensor, replace: torch.Tensor | None = None, grad_tail: bool = False,
             degrees: DegreeTracker | None = None) -> _Run:
        recorder = TailRecorder()
        hook = _Capture(self.feature_layer, self.layer, self.layout, replace, recorder, grad_tail, degrees)
        if getattr(self._local, "capture", None) is not None:
            raise ModelError("the model's forward pass was re-entered from inside itself")
        self._local.capture = hook
        previous = torch.is_grad_enabled()
        try:
            if grad_tail:
                torch.set_grad_enabled(False)  # the layers before the hook need no graph
            try:
                result = self.net(x)
            except ModelError:
                raise
            except RuntimeError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ModelError(f"the model failed on a {x.shape[0]} x {x.shape[1]} x {x.shape[2]} x "
                                 f"{x.shape[3]} input: {first} (dmlviewer feeds RGB images resized to the "
                                 "preprocessing size: check size= or transform=)") from None
        finally:
            if hook.recording:
                if degrees is not None:  # entered after the recorder: leaves first
                    degrees.__exit__(None, None, None)
                recorder.__exit__(None, None, None)
            self._local.capture = None
            torch.set_grad_enabled(previous)
        if hook.feature_map is None:
            raise ModelError(f"feature layer {self.feature_layer!r} did not run in the forward pass")
        with degrees if degrees is not None else contextlib.nullcontext():  # the output's selection too
            output = select_output(result, self.output_selector)
            raw = recorder.raw_for(output)
        check_batch(output, x.shape[0])
        pooled = recorder.pooled() if hook.layout == NCHW else None  # channels of a channels-first map
        return _Run(hook.feature_map, output, raw, recorder.report(output), hook.layout, pooled)
