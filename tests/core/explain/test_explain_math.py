"""Pair mathematics on contribution tensors, the Jacobian fallback and the Grad-CAM relations
(seed 000 Eq. 3, Sec. 4.3, App. A.4-A.5), on small heads of our own with closed-form rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from explain_heads import TinyHead, random_map

from dmlviewer.core.explain.gradcam import gradcam_maps, transferred_map
from dmlviewer.core.models.jacobian import jacobian_decomposition
from dmlviewer.core.explain.pairwise import group_point_to_point, pair_terms

HEADS = [
    ("gap", 0),
    ("gmp", 0),
    ("flatten", 0),
    ("gap", 7),
    ("gmp", 7),
    ("flatten", 7),
]


def _random_terms(nq=12, nr=20, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(nq, dim, generator=g),
        torch.randn(dim, generator=g),
        torch.randn(nr, dim, generator=g),
        torch.randn(dim, generator=g),
    )


def test_eq3_completeness_and_overall_maps():
    cq, bq, cr, br = _random_terms()
    t = pair_terms(cq, bq, cr, br)
    eq, er = cq.sum(0) + bq, cr.sum(0) + br
    cos = float(torch.nn.functional.cosine_similarity(eq, er, dim=0))
    assert t.similarity == pytest.approx(cos, abs=1e-6)
    total = float(t.point_to_point.double().sum()) + t.bias_query + t.bias_reference + t.bias_both
    assert total == pytest.approx(cos, abs=1e-5)
    z = float(eq.norm() * er.norm())
    # each bias term as written in Eq. 3
    assert t.bias_query == pytest.approx(float(cq.sum(0) @ br) / z, abs=1e-5)
    assert t.bias_reference == pytest.approx(float(cr.sum(0) @ bq) / z, abs=1e-5)
    assert t.bias_both == pytest.approx(float(bq @ br) / z, abs=1e-5)
    # one entry against its definition
    assert float(t.point_to_point[3, 5]) == pytest.approx(float(cq[3] @ cr[5]) / z, abs=1e-6)
    # Decomposition = sum over the other image; Decomposition+Bias = C_ij . E_other / Z
    torch.testing.assert_close(t.overall_query, t.point_to_point.sum(1), atol=1e-5, rtol=0)
    torch.testing.assert_close(t.overall_reference, t.point_to_point.sum(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(t.overall_bias_query, cq @ er / z, atol=1e-5, rtol=0)
    assert float(t.overall_bias_query.sum()) == pytest.approx(
        float(t.point_to_point.sum()) + t.bias_query, abs=1e-5
    )
    assert float(t.overall_bias_reference.sum()) == pytest.approx(
        float(t.point_to_point.sum()) + t.bias_reference, abs=1e-5
    )


def test_group_tensors_sum_to_whole():
    cq, bq, cr, br = _random_terms(dim=12)
    t = pair_terms(cq, bq, cr, br)
    slices = [slice(0, 4), slice(4, 8), slice(8, 12)]
    groups = group_point_to_point(cq, cr, slices, t.norm)
    assert len(groups) == 3
    torch.testing.assert_close(sum(groups), t.point_to_point, atol=1e-5, rtol=0)
    assert not torch.allclose(groups[0], groups[1])


@pytest.mark.parametrize("pooling,hidden", HEADS)
def test_jacobian_fallback_matches_exact_rules(pooling, hidden):
    torch.manual_seed(1)
    head = TinyHead(pooling, hidden=hidden).eval()
    a = random_map(seed=2)
    contrib, bias = jacobian_decomposition(head, a, budget=3 * a.numel() * 4)  # chunks of 3 rows
    exact_c, exact_b = head.exact(a)
    torch.testing.assert_close(contrib, exact_c, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(bias, exact_b, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(contrib.sum(0) + bias, head(a)[0].detach(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pooling,hidden", HEADS)
def test_rgradcam_equals_decomposition_plus_bias(pooling, hidden):
    """Sec. 4.3: gradient x activation of the target Eq.Er/(|Eq||Er|) (norms constant) is the
    Decomposition+Bias map Cq_ij . Er / Z, exactly, for piecewise-linear heads."""
    torch.manual_seed(3)
    head = TinyHead(pooling, hidden=hidden).eval()
    aq, ar = random_map(seed=4), random_map(seed=5)
    cq, bq = head.exact(aq)
    cr, br = head.exact(ar)
    t = pair_terms(cq, bq, cr, br)
    maps = gradcam_maps(head, aq, (cr.sum(0) + br))
    decomposition_bias = t.overall_bias_query.reshape(head.grid)
    torch.testing.assert_close(maps["rgradcam"], decomposition_bias, atol=1e-6, rtol=1e-4)
    if pooling == "gap":  # App. A.5: the GAP over the gradient is harmless for GAP heads
        torch.testing.assert_close(maps["gradcam_nonorm"], decomposition_bias, atol=1e-6, rtol=1e-4)
    else:  # GMP (App. A.4) and flatten (Eq. 4): the GAP over the gradient changes the map
        diff = float((maps["gradcam_nonorm"] - decomposition_bias).abs().max())
        assert diff > 1e-3 * float(decomposition_bias.abs().max())
    # the cosine target's Jacobian of the L2 normalization (Eq. 13) changes the map as well
    assert float((maps["gradcam"] - maps["gradcam_nonorm"]).abs().max()) > 1e-4
    # channel weights reproduce the map without a backward pass (grad-weight transfer)
    torch.testing.assert_close(transferred_map(maps["weights_dot"], aq), maps["gradcam_nonorm"])


def test_gmp_gradcam_is_scattered_but_decomposition_is_sparse():
    """App. A.4: the GMP decomposition is nonzero only at argmax positions; Grad-CAM is not."""
    torch.manual_seed(6)
    head = TinyHead("gmp", channels=3, grid=(5, 5)).eval()
    aq, ar = random_map(3, (5, 5), seed=7), random_map(3, (5, 5), seed=8)
    cq, _ = head.exact(aq)
    argmax_cells = set(aq[0].flatten(1).argmax(1).tolist())
    nonzero_cells = set(torch.nonzero(cq.abs().sum(1) > 0).flatten().tolist())
    assert nonzero_cells <= argmax_cells
    maps = gradcam_maps(head, aq, head(ar)[0].detach())
    assert int((maps["gradcam_nonorm"].abs() > 1e-9).sum()) > len(argmax_cells)
    assert int((maps["rgradcam"].abs() > 1e-9).sum()) <= len(argmax_cells)


def test_decomposition_of_numpy_reference_loop():
    """The single matrix product equals the seed's four nested loops."""
    cq, bq, cr, br = _random_terms(nq=6, nr=4, dim=5, seed=9)
    t = pair_terms(cq, bq, cr, br)
    z = float((cq.sum(0) + bq).norm() * (cr.sum(0) + br).norm())
    ref = np.zeros((2, 3, 2, 2))
    cqn, crn = cq.numpy().reshape(2, 3, 5), cr.numpy().reshape(2, 2, 5)
    for i in range(2):
        for j in range(3):
            for x in range(2):
                for y in range(2):
                    ref[i, j, x, y] = float(np.dot(cqn[i, j], crn[x, y])) / z
    np.testing.assert_allclose(t.point_to_point.numpy().reshape(2, 3, 2, 2), ref, atol=1e-6)
