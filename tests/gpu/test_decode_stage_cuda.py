"""The decode stage on CUDA (``core.data.decode_stage``, issue 43): with the CPU decoder it
gives the CPU path's tensors, and running ahead on its own thread and stream it hands over the
same batches as preparing each one in the consumer's stream (no batch overwritten or read before
it is ready), for both decoders. nvJPEG against OpenCV through the stage:
``test_cuda_paths.py``. Skipped without CUDA; ``packaging/gpu_check.sh`` runs them."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from dmlviewer.core.data import make_demo_data, open_dataset

    root = make_demo_data(tmp_path_factory.mktemp("stage") / "data", classes=6, per_class=12, size=96, seed=4)
    return open_dataset(root).select_split("all")


def test_the_stage_with_the_cpu_decoder_gives_the_cpu_paths_tensors_on_cuda(dataset):
    """uint8 levels from the workers, copied and normalized on the stage's stream: the host's
    float32 normalization of the same levels (within float32 rounding: the GPU may fuse the
    multiply and subtract)."""
    from dmlviewer.core.data.decode_stage import decoded_batches
    from dmlviewer.core.data.torch_dataset import ImageFolderDataset, start_workers
    from dmlviewer.core.data.transforms import Preprocess
    from dmlviewer.core.evaluate.extract import make_loader

    preprocess, dev = Preprocess(64), torch.device("cuda")
    expected = ImageFolderDataset(dataset, preprocess)
    loader = make_loader(dataset, preprocess, 16, dev, 2, decode="cpu")
    rows = 0
    for x, index in decoded_batches(start_workers(loader), loader.dataset, dev):
        assert x.is_cuda and x.is_contiguous(memory_format=torch.channels_last)
        want = torch.stack([expected[int(i)][0] for i in index])
        assert (x.cpu() - want).abs().max() <= 1e-6
        rows += len(index)
    assert rows == len(dataset)


@pytest.mark.parametrize("decode", ["cpu", "device"])
def test_running_ahead_on_its_own_stream_hands_over_the_batches_made_in_line(dataset, decode):
    """The consumer is slowed by queued GPU work on its own stream after each batch, so the
    stage prepares (and allocates) the next batches while earlier ones are still being read:
    every batch must equal the one prepared in the consumer's stream, one at a time."""
    from dmlviewer.core.data.decode_stage import decoded_batches
    from dmlviewer.core.data.transforms import Preprocess
    from dmlviewer.core.evaluate.extract import make_loader

    preprocess, dev = Preprocess(80), torch.device("cuda")
    loader = make_loader(dataset, preprocess, 8, dev, 0, decode=decode)
    in_line = [(x.cpu(), i) for x, i in decoded_batches(iter(loader), loader.dataset, dev, depth=0)]
    weight = torch.randn(2048, 2048, device=dev)
    ahead = []
    for x, index in decoded_batches(iter(loader), loader.dataset, dev):
        total = x.sum()
        for _ in range(20):  # work queued behind the read of x on the consumer's stream
            total = total + (weight @ weight).sum() * 0
        ahead.append((x.cpu(), index, float(total)))
    assert len(ahead) == len(in_line)
    for (x, index, total), (x0, index0) in zip(ahead, in_line):
        assert torch.equal(index, index0) and torch.equal(x, x0)
        assert total == pytest.approx(float(x0.double().sum()), rel=1e-4)
