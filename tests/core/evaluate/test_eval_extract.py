"""Feature extraction, evaluation and retrieval against direct computation."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from dmlviewer.core.progress import CancelToken, Cancelled, run_to_end


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from dmlviewer.core.data import make_demo_data, open_dataset

    root = make_demo_data(tmp_path_factory.mktemp("extract") / "data", classes=4, per_class=6, size=64, seed=2)
    return open_dataset(root)


@pytest.fixture(scope="module")
def model():
    from dmlviewer.core.models import build_model, default_config

    torch.manual_seed(0)
    return build_model(default_config(backbone="small_cnn", grouping="c", groups=2, dim=16, image_size=64)).eval()


def _direct(model, dataset):
    from dmlviewer.core.data import load_image, to_tensor

    x = torch.stack([to_tensor(load_image(dataset.abspath(i)), 64) for i in range(len(dataset))])
    with torch.no_grad():
        return model(x)


def test_extract_features_writes_the_schema_with_the_model_outputs(model, data, tmp_path):
    from dmlviewer.core.evaluate import extract_features, read_features

    out = tmp_path / "f.h5"
    events = list(extract_features(model, data, out, batch_size=5, num_workers=0, checkpoint_sha256="ab" * 32))
    assert [e.current for e in events if e.kind == "step"] == [5, 10, 15, 20, 24]
    assert events[-1].data["result"] == {"path": str(out), "num_images": 24, "skipped": 0}
    f = read_features(out)
    direct = _direct(model, data)
    np.testing.assert_allclose(f.embeddings, direct.embedding.numpy(), atol=1e-5)
    np.testing.assert_allclose(f.embeddings_raw, direct.embedding_raw.numpy(), atol=1e-5)
    np.testing.assert_allclose(f.groups, direct.groups.numpy(), atol=1e-5)
    np.testing.assert_array_equal(f.labels, data.labels)
    assert f.paths == data.paths and list(f.split) == list(data.split)
    assert f.attrs["checkpoint_sha256"] == "ab" * 32 and json.loads(f.attrs["model_config"]) == model.config
    assert f.attrs["dataset_root"] == str(data.root) and f.attrs["dataset_format"] == "cub" and f.attrs["created"]
    from dmlviewer.core.data.identity import listing_fingerprint

    assert f.attrs["dataset_fingerprint"] == listing_fingerprint(data) and len(f.attrs["dataset_fingerprint"]) == 64
    assert model.training is False


def test_unreadable_image_is_left_out(model, data, tmp_path):
    from dmlviewer.core.evaluate import extract_features, read_features

    broken = data.subset(np.arange(6))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    broken.paths[2] = str(bad)  # an absolute path replaces root / path
    run_to_end(extract_features(model, broken, tmp_path / "f.h5", batch_size=4, num_workers=0))
    f = read_features(tmp_path / "f.h5")
    assert len(f) == 5 and str(bad) not in f.paths
    np.testing.assert_array_equal(f.labels, np.delete(broken.labels, 2))


def test_cancelled_extraction_leaves_no_file(model, data, tmp_path):
    from dmlviewer.core.evaluate import extract_features

    cancel = CancelToken()
    job = extract_features(model, data, tmp_path / "f.h5", batch_size=4, num_workers=0, cancel=cancel)
    next(job)
    cancel.cancel()
    with pytest.raises(Cancelled):
        list(job)
    assert list(tmp_path.iterdir()) == []


def test_evaluate_stores_metrics_of_the_stored_embeddings(model, data, tmp_path):
    from dmlviewer.core.evaluate import compute_metrics, evaluate, read_features
    from dmlviewer.core.models import save_checkpoint

    ckpt = save_checkpoint(tmp_path / "model.pt", model)
    out = tmp_path / "f.h5"
    metrics = run_to_end(evaluate(ckpt, data.root, split="all", out=out, batch_size=7, num_workers=0, ks=(1, 3)))
    f = read_features(out)
    assert len(f) == 24
    assert metrics == pytest.approx(compute_metrics(f.embeddings, f.labels, ks=(1, 3)))
    assert {k: f.attrs[k] for k in metrics} == pytest.approx(metrics)
    assert f.attrs["checkpoint_sha256"] == hashlib.sha256(ckpt.read_bytes()).hexdigest()


def test_retrieve_matches_sorted_similarities(model, data, tmp_path):
    from dmlviewer.core.evaluate import extract_features, read_features, retrieve

    run_to_end(extract_features(model, data, tmp_path / "f.h5", num_workers=0))
    f = read_features(tmp_path / "f.h5")
    sims = f.embeddings @ f.embeddings[7]
    sims[7] = -np.inf
    expected = np.argsort(-sims, kind="stable")[:5]
    results = retrieve(tmp_path / "f.h5", 7, k=5)
    assert [r["index"] for r in results] == expected.tolist()
    assert results[0] == {"index": int(expected[0]), "path": f.paths[expected[0]],
                          "label": int(f.labels[expected[0]]), "similarity": pytest.approx(float(sims[expected[0]]))}
    assert len(retrieve(f, 7, k=100)) == 23
    with pytest.raises(IndexError):
        retrieve(f, 24)


def test_rows_written_in_blocks_are_the_batches_rows_in_order(model, data, tmp_path, monkeypatch):
    """Several batches gathered per HDF5 append (blocks of WRITE_ROWS rows, the last shorter):
    the file holds every row once, in listing order, with its own outputs."""
    from dmlviewer.core.evaluate import extract, extract_features, read_features

    monkeypatch.setattr(extract, "WRITE_ROWS", 5)
    run_to_end(extract_features(model, data, tmp_path / "blocks.h5", batch_size=3, num_workers=0))
    got = read_features(tmp_path / "blocks.h5")
    direct = _direct(model, data)
    assert list(got.paths) == list(data.paths)
    np.testing.assert_array_equal(got.labels, data.labels)
    np.testing.assert_allclose(got.embeddings, direct.embedding.numpy(), atol=1e-5)
    np.testing.assert_allclose(got.groups, direct.groups.numpy(), atol=1e-5)


def test_extraction_with_workers_after_opencv_ran_threaded_finishes(tmp_path):
    """Loader workers forked while OpenCV's thread pool exists (the app resized images before)
    must not touch that pool: a worker that set OpenCV's thread count hung forever."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "run.py"
    script.write_text(
        "import sys, numpy as np, cv2\n"
        "from pathlib import Path\n"
        "cv2.setNumThreads(4)\n"
        "big = np.zeros((2000, 2000, 3), np.uint8)\n"
        "for _ in range(3):\n"
        "    cv2.resize(big, (1000, 1000))\n"
        "from dmlviewer.core.data import make_demo_data, open_dataset\n"
        "from dmlviewer.core.evaluate import extract_features\n"
        "from dmlviewer.core.models import build_model, default_config\n"
        "from dmlviewer.core.progress import run_to_end\n"
        "d = Path(sys.argv[1])\n"
        "ds = open_dataset(make_demo_data(d / 'x', classes=2, per_class=3, size=64))\n"
        "model = build_model(default_config(backbone='small_cnn', image_size=64, dim=8)).eval()\n"
        "run_to_end(extract_features(model, ds, d / 'f.h5', batch_size=2, num_workers=2))\n"
        "print('finished')\n")
    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("finished")
