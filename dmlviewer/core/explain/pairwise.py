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

from dataclasses import dataclass, field

import torch


@dataclass
class PairTerms:
    """The four terms of Eq. 3 for one pair, all already divided by ``Z = |Eq||Er|``.

    ``point_to_point``: ``nq x nr`` (flattened grids, row-major); ``similarity`` is the cosine of
    the two embeddings; completeness: ``point_to_point.sum() + bias_query + bias_reference +
    bias_both == similarity``.

    Everything stays on the contributions' device. ``scalars`` (float64, 10 values) holds the
    dot products of the query's ``(sum C, B, E)`` with the reference's ``(sum C, B, E)`` (a
    3 x 3 matrix, row-major) and ``Z``: reading ``bias_query``, ``similarity``, ... divides on
    the host after ONE copy of ``scalars`` (one synchronisation), or none when the caller has
    brought them over already (:meth:`set_host_scalars`).
    """

    point_to_point: torch.Tensor
    scalars: torch.Tensor
    overall_query: torch.Tensor  # nq, "Decomposition"
    overall_reference: torch.Tensor  # nr, "Decomposition"
    overall_bias_query: torch.Tensor  # nq, "Decomposition+Bias"
    overall_bias_reference: torch.Tensor  # nr, "Decomposition+Bias"
    _host: tuple[float, ...] | None = field(default=None, repr=False)

    def set_host_scalars(self, values) -> None:
        """The host copy of :attr:`scalars` (already transferred with other arrays)."""
        self._host = tuple(float(v) for v in values)

    def _dot(self, q: int, r: int) -> float:
        if self._host is None:
            self.set_host_scalars(self.scalars.detach().cpu().tolist())
        return self._host[3 * q + r] / self._host[9]

    # rows/columns of the 3 x 3 matrix: 0 = sum of the contributions, 1 = bias, 2 = embedding
    bias_query = property(lambda self: self._dot(0, 1), doc="sum Cq . Br / Z")
    bias_reference = property(lambda self: self._dot(1, 0), doc="Bq . sum Cr / Z")
    bias_both = property(lambda self: self._dot(1, 1), doc="Bq . Br / Z")
    similarity = property(lambda self: self._dot(2, 2), doc="Eq . Er / Z, the cosine")

    @property
    def norm(self) -> float:
        """``Z = |Eq||Er|``."""
        self._dot(0, 0)
        return self._host[9]


def pair_terms(
    contrib_q: torch.Tensor, bias_q: torch.Tensor, contrib_r: torch.Tensor, bias_r: torch.Tensor
) -> PairTerms:
    """Eq. 3 from the contributions ``C`` (``n x D``) and biases ``B`` (``D``) of both images.

    The point-to-point tensor is one matrix product ``Cq Cr^T / Z``, each side's two overall
    maps another (``Cq [sum Cr, Er] / Z``: no sum over the big tensor); the scalars are one
    3 x 3 product in float64. No value leaves the device (no
    synchronisation) and few operations are launched (the host, not the GPU, sets the pace
    of a pair on a GPU).
    """
    contrib_q = contrib_q.detach().float()
    contrib_r = contrib_r.detach().float()
    bias_q = bias_q.detach().float().reshape(-1)
    bias_r = bias_r.detach().float().reshape(-1)
    sum_q, sum_r = contrib_q.sum(0), contrib_r.sum(0)
    emb_q, emb_r = sum_q + bias_q, sum_r + bias_r
    vectors = torch.stack([sum_q, bias_q, emb_q, sum_r, bias_r, emb_r]).double()
    z = torch.linalg.vector_norm(vectors[2::3], dim=1).prod().clamp_min(1e-30)
    scalars = torch.cat([(vectors[:3] @ vectors[3:].T).reshape(-1), z[None]])
    zf = z.float()
    # 2 x n (rows contiguous); an n x 2 product with a stacked right side is 4x slower on a CPU
    query = (torch.stack([sum_r, emb_r]) @ contrib_q.T) / zf
    reference = (torch.stack([sum_q, emb_q]) @ contrib_r.T) / zf
    return PairTerms(
        point_to_point=(contrib_q @ contrib_r.T) / zf,
        scalars=scalars,
        overall_query=query[0],
        overall_reference=reference[0],
        overall_bias_query=query[1],
        overall_bias_reference=reference[1],
    )


def group_point_to_point(
    contrib_q: torch.Tensor, contrib_r: torch.Tensor, slices: list[slice], norm: float | torch.Tensor
) -> list[torch.Tensor]:
    """One ``nq x nr`` point-to-point tensor per embedding group, divided by the global ``Z``
    (``norm``) so that they sum to :attr:`PairTerms.point_to_point`."""
    return [(contrib_q[:, sl].float() @ contrib_r[:, sl].float().T) / norm for sl in slices]
