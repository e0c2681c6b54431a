"""One model's embeddings of a split (``core.evaluate.embed_split.model_split``, shared by
``compare --changes`` and the report): a fitting feature file is read and the model is not run;
without one the model is run and, with ``write``, its features are written to a file that a
cancelled run never leaves behind; a file of another model is refused (strict) or replaced by
running the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmlviewer.core.data import open_dataset
from dmlviewer.core.evaluate.embed_split import model_split
from dmlviewer.core.evaluate.extract import embed_dataset
from dmlviewer.core.evaluate.store import read_features
from dmlviewer.core.models import build_model, default_config
from dmlviewer.core.progress import CancelToken, Cancelled, run_to_end

SHA = "a" * 64


def _model(seed: int):
    torch.manual_seed(seed)
    return build_model(default_config(backbone="small_cnn", dim=16, image_size=64), load_pretrained=False).eval()


def _events(job) -> tuple[list, dict]:
    """The events of ``job`` and its result (the generator's return value)."""
    events = []
    while True:
        try:
            events.append(next(job))
        except StopIteration as stop:
            return events, stop.value


def _forward_raises(model):
    def forward(*args, **kwargs):
        raise AssertionError("the model was run")

    model.forward = forward
    return model


@pytest.fixture(scope="module")
def written(tiny_demo_root, tmp_path_factory):
    """The test split's features of model 0, written by ``model_split`` (``write``), and the
    model's own embeddings of the split."""
    dataset = open_dataset(tiny_demo_root)
    path = tmp_path_factory.mktemp("embed_split") / "f.h5"
    events, result = _events(model_split(_model(0), dataset, "test", "cpu", path, SHA, "A", 0, batch_size=5,
                                         strict=False, write=True, ks=(1, 2)))
    want = run_to_end(embed_dataset(_model(0), dataset.select_split("test"), 5, "cpu", 0))
    return dataset, path, events, result, want


def test_without_a_file_the_written_file_holds_the_model_embeddings(written):
    dataset, path, events, result, want = written
    indices = dataset.indices("test")
    assert len(indices) > 5 and not result["from_file"]
    np.testing.assert_array_equal(result["indices"], indices[want["rows"]])
    np.testing.assert_allclose(result["embeddings"], want["embeddings"], atol=1e-6)
    stored = read_features(path, include_raw=False, include_groups=False)
    assert stored.attrs["checkpoint_sha256"] == SHA and "recall@2" in stored.attrs and "map@r" in stored.attrs
    assert stored.paths == [dataset.paths[i] for i in result["indices"]]
    np.testing.assert_allclose(stored.embeddings, want["embeddings"], atol=1e-6)
    messages = [e.message for e in events if e.message]
    assert all(m.startswith("model A: ") for m in messages)
    assert messages[-1] == f"model A: features written to {path}"


def test_a_fitting_file_gives_exactly_its_rows_and_the_model_is_not_run(written):
    dataset, path, _, _, _ = written
    stored = read_features(path, include_raw=False, include_groups=False)
    row_of = {p: i for i, p in enumerate(stored.paths)}
    indices = dataset.indices("test")[::-1].copy()  # asked in another order than the file's
    dataset_reordered = dataset.subset(np.concatenate([dataset.indices("train"), indices]))
    for data in (dataset, dataset_reordered):
        for strict in (True, False):
            events, result = _events(model_split(_forward_raises(_model(0)), data, "test", "cpu", path, SHA, "B",
                                                 strict=strict))
            assert result["from_file"]
            np.testing.assert_array_equal(result["indices"], data.indices("test"))
            rows = [row_of[data.paths[i]] for i in data.indices("test")]
            np.testing.assert_array_equal(result["embeddings"], stored.embeddings[rows])
            assert [e.message for e in events] == [f"model B: features from {path}"]


def test_a_cancelled_write_leaves_no_file(tiny_demo_root, tmp_path):
    dataset = open_dataset(tiny_demo_root)
    cancel = CancelToken()
    job = model_split(_model(0), dataset, "test", "cpu", tmp_path / "f.h5", SHA, "A", 0, cancel, batch_size=2,
                      strict=False, write=True)
    steps = 0
    with pytest.raises(Cancelled):
        for event in job:
            steps += event.kind == "step"
            cancel.cancel()
    assert steps == 1 and list(tmp_path.iterdir()) == []


def test_a_file_of_another_model_is_refused_or_replaced_by_running_the_model(written):
    dataset, path, _, _, want = written
    with pytest.raises(ValueError) as caught:
        run_to_end(model_split(_forward_raises(_model(0)), dataset, "test", "cpu", str(path), "b" * 64, "B"))
    assert str(caught.value) == (f"feature file {path} of model B belongs to another model "
                                 "(checkpoint_sha256 aaaaaaaaaaaa)")
    _, result = _events(model_split(_model(0), dataset, "test", "cpu", path, "b" * 64, "B", 0, batch_size=5,
                                    strict=False, write=True))
    assert not result["from_file"]
    np.testing.assert_allclose(result["embeddings"], want["embeddings"], atol=1e-6)
