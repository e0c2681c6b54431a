"""m-per-class batches: composition, determinism per (seed, epoch), resumption, rank split."""

from __future__ import annotations

import numpy as np
import pytest

from dmlviewer.core.train.sampler import MPerClassBatches, thin_classes


def _labels() -> np.ndarray:
    labels = np.repeat(np.arange(8), 6)
    return np.concatenate([labels, [8, 9]])  # classes 8 and 9 have one image each


def test_batches_hold_c_classes_of_m_images_and_skip_thin_classes():
    labels = _labels()
    assert thin_classes(labels) == [8, 9]
    sampler = MPerClassBatches(labels, classes_per_batch=3, images_per_class=2, seed=1)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 48 // 6
    for batch in batches:
        values, counts = np.unique(labels[batch], return_counts=True)
        assert len(values) == 3 and set(counts) == {2}
        assert not set(values) & {8, 9}


def test_same_seed_and_epoch_give_same_batches_and_epochs_differ():
    labels = _labels()
    a = MPerClassBatches(labels, 2, 3, seed=5)
    b = MPerClassBatches(labels, 2, 3, seed=5)
    np.random.seed(0)  # the global numpy generator plays no part
    first = list(a)
    np.random.seed(123)
    assert first == list(b)
    b.set_epoch(1)
    assert list(b) != first


def test_resuming_mid_epoch_continues_with_the_remaining_batches():
    labels = _labels()
    sampler = MPerClassBatches(labels, 2, 3, seed=7)
    sampler.set_epoch(3)
    full = list(sampler)
    state = {**sampler.state_dict(), "start": 5}
    resumed = MPerClassBatches(labels, 2, 3, seed=0)
    resumed.load_state_dict(state)
    assert list(resumed) == full[5:]


def test_ranks_get_disjoint_batches_of_the_same_global_list():
    labels = _labels()
    ranks = [MPerClassBatches(labels, 2, 3, seed=2, rank=r, world_size=2) for r in range(2)]
    single = MPerClassBatches(labels, 2, 3, seed=2)
    per_rank = [list(s) for s in ranks]
    assert len(per_rank[0]) == len(per_rank[1]) == len(single) // 2
    interleaved = [b for pair in zip(*per_rank) for b in pair]
    assert interleaved == list(single)[: len(interleaved)]


def test_too_many_classes_per_batch_is_an_error():
    with pytest.raises(ValueError, match="only 8 classes"):
        MPerClassBatches(_labels(), classes_per_batch=9, images_per_class=2)
