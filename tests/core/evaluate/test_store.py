"""The HDF5 feature store: round trips, schema checks, atomic writes (also under SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from dmlviewer.core.evaluate import (
    FORMAT_VERSION,
    FeatureWriter,
    StoreError,
    read_features,
    update_attrs,
    write_features,
)
from dmlviewer.core.evaluate.store import stale_temp_files
from dmlviewer.core.progress import CancelToken, Cancelled


def _arrays(n: int = 10, d: int = 8, seed: int = 0, groups: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    out = {
        "embeddings_raw": rng.standard_normal((n, d)).astype(np.float32) * 5,
        "labels": rng.integers(0, 4, n),
        "paths": [f"images/c{i % 4}/ü_{i}.jpg" for i in range(n)],
        "split": ["train" if i % 3 else "test" for i in range(n)],
        "boxes": np.where(rng.random((n, 1)) < 0.3, np.nan, rng.random((n, 4)) * 100).astype(np.float32),
    }
    if groups:
        out["groups"] = out["embeddings_raw"].reshape(n, 2, d // 2)
    return out


ATTRS = {"checkpoint_sha256": "ab" * 32, "model_config": {"backbone": "small_cnn", "dim": 8},
         "dataset_root": "/data/cub", "dataset_format": "cub"}


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


# --------------------------------------------------------------------------- round trips


def test_round_trip_keeps_arrays_and_attributes(tmp_path):
    arrays = _arrays(groups=True)
    path = write_features(tmp_path / "f.h5", arrays, ATTRS)
    f = read_features(path)
    raw = arrays["embeddings_raw"]
    np.testing.assert_array_equal(f.embeddings_raw, raw)
    np.testing.assert_allclose(f.embeddings, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(f.embeddings, axis=1), 1, rtol=1e-6)
    assert f.embeddings.dtype == np.float32 and f.labels.dtype == np.int64
    np.testing.assert_array_equal(f.labels, arrays["labels"])
    assert f.paths == arrays["paths"] and f.split.tolist() == arrays["split"]
    np.testing.assert_array_equal(f.boxes, arrays["boxes"])  # NaN positions included
    np.testing.assert_array_equal(f.groups, arrays["groups"])
    assert f.attrs["format_version"] == FORMAT_VERSION
    assert f.attrs["checkpoint_sha256"] == ATTRS["checkpoint_sha256"] and f.attrs["dataset_format"] == "cub"
    assert f.model_config == ATTRS["model_config"]
    assert f.attrs["created"].endswith("+00:00")
    assert f.indices("test").tolist() == [i for i, s in enumerate(arrays["split"]) if s == "test"]
    assert _temps(tmp_path) == []
    lean = read_features(path, include_raw=False, include_groups=False)
    assert lean.embeddings_raw is None and lean.groups is None


def test_batches_equal_one_shot_and_layout_is_chunked(tmp_path):
    arrays = _arrays(n=1300, d=512)
    write_features(tmp_path / "one.h5", arrays, ATTRS)
    with FeatureWriter(tmp_path / "many.h5", ATTRS) as w:
        for s in range(0, 1300, 256):
            w.append(**{k: v[s:s + 256] for k, v in arrays.items()})
        assert w.rows == 1300 and not (tmp_path / "many.h5").exists()  # appears only on close
    a, b = read_features(tmp_path / "one.h5"), read_features(tmp_path / "many.h5")
    for name in ("embeddings", "embeddings_raw", "labels", "boxes"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.paths == b.paths and a.groups is None
    with h5py.File(tmp_path / "many.h5") as f:
        assert f["embeddings"].chunks == (512, 512) and f["embeddings"].compression is None
        assert f["embeddings"].maxshape == (None, 512)
        assert f["labels"].compression == "gzip"
        assert "groups" not in f


def test_defaults_for_boxes_and_attributes_and_extra_arrays(tmp_path):
    arrays = _arrays()
    del arrays["boxes"]
    arrays["grad_weights"] = np.arange(30, dtype=np.float32).reshape(10, 3)
    write_features(tmp_path / "f.h5", arrays)
    f = read_features(tmp_path / "f.h5")
    assert np.isnan(f.boxes).all() and f.boxes.shape == (10, 4)
    assert f.attrs["checkpoint_sha256"] == "" and f.model_config == {}
    np.testing.assert_array_equal(f.extra["grad_weights"], arrays["grad_weights"])
    # rewriting from a read keeps everything, "created" included
    write_features(tmp_path / "g.h5", f.arrays, f.attrs)
    g = read_features(tmp_path / "g.h5")
    np.testing.assert_array_equal(g.extra["grad_weights"], arrays["grad_weights"])
    assert g.attrs == f.attrs


def test_given_embeddings_must_be_normalized_and_batches_consistent(tmp_path):
    arrays = _arrays()
    with pytest.raises(StoreError, match="not L2-normalized"):
        write_features(tmp_path / "f.h5", {**arrays, "embeddings": arrays["embeddings_raw"]})
    with pytest.raises(StoreError, match="disagree in length"):
        write_features(tmp_path / "f.h5", {**arrays, "labels": arrays["labels"][:-1]})
    with pytest.raises(StoreError, match="labels must be integers"):
        write_features(tmp_path / "f.h5", {**arrays, "labels": arrays["labels"].astype(float)})
    with pytest.raises(StoreError, match="same arrays"):
        with FeatureWriter(tmp_path / "f.h5") as w:
            w.append(**_arrays(groups=True))
            w.append(**_arrays())
    with pytest.raises(StoreError, match="nothing was appended"):
        with FeatureWriter(tmp_path / "f.h5"):
            pass
    with pytest.raises(StoreError, match="attribute 'nmi' is None"):
        write_features(tmp_path / "f.h5", arrays, {"nmi": None})
    assert not (tmp_path / "f.h5").exists() and _temps(tmp_path) == []


# -------------------------------------------------------------------------- bad files


def test_non_hdf5_truncated_and_missing_files(tmp_path):
    text = tmp_path / "notes.h5"
    text.write_text("these are not features")
    with pytest.raises(StoreError, match="not an HDF5 file"):
        read_features(text)
    good = write_features(tmp_path / "good.h5", _arrays(n=2000, d=64))
    cut = tmp_path / "cut.h5"
    data = good.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match="cut.h5: truncated or corrupt"):
        read_features(cut)
    with pytest.raises(FileNotFoundError):
        read_features(tmp_path / "absent.h5")


def test_other_version_missing_dataset_and_foreign_hdf5(tmp_path):
    path = write_features(tmp_path / "f.h5", _arrays())
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(StoreError, match=f"format_version {FORMAT_VERSION + 1}.*reads version {FORMAT_VERSION}"):
        read_features(path)
    path = write_features(tmp_path / "g.h5", _arrays())
    with h5py.File(path, "r+") as f:
        del f["labels"], f["split"]
    with pytest.raises(StoreError, match="missing datasets labels, split"):
        read_features(path)
    foreign = tmp_path / "other.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(StoreError, match="no format_version attribute"):
        read_features(foreign)
    path = write_features(tmp_path / "h.h5", _arrays())
    with h5py.File(path, "r+") as f:
        del f["boxes"]
        f["boxes"] = np.zeros((3, 4), np.float32)
    with pytest.raises(StoreError, match="inconsistent dataset shapes"):
        read_features(path)


# ------------------------------------------------------------------------ atomic writes


def test_failure_or_cancel_inside_the_writer_keeps_the_previous_file(tmp_path):
    path = write_features(tmp_path / "f.h5", _arrays(seed=1), ATTRS)
    before = path.read_bytes()
    token = CancelToken()
    with pytest.raises(Cancelled):
        with FeatureWriter(path) as w:
            w.append(**_arrays(seed=2))
            assert len(_temps(tmp_path)) == 1
            token.cancel()
            token.raise_if_cancelled()
    with pytest.raises(RuntimeError):
        with FeatureWriter(path) as w:
            w.append(**_arrays(seed=3))
            raise RuntimeError("disk on fire")
    w = FeatureWriter(path)
    w.open()
    w.append(**_arrays(seed=4))
    w.abort()
    assert path.read_bytes() == before and _temps(tmp_path) == []


def test_update_attrs_adds_metrics_atomically(tmp_path, monkeypatch):
    path = write_features(tmp_path / "f.h5", _arrays(), ATTRS)
    update_attrs(path, **{"recall@1": 0.75, "nmi": np.float64(0.5), "num_queries": 10})
    f = read_features(path)
    assert f.attrs["recall@1"] == 0.75 and f.attrs["nmi"] == 0.5 and f.attrs["num_queries"] == 10
    assert f.attrs["dataset_root"] == "/data/cub" and f.model_config == ATTRS["model_config"]
    np.testing.assert_array_equal(f.embeddings_raw, _arrays()["embeddings_raw"])
    before = path.read_bytes()

    def fail(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr("dmlviewer.core.files.os.replace", fail)
    with pytest.raises(OSError, match="no space"):
        update_attrs(path, f1=0.1)
    assert path.read_bytes() == before and _temps(tmp_path) == []
    with pytest.raises(StoreError, match="format_version"):
        update_attrs(path, format_version=2)


def test_a_background_writer_writes_the_same_file_and_raises_its_writes_error(tmp_path, monkeypatch):
    """The writer thread's file holds what a direct writer's holds; a write that fails there is
    raised in the caller (by the next append or by close) and the target keeps its content."""
    parts = [_arrays(n=7, seed=s, groups=True) for s in range(5)]
    files = {}
    for background in (False, True):
        files[background] = tmp_path / f"{background}.h5"
        with FeatureWriter(files[background], ATTRS, background=background) as w:
            for part in parts:
                w.append(**part)
            assert w.rows == 35
    direct, threaded = read_features(files[False]), read_features(files[True])
    for name in ("embeddings", "embeddings_raw", "labels", "boxes", "groups"):
        np.testing.assert_array_equal(getattr(threaded, name), getattr(direct, name))
    assert threaded.paths == direct.paths and list(threaded.split) == list(direct.split)

    before = files[True].read_bytes()
    real = FeatureWriter._write
    written = []

    def fail_third(self, start, batch):
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        written.append(start)
        real(self, start, batch)

    monkeypatch.setattr(FeatureWriter, "_write", fail_third)
    with pytest.raises(OSError, match="No space left"):
        with FeatureWriter(files[True], ATTRS, background=True) as w:
            for part in parts:
                w.append(**part)
    assert written == [0, 7] and files[True].read_bytes() == before and _temps(tmp_path) == []


def test_a_cancel_while_the_writer_thread_writes_keeps_the_previous_file(tmp_path, monkeypatch):
    """An extraction cancelled after its writer thread has written blocks of rows: no half file,
    no temporary file, the previous features unchanged, the thread ended."""
    import threading

    import torch

    from dmlviewer.core.data import make_demo_data, open_dataset
    from dmlviewer.core.evaluate import extract as extract_module
    from dmlviewer.core.models import build_model, default_config

    dataset = open_dataset(make_demo_data(tmp_path / "data", classes=3, per_class=8, size=32))
    out = tmp_path / "out"
    out.mkdir()
    target = write_features(out / "f.h5", _arrays(seed=3), ATTRS)
    before = target.read_bytes()
    monkeypatch.setattr(extract_module, "WRITE_ROWS", 4)  # a block to the writer thread every batch
    written = []
    real = FeatureWriter._write
    monkeypatch.setattr(FeatureWriter, "_write", lambda self, start, batch: (written.append(start),
                                                                             real(self, start, batch)))
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", dim=8, image_size=32)).eval()
    token = CancelToken()
    job = extract_module.extract_features(model, dataset, target, batch_size=4, num_workers=0, cancel=token)
    for event in job:
        if event.current >= 12:
            break
    deadline = time.monotonic() + 60
    while len(written) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(written) >= 2  # the thread has written rows into the temporary file
    assert len(_temps(out)) == 1
    token.cancel()
    with pytest.raises(Cancelled):
        list(job)
    assert target.read_bytes() == before and _temps(out) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("feature-writer")]


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    from dmlviewer.core.evaluate.store import FeatureWriter
    target, flag = Path(sys.argv[1]), Path(sys.argv[2])
    rng = np.random.default_rng(5)
    with FeatureWriter(target, {"dataset_root": "child"}, background=sys.argv[3] == "1") as w:
        for batch in range(10_000):
            w.append(embeddings_raw=rng.standard_normal((64, 32)).astype(np.float32),
                     labels=np.zeros(64, np.int64), paths=["p"] * 64, split="test")
            if batch == 20:
                flag.write_text("mid-way")
            time.sleep(0.01)
    """
)


