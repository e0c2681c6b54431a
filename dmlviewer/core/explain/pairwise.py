"""Activation decomposition of the cosine similarity of two images (seed 000 Eq. 2-3).

With both embeddings written in their affine form ``E = sum_ij C_ij + B`` (see
:func:`dmlviewer.core.explain.decompose`), the cosine similarity ``S = Eq . Er / Z`` with
``Z = |Eq| |Er|`` splits into four terms (Eq. 3)::

    S = sum_{ij,xy} Cq_ij . Cr_xy / Z      point_to_point (hq*wq x hr*wr), ONE matrix product
      + sum_ij Cq_ij . Br / Z              bias_query:     query contributions x reference bias
      + sum_xy Cr_xy . Bq / Z              bias_reference: reference contributions x query bias
      + Bq . Br / Z                        bias_both:      pure bias

Naming: ``bias_query`` is the bias term that varies over the *query* positions (it belongs to
the query's "Decomposition+Bias" map), ``bias_reference`` the one that varies over the
reference positions. Overall maps (Sec. 4.1): "Decomposition" of the query sums the
point-to-point tensor over the reference positions, ``Cq_ij . (Er - Br) / Z``;
"Decomposition+Bias" adds the query's bias term, ``Cq_ij . Er / Z`` (symmetric for the
reference). Both maps are signed; the positive part is what the paper shows, the negative
part is kept for counterfactual explanation (Sec. 3).

Group-wise tensors (grouping heads, seed 001): group ``p`` owns the embedding slice ``sl_p``;
``P_p = Cq[:, sl_p] Cr[:, sl_p]^T / Z`` uses the *global* ``Z`` so that the group tensors sum
to the whole tensor. (A group's own cosine would divide by ``|Eq_p||Er_p|`` instead: multiply
by ``Z / (|Eq_p||Er_p|)``.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PairTerms:
    """The four terms of Eq. 3 for one pair, all already divided by ``Z = |Eq||Er|``.

    ``point_to_point``: ``nq x nr`` (flattened grids, row-major); ``similarity`` is the cosine of
    the two embeddings; completeness: ``point_to_point.sum() + bias_query + bias_reference +
    bias_both == similarity``.
    """

    point_to_point: torch.Tensor
    bias_query: float
    bias_reference: float
    bias_both: float
    similarity: float
    norm: float
    overall_query: torch.Tensor  # nq, "Decomposition"
    overall_reference: torch.Tensor  # nr, "Decomposition"
    overall_bias_query: torch.Tensor  # nq, "Decomposition+Bias"
    overall_bias_reference: torch.Tensor  # nr, "Decomposition+Bias"


def pair_terms(
    contrib_q: torch.Tensor, bias_q: torch.Tensor, contrib_r: torch.Tensor, bias_r: torch.Tensor
) -> PairTerms:
    """Eq. 3 from the contributions ``C`` (``n x D``) and biases ``B`` (``D``) of both images.

    The point-to-point tensor is one matrix product ``Cq Cr^T / Z``; the overall maps are
    matrix-vector products (no sum over the big tensor needed).
    """
    contrib_q = contrib_q.float()
    contrib_r = contrib_r.float()
    bias_q = bias_q.float().reshape(-1)
    bias_r = bias_r.float().reshape(-1)
    sum_q = contrib_q.sum(0)
    sum_r = contrib_r.sum(0)
    emb_q = sum_q + bias_q
    emb_r = sum_r + bias_r
    z = (emb_q.double().norm() * emb_r.double().norm()).clamp_min(1e-30)
    zf = float(z)
    p2p = (contrib_q @ contrib_r.T) / zf
    dot = lambda a, b: float(a.double() @ b.double() / z)  # noqa: E731 (scalars in float64)
    return PairTerms(
        point_to_point=p2p,
        bias_query=dot(sum_q, bias_r),
        bias_reference=dot(sum_r, bias_q),
        bias_both=dot(bias_q, bias_r),
        similarity=dot(emb_q, emb_r),
        norm=zf,
        overall_query=(contrib_q @ sum_r) / zf,
        overall_reference=(contrib_r @ sum_q) / zf,
        overall_bias_query=(contrib_q @ emb_r) / zf,
        overall_bias_reference=(contrib_r @ emb_q) / zf,
    )


def group_point_to_point(
    contrib_q: torch.Tensor, contrib_r: torch.Tensor, slices: list[slice], norm: float
) -> list[torch.Tensor]:
    """One ``nq x nr`` point-to-point tensor per embedding group, divided by the global ``Z``
    (``norm``) so that they sum to :attr:`PairTerms.point_to_point`."""
    return [(contrib_q[:, sl].float() @ contrib_r[:, sl].float().T) / norm for sl in slices]
