"""One pair's explanation: everything the viewer shows for a query and a reference image.

:func:`explain_pair` preprocesses both images on the model's device (:func:`~dmlviewer.core.data.transforms.to_tensor`),
runs both forward passes (one batch when the inputs have the same size), decomposes both
embeddings (:func:`.decompose`), forms the point-to-point tensor as one matrix product and the
bias terms of seed 000 Eq. 3 (:mod:`.pairwise`), all on that device, and brings over in ONE
transfer what hovering needs (the tensor and its transpose, float32 C-contiguous), the
"Decomposition" and "Decomposition+Bias" grid maps and the scalars. The overall maps at the
original image sizes are upsampled on first request and cached; Grad-CAM, RGrad-CAM,
grad-transfer maps, group tensors and attention maps are computed on request and cached.

Coordinates: ``side`` is ``"query"`` or ``"reference"``; points are ``(x, y)`` pixels of that
side's original image with the alignment convention of :mod:`.grid` (cell centres; a point
outside the image raises ``ValueError``). Each image is resized to the network input
(``size x size``, a stretch, as :func:`dmlviewer.core.data.to_tensor` does; a two-branch model's
branch may take a ``height x width`` input), so the feature grid is laid over the whole
original image.

Maps are signed float32 (positive: supports the similarity; negative: counts against it);
``overall(..., sign="positive" | "negative")`` gives either part. Returned cached arrays are
read-only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dmlviewer.core.explain.attention import attention_maps
from dmlviewer.core.explain import cuda_graph
from dmlviewer.core.explain.decomposition import head_function
from dmlviewer.core.explain.grad_transfer import GradWeightBank
from dmlviewer.core.explain.gradcam import gradcam_maps, transferred_map
from dmlviewer.core.explain.grid import bilinear_weights, upsample
from dmlviewer.core.explain.hover import HoverRenderer
from dmlviewer.core.explain.inputs import ImageLike, as_device, as_rgb, eval_mode, pair_inputs
from dmlviewer.core.explain.matches import MATCH_RADIUS, top_matches
from dmlviewer.core.explain import methods as registry
from dmlviewer.core.explain.pairwise import group_point_to_point, pair_terms
from dmlviewer.core.models import FIRST_ORDER, Linearization, ModelOutput
from dmlviewer.core.models.two_branch import TwoBranchModel

SIDES = ("query", "reference")
SIGNS = ("signed", "positive", "negative")

@dataclass
class _Side:
    image_shape: tuple[int, int]
    grid: tuple[int, int]
    contributions: torch.Tensor  # n x D float32, on the model's device
    bias: torch.Tensor  # D
    out: ModelOutput  # the batch this image was in
    index: int  # its position in that batch
    linearization: Linearization  # the batch's decomposition (its rule and what it freezes)
    model: torch.nn.Module | None = None  # the branch that embedded it (None: the pair's model)

    @property
    def embedding_raw(self) -> torch.Tensor:
        return self.contributions.sum(0) + self.bias


class PairExplanation:
    """A query/reference pair explained (built by :func:`explain_pair`; see module docstring).

    Attributes: ``similarity`` (cosine), ``point_to_point`` (``nq x nr`` float32, divided by
    ``|Eq||Er|``), ``bias_query``, ``bias_reference``, ``bias_both`` (Eq. 3, see
    :mod:`.pairwise`), ``grid_query``, ``grid_reference``, ``image_shape_query``,
    ``image_shape_reference``, ``num_groups``, ``rule`` (``"exact"`` or ``"first order"``:
    whether the decomposition of both embeddings is exact at these inputs) and ``rule_detail``
    (one line: what is frozen, or why it is first order).
    """

    def __init__(self, model: torch.nn.Module, query: _Side, reference: _Side, grad_bank: GradWeightBank | None = None):
        self._model = model
        self._sides = {"query": query, "reference": reference}
        self.grad_bank = grad_bank
        terms = pair_terms(query.contributions, query.bias, reference.contributions, reference.bias)
        self._terms = terms
        grids = {"query": query.grid, "reference": reference.grid}
        overall = {
            ("decomposition", "query"): terms.overall_query,
            ("decomposition", "reference"): terms.overall_reference,
            ("decomposition_bias", "query"): terms.overall_bias_query,
            ("decomposition_bias", "reference"): terms.overall_bias_reference,
        }
        # the one transfer: the tensor and its transpose (the hover rows of both sides), the
        # overall grid maps and the scalars
        p2p = terms.point_to_point
        on_host = _to_host([terms.scalars, p2p, None if p2p.device.type == "cpu" else p2p.T, *overall.values()])
        terms.set_host_scalars(on_host[0])
        self._norm = terms.norm
        self.similarity = terms.similarity
        self.bias_query = terms.bias_query
        self.bias_reference = terms.bias_reference
        self.bias_both = terms.bias_both
        self.point_to_point = _frozen(on_host[1])
        # the reference side's hover rows: brought over with the tensor from an accelerator, made
        # on first hover on the host (a copy of the transpose that a pair never hovered skips)
        self._rows = {"query": self.point_to_point}
        if on_host[2] is not None:
            self._rows["reference"] = _frozen(on_host[2])
        self.grid_query, self.grid_reference = query.grid, reference.grid
        lins = (query.linearization, reference.linearization)
        worst = next((lin for lin in lins if lin.rule == FIRST_ORDER), lins[0])
        self.rule, self.rule_detail = worst.rule, worst.description
        self.image_shape_query, self.image_shape_reference = query.image_shape, reference.image_shape
        self._grid_maps: dict[tuple[str, str], np.ndarray] = {
            key: _frozen(value.reshape(grids[key[1]])) for key, value in zip(overall, on_host[3:])
        }
        # at image size on first request (:meth:`overall`): a viewer draws one method's maps, and
        # faithfulness, agreement and orientation read the grid maps only
        self._image_maps: dict[tuple[str, str], np.ndarray] = {}
        self._groups: list[np.ndarray] | None = None
        self._attention: dict[str, dict[str, np.ndarray]] = {}

    # ------------------------------------------------------------------ checks
    def _side(self, side: str) -> _Side:
        if side not in self._sides:
            raise ValueError(f"side must be 'query' or 'reference', got {side!r}")
        return self._sides[side]

    @staticmethod
    def _other(side: str) -> str:
        return "reference" if side == "query" else "query"

    def _rows_of(self, side: str) -> np.ndarray:
        """``side``'s hover rows: the point-to-point tensor (query) or its transpose (reference),
        float32 C-contiguous, read-only."""
        if side not in self._rows:
            self._rows[side] = _frozen(self.point_to_point.T)
        return self._rows[side]

    def _model_of(self, side: str) -> torch.nn.Module:
        """The model (a two-branch model's branch) that embedded ``side``."""
        return self._sides[side].model or self._model

    # ------------------------------------------------------------------ overall maps
    def add_overall(self, method: str, query_grid: np.ndarray, reference_grid: np.ndarray) -> None:
        """Serve grid maps computed elsewhere (e.g. :mod:`.occlusion`) as overall maps of
        ``method``, like the built-in methods (``overall_grid``, ``overall``)."""
        if method in registry.methods("explain"):
            raise ValueError(f"{method!r} is a built-in method")
        for side, grid in zip(SIDES, (query_grid, reference_grid)):
            grid = np.asarray(grid, dtype=np.float32)
            if grid.shape != tuple(self._sides[side].grid):
                raise ValueError(f"{method} map of shape {grid.shape} for the {side}'s grid {self._sides[side].grid}")
            self._grid_maps[(method, side)] = _frozen(grid)
            self._image_maps.pop((method, side), None)

    def overall_grid(self, method: str, side: str) -> np.ndarray:
        """Signed overall map of ``method`` on ``side``'s feature grid (``h x w``)."""
        s = self._side(side)
        key = (method, side)
        if method not in registry.methods("explain") and key not in self._grid_maps:
            raise ValueError(f"unknown method {method!r}; choose from {', '.join(registry.methods('explain'))}")
        if key not in self._grid_maps:
            if method in registry.methods("gradcam"):
                other = self._sides[self._other(side)]
                with eval_mode(self._model_of(side)):
                    maps = gradcam_maps(head_function(self._model_of(side), s.out, s.index),
                                        s.out.feature_map[s.index : s.index + 1], other.embedding_raw)
                for name in registry.methods("gradcam"):
                    self._grid_maps[(name, side)] = _frozen(maps[name].cpu().numpy())
            else:  # grad_transfer
                if self.grad_bank is None:
                    raise ValueError("grad_transfer needs Grad-CAM weights of labelled images: pass a "
                                     "GradWeightBank (grad_bank=...) built from a feature file's grad_weights")
                emb = s.out.embedding[s.index].detach().float().cpu().numpy()
                weights = torch.from_numpy(self.grad_bank.weights_for(emb))
                fmap = s.out.feature_map[s.index : s.index + 1]
                self._grid_maps[key] = _frozen(transferred_map(weights, fmap).cpu().numpy())
        return self._grid_maps[key]

    def overall(self, method: str, side: str, sign: str = "signed") -> np.ndarray:
        """Overall map of ``method`` at ``side``'s original image size (``H x W`` float32):
        the grid map upsampled bilinearly, then split by ``sign``."""
        if sign not in SIGNS:
            raise ValueError(f"sign must be one of {', '.join(SIGNS)}, got {sign!r}")
        key = (method, side)
        if key not in self._image_maps:
            grid = self.overall_grid(method, side)
            self._image_maps[key] = _frozen(upsample(grid, self._side(side).image_shape))
        full = self._image_maps[key]
        if sign == "positive":
            return np.maximum(full, 0.0)
        if sign == "negative":
            return np.maximum(-full, 0.0)
        return full

    # ------------------------------------------------------------------ partial maps
    def partial_map(self, side: str, x: float, y: float) -> np.ndarray:
        """The other image's grid map for point ``(x, y)`` of ``side``: the bilinear blend of the
        point-to-point rows (``side == "query"``) or columns of the 4 cells around the point."""
        s = self._side(side)
        idx, wts = bilinear_weights(x, y, s.image_shape, s.grid)
        rows = self._rows_of(side)
        out = np.zeros(rows.shape[1], dtype=np.float32)
        for i, w in zip(idx, wts):
            if w:
                out += np.float32(w) * rows[i]
        return out.reshape(self._sides[self._other(side)].grid)

    def partial_map_image(self, side: str, x: float, y: float, shape: tuple[int, int] | None = None) -> np.ndarray:
        """:meth:`partial_map` upsampled to ``shape`` (default: the other image's size)."""
        target = self._sides[self._other(side)].image_shape if shape is None else shape
        return upsample(self.partial_map(side, x, y), target)

    def share(self, side: str, x: float, y: float) -> float:
        """The hovered point's share of the similarity: the sum of its partial map (its
        point-to-point terms) divided by the cosine similarity (NaN when the similarity is 0).
        Summed over all cell centres of one side the shares give ``sum(P) / similarity``."""
        total = float(self.partial_map(side, x, y).sum(dtype=np.float64))
        return total / self.similarity if self.similarity != 0 else float("nan")

    def hover_renderer(self, side: str, shape: tuple[int, int] | None = None, lut: np.ndarray | None = None,
                       signed: bool = False, scale: float | None = None) -> HoverRenderer:
        """An allocation-free renderer of ``side``'s partial maps as RGBA images of the other
        image (``shape``: default the other image's size); see :class:`.HoverRenderer`."""
        s, o = self._side(side), self._sides[self._other(side)]
        return HoverRenderer(self._rows_of(side), s.image_shape, s.grid,
                             o.image_shape if shape is None else shape, o.grid, lut=lut,
                             signed=signed, scale=scale)

    def correspondences(self, n: int = 10, radius: int = MATCH_RADIUS) -> list[dict]:
        """Top ``n`` matched position pairs (see :func:`.top_matches`)."""
        return top_matches(self.point_to_point, self.grid_query, self.grid_reference,
                           self.image_shape_query, self.image_shape_reference, n, radius)

    # ------------------------------------------------------------------ groups, attention
    @property
    def num_groups(self) -> int:
        return len(self._model.group_slices)

    def group_point_to_point(self, p: int) -> np.ndarray:
        """Group ``p``'s ``nq x nr`` tensor (divided by the global ``|Eq||Er|``: the groups'
        tensors sum to :attr:`point_to_point`)."""
        if not 0 <= p < self.num_groups:
            raise ValueError(f"group {p} out of range: the model has {self.num_groups} group(s)")
        if self._groups is None:
            q, r = self._sides["query"], self._sides["reference"]
            mats = group_point_to_point(q.contributions, r.contributions, self._model.group_slices, self._norm)
            self._groups = [_frozen(m.cpu().numpy()) for m in mats]
        return self._groups[p]

    def attention_maps(self, side: str) -> dict[str, np.ndarray]:
        """``name -> P x H x W`` attention maps of ``side`` (see :mod:`.attention`)."""
        s = self._side(side)
        if side not in self._attention:
            self._attention[side] = attention_maps(self._model_of(side), s.out, s.image_shape, s.index)
        return self._attention[side]

    def point_to_point_4d(self) -> np.ndarray:
        """The tensor as ``hq x wq x hr x wr`` (the explanation npz layout)."""
        return self.point_to_point.reshape(*self.grid_query, *self.grid_reference)

    def embedding(self, side: str) -> np.ndarray:
        """``side``'s L2-normalized embedding (D)."""
        s = self._side(side)
        return s.out.embedding[s.index].detach().float().cpu().numpy()


def _to_host(tensors: list[torch.Tensor | None], packed: bool | None = None) -> list[np.ndarray | None]:
    """The tensors as numpy arrays (float32, except float64 ones), ``None`` kept. On the host they
    are views; from an accelerator they come over packed in ONE transfer (one synchronisation
    instead of one per tensor): float64 tensors travel as their float32 bit pairs. ``packed``
    forces either way (default: packed unless all are on the host)."""
    present = [t.detach() for t in tensors if t is not None]
    if packed is None:
        packed = not all(t.device.type == "cpu" for t in present)
    if not packed:
        return [None if t is None else t.detach().numpy() for t in tensors]
    flat = [(t.contiguous().view(torch.float32) if t.dtype == torch.float64 else t.float()).reshape(-1)
            for t in present]
    packed = torch.cat(flat).cpu().numpy()
    out, start = [], 0
    for t in tensors:
        if t is None:
            out.append(None)
            continue
        t = t.detach()
        step = t.numel() * (2 if t.dtype == torch.float64 else 1)
        part = packed[start:start + step]
        out.append((part.view(np.float64) if t.dtype == torch.float64 else part).reshape(t.shape))
        start += step
    return out


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float32)
    a.flags.writeable = False
    return a