def _kill_mid_write(target: Path, tmp_path: Path, background: bool = False) -> None:
    flag = tmp_path / "midway.flag"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(target), str(flag), str(int(background))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            if child.poll() is not None:
                pytest.fail(f"writer child exited early: {child.stderr.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, "writer child never reached the middle"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
@pytest.mark.parametrize("background", [False, True], ids=["direct", "writer-thread"])
@pytest.mark.parametrize("previous", [True, False])
def test_sigkill_mid_write_leaves_previous_file_or_nothing(tmp_path, previous, background):
    target = tmp_path / "features.h5"
    if previous:
        write_features(target, _arrays(seed=9), ATTRS)
        before = target.read_bytes()
    _kill_mid_write(target, tmp_path, background)
    leftovers = _temps(tmp_path)
    assert len(leftovers) == 1 and leftovers[0].startswith(".features.h5.tmp-")  # killed mid-way
    if previous:
        assert target.read_bytes() == before
        f = read_features(target)
        assert f.attrs["dataset_root"] == "/data/cub" and len(f) == 10
    else:
        assert not target.exists()
        with pytest.raises(FileNotFoundError):
            read_features(target)
    # the leftover is recognised as stale and is never the target; the next writer removes it
    assert [p.name for p in stale_temp_files(target)] == leftovers
    write_features(target, _arrays(seed=10))
    assert _temps(tmp_path) == [] and len(read_features(target)) == 10
