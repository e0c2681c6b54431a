"""Activation decomposition of a model's embedding: ``E = sum_ij C_ij + B`` (seed 000 Sec. 4).

:func:`decompose` uses the head's exact rule (``model.linearize``: GAP, GMP, GeM, flatten, BN,
FC+ReLU, grouping and attention heads with their masks/gates/attention frozen) and falls back
to the generic Jacobian decomposition of :mod:`dmlviewer.core.models.jacobian` for a head that
has none, logging a
warning once per head type. :func:`head_function` exposes the head as a function of the last
feature map (other inputs, such as the multi-layer head's intermediate maps, held at their
values from the forward pass), which the fallback and Grad-CAM differentiate.
"""

from __future__ import annotations

import logging

import torch

from dmlviewer.core.models.jacobian import HeadFn, jacobian_decomposition
from dmlviewer.core.models import EmbeddingModel, Linearization, ModelOutput
from dmlviewer.core.models.output import FIRST_ORDER

log = logging.getLogger(__name__)

_warned: set[str] = set()


def head_function(model: EmbeddingModel, out: ModelOutput, index: int = 0) -> HeadFn:
    """``A (1 x C x h x w) -> embedding_raw (1 x D)`` for image ``index`` of ``out``'s batch
    (the model's :meth:`~dmlviewer.core.models.EmbeddingModel.head_function`)."""
    return model.head_function(out, index)


def decompose(model: EmbeddingModel, out: ModelOutput) -> Linearization:
    """Contributions (B x (h*w) x D) and bias (B x D) of every image in ``out`` (Eq. 3)."""
    try:
        with torch.no_grad():
            return model.linearize(out)
    except NotImplementedError:
        name = type(model.head).__name__
        if name not in _warned:
            _warned.add(name)
            log.warning(
                "head %s has no exact decomposition rule: using the Jacobian decomposition "
                "(exact only for piecewise-linear heads)", name
            )
    parts, biases = [], []
    for i in range(out.feature_map.shape[0]):
        c, b = jacobian_decomposition(head_function(model, out, i), out.feature_map[i : i + 1])
        parts.append(c)
        biases.append(b)
    return Linearization(torch.stack(parts), torch.stack(biases), tuple(out.feature_map.shape[-2:]),
                         rule=FIRST_ORDER)


def forward_decomposed(model: EmbeddingModel, x: torch.Tensor) -> tuple[ModelOutput, Linearization]:
    """``model(x)`` and its decomposition; a model that can do both in one pass (a live module,
    whose head is differentiated by the same forward) does, the others run forward then
    :func:`decompose`."""
    both = getattr(model, "forward_decomposed", None)
    if both is not None:
        return both(x)
    with torch.no_grad():
        out = model(x)
    return out, decompose(model, out)