def _input_sizes(model: torch.nn.Module, size) -> tuple[int, int]:
    if size is None:
        s = model.preprocess.size
        return s, s
    if isinstance(size, (tuple, list)):
        if len(size) != 2:
            raise ValueError(f"size must be an int or a (query, reference) pair, got {size!r}")
        return int(size[0]), int(size[1])
    return int(size), int(size)


def explain_pair(
    model: torch.nn.Module,
    image_q: ImageLike,
    image_r: ImageLike,
    device: str | torch.device = "cpu",
    size: int | tuple[int, int] | None = None,
    grad_bank: GradWeightBank | None = None,
) -> PairExplanation:
    """Explain the similarity of two images (see module docstring).

    ``image_q``/``image_r``: uint8 arrays of any size (RGB, grayscale or RGBA) or image paths.
    ``size``: network input side for both images (``None``: the model's ``image_size``), or a
    ``(query, reference)`` pair for cross-view inputs of different sizes. The model runs in eval
    mode (its mode is restored afterwards); ``device`` is where it runs (the model is expected
    to be there already).

    A :class:`~dmlviewer.core.models.two_branch.TwoBranchModel` embeds the query with its query
    branch and the reference with its reference branch, each at its own input shape (``size``:
    ``None``, or a ``(query, reference)`` pair whose items are sides or ``(height, width)``
    pairs); the point-to-point tensor is then between the two branches' grids.
    """
    rgb_q, rgb_r = as_rgb(image_q), as_rgb(image_r)
    if isinstance(model, TwoBranchModel):
        return _explain_two_branch(model, rgb_q, rgb_r, as_device(device), size, grad_bank)
    size_q, size_r = _input_sizes(model, size)
    dev = as_device(device)
    preprocess = model.preprocess
    x_q, x_r = pair_inputs(preprocess, (rgb_q, rgb_r), (size_q, size_r), dev)
    with eval_mode(model):
        try:
            if x_q.shape == x_r.shape:
                out, lin = cuda_graph.forward_decomposed(model, torch.stack([x_q, x_r]))
                outs, indices = (out, out), (0, 1)
                lins = ((lin, 0), (lin, 1))
            else:
                (out_q, lin_q), (out_r, lin_r) = (cuda_graph.forward_decomposed(model, x[None]) for x in (x_q, x_r))
                outs, indices = (out_q, out_r), (0, 0)
                lins = ((lin_q, 0), (lin_r, 0))
        except AssertionError:
            # a module of one input size says which (not timm's bare AssertionError); asked only
            # on failure, since walking the module costs every pair a little host time
            from dmlviewer.core.models.opening import check_input_size

            for shape in dict.fromkeys(tuple(x.shape[-2:]) for x in (x_q, x_r)):
                check_input_size(model, shape, "size")
            raise
    sides = []
    for rgb, out, index, (lin, li) in zip((rgb_q, rgb_r), outs, indices, lins):
        sides.append(_Side(
            image_shape=rgb.shape[:2],
            grid=tuple(lin.grid),
            contributions=lin.contributions[li].detach().float(),
            bias=lin.bias[li].detach().float(),
            out=out,
            index=index,
            linearization=lin,
        ))
    return PairExplanation(model, sides[0], sides[1], grad_bank)


def _explain_two_branch(model: TwoBranchModel, rgb_q: np.ndarray, rgb_r: np.ndarray, dev: torch.device,
                        size, grad_bank: GradWeightBank | None) -> PairExplanation:
    """:func:`explain_pair` for a two-branch model: each image through its own branch at its own
    input shape (two forward passes, two decompositions on two grids)."""
    if size is not None and not (isinstance(size, (tuple, list)) and len(size) == 2):
        raise ValueError(f"size for a two-branch model must be None or a (query, reference) pair, got {size!r}")
    sizes = (None, None) if size is None else tuple(size)
    sides = []
    with eval_mode(model):
        for side, rgb, s in zip(SIDES, (rgb_q, rgb_r), sizes):
            branch = model.branch(side)
            x = model.preprocess_of(side)(rgb, s, device=dev)
            out, lin = cuda_graph.forward_decomposed(branch, x[None])
            sides.append(_Side(image_shape=rgb.shape[:2], grid=tuple(lin.grid),
                               contributions=lin.contributions[0].detach().float(),
                               bias=lin.bias[0].detach().float(), out=out, index=0, linearization=lin,
                               model=branch))
    return PairExplanation(model, sides[0], sides[1], grad_bank)
