"""Pair preparation keeps its tensors on the device and brings them over in one packed
transfer (issue 32); what arrives is what the tensors held."""

from __future__ import annotations

import numpy as np
import torch

from dmlviewer.core.explain.pair import _to_host
from dmlviewer.core.explain.pairwise import pair_terms


def test_packed_transfer_returns_each_tensor_exactly():
    g = torch.Generator().manual_seed(0)
    a64 = torch.randn(10, dtype=torch.float64, generator=g)
    m = torch.randn(5, 7, generator=g)
    v = torch.randn(7, generator=g)
    got = _to_host([a64, m, None, m.T, v], packed=True)
    assert got[2] is None
    assert got[0].dtype == np.float64
    np.testing.assert_array_equal(got[0], a64.numpy())
    np.testing.assert_array_equal(got[1], m.numpy())
    np.testing.assert_array_equal(got[3], m.T.numpy())
    np.testing.assert_array_equal(got[4], v.numpy())


def test_scalars_from_one_copy_match_their_definitions():
    g = torch.Generator().manual_seed(1)
    cq, bq, cr, br = (torch.randn(*s, generator=g) for s in ((9, 6), (6,), (12, 6), (6,)))
    t = pair_terms(cq, bq, cr, br)
    eq, er = cq.sum(0) + bq, cr.sum(0) + br
    z = float(eq.double().norm() * er.double().norm())
    assert t.norm == z
    assert abs(t.similarity - float(eq.double() @ er.double()) / z) < 1e-12
    assert abs(t.bias_query - float(cq.sum(0).double() @ br.double()) / z) < 1e-12
    assert abs(t.bias_reference - float(cr.sum(0).double() @ bq.double()) / z) < 1e-12
    assert abs(t.bias_both - float(bq.double() @ br.double()) / z) < 1e-12
    # scalars handed over with other arrays are used as they are (no second copy)
    t2 = pair_terms(cq, bq, cr, br)
    t2.set_host_scalars([0.0] * 9 + [2.0])
    assert t2.similarity == 0.0 and t2.norm == 2.0
