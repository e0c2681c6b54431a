"""Feature files from elsewhere: HDF5 features that read other files are refused before
anything is read; sizes, dtypes and values are checked against the schema."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from dmlviewer.core.evaluate import StoreError, read_features, write_features
from dmlviewer.core.explain import add_grad_weights

N = 6


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    return {"embeddings_raw": rng.standard_normal((N, 8)).astype(np.float32), "labels": np.arange(N) % 3,
            "paths": [f"img/{i}.jpg" for i in range(N)], "split": "test"}


def _edit(path, edit):
    with h5py.File(path, "r+") as f:
        edit(f)
    return path


@pytest.fixture
def good(tmp_path):
    return write_features(tmp_path / "good.h5", _arrays(), {"dataset_root": "/data"})


def test_external_storage_is_never_read(tmp_path, good):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-CONTENT " * 4)

    def external(f):
        del f["paths"]
        f.create_dataset("paths", shape=(N,), dtype="S8", external=[(str(secret), 0, h5py.h5f.UNLIMITED)])

    _edit(good, external)
    with pytest.raises(StoreError, match="'paths' keeps its data in an external file") as info:
        read_features(good)
    assert "SECRET" not in str(info.value)


def test_external_links_and_virtual_datasets_are_not_followed(tmp_path, good):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["labels"] = np.arange(N)
    linked = tmp_path / "linked.h5"
    linked.write_bytes(good.read_bytes())

    def link(f):
        del f["labels"]
        f["labels"] = h5py.ExternalLink(str(other), "labels")

    _edit(linked, link)
    with pytest.raises(StoreError, match="external link"):
        read_features(linked)

    def virtual(f):
        del f["labels"]
        layout = h5py.VirtualLayout(shape=(N,), dtype="i8")
        layout[:] = h5py.VirtualSource(str(other), "labels", shape=(N,))
        f.create_virtual_dataset("labels", layout)

    _edit(good, virtual)
    with pytest.raises(StoreError, match="virtual dataset"):
        read_features(good)


def test_a_file_claiming_more_rows_than_it_stores_is_refused_before_reading(tmp_path):
    path = tmp_path / "claims.h5"
    with h5py.File(path, "w") as f:
        f.attrs["format_version"] = 1
        rows = 10**9
        for name in ("embeddings", "embeddings_raw"):
            f.create_dataset(name, shape=(rows, 128), dtype="f4", chunks=(1024, 128))
        f.create_dataset("labels", shape=(rows,), dtype="i8", chunks=(1024,))
        for name in ("paths", "split"):
            f.create_dataset(name, shape=(rows,), dtype=h5py.string_dtype(), chunks=(1024,))
    assert path.stat().st_size < 100_000
    with pytest.raises(StoreError, match="claims 1,000,000,000 rows"):
        read_features(path)


@pytest.mark.parametrize("name, data, message", [
    ("embeddings", np.zeros((N, 8), "S4"), "floating-point"),
    ("labels", np.zeros((N, 2), np.int64), "1 dimension"),
    ("labels", np.zeros(N, np.float32), "integers"),
    ("paths", np.arange(N), "text"),
])
def test_dtypes_and_shapes_outside_the_schema_are_refused(good, name, data, message):
    def replace(f):
        del f[name]
        f[name] = data

    _edit(good, replace)
    with pytest.raises(StoreError, match=message):
        read_features(good)


def test_embeddings_must_be_finite_and_normalized(good, tmp_path):
    bad = tmp_path / "nan.h5"
    bad.write_bytes(good.read_bytes())
    _edit(bad, lambda f: f["embeddings"].__setitem__(2, np.full(8, np.nan, np.float32)))
    with pytest.raises(StoreError, match="row 2"):
        read_features(bad)
    _edit(good, lambda f: f["embeddings"].__setitem__(slice(None), f["embeddings"][()] * 2))
    with pytest.raises(StoreError, match="not L2-normalized"):
        read_features(good)


def test_rewriting_carries_the_schema_and_known_extras_only(good):
    _edit(good, lambda f: f.create_dataset("zz_unknown", data=np.arange(N)))
    assert "zz_unknown" in read_features(good).extra
    add_grad_weights(good, np.ones((N, 4), np.float32))
    features = read_features(good)
    assert set(features.extra) == {"grad_weights"} and features.extra["grad_weights"].shape == (N, 4)
