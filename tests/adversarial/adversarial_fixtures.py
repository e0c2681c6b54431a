"""Hostile inputs for the adversarial suite, generated on the fly (small and fast).

:func:`build` writes every fixture under one folder and returns a dict of named paths that
cases refer to as ``{name}``. Nothing here is downloaded; each file is at most a few hundred
kilobytes (the decompression bombs are small files that *claim* billions of pixels or rows).

A *secret* file (a canary string outside every dataset) stands for a local file that must
never be read into a message, an output or a copied feature file; a *payload* (pickle code
that creates a marker file) stands for code that must never run.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
from hostile_bytes import jpeg_header_only, png_header_only

CANARY = "SECRET-CANARY-7f3a9c"


def _payload(marker: Path):
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    return Payload()


def _small_ckpt(path: Path, **config) -> Path:
    import torch

    from dmlviewer.core.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", dim=16, image_size=64, **config))
    return save_checkpoint(path, model)


def _rewrite_checkpoint(src: Path, dst: Path, edit) -> Path:
    """Load a checkpoint's raw dict, let ``edit`` change it, save it with torch.save."""
    import torch

    data = torch.load(src, weights_only=True)
    edit(data)
    torch.save(data, dst)
    return dst


def _cub_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def build(root: Path) -> dict[str, str]:
    """Write every fixture under ``root``; returns ``{name: path}``."""
    import h5py
    import torch

    from dmlviewer.core.data import make_demo_data, open_dataset
    from dmlviewer.core.evaluate import write_features

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    f: dict[str, Path] = {"root": root}
    secret = root / "secret.txt"
    secret.write_text(f"{CANARY}\nroot:x:0:0:root:/root:/bin/bash\n")
    f["secret"] = secret
    f["marker"] = root / "PAYLOAD-RAN"

    # ---- data: a tiny demo dataset (CUB layout with parts)
    demo = make_demo_data(root / "demo", classes=4, per_class=4, size=64, seed=0)
    f["demo"] = demo
    ds = open_dataset(demo)
    f["img"] = ds.abspath(0)
    f["img2"] = ds.abspath(5)
    first = ds.paths[int(ds.indices("test")[0])]  # an image every job on the test split reads

    # ---- checkpoints
    ck = root / "ckpt"
    ck.mkdir()
    f["ckpt"] = _small_ckpt(ck / "good.pt")
    marker = f["marker"]
    (ck / "payload_p2.pt").write_bytes(pickle.dumps({"format": _payload(marker)}, protocol=2))
    (ck / "payload_p5.pt").write_bytes(pickle.dumps({"format": _payload(marker)}, protocol=5))
    buf = io.BytesIO()
    torch.save({"a": torch.zeros(2)}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z, zipfile.ZipFile(ck / "payload_zip.pt", "w") as out:
        for name in z.namelist():
            data = z.read(name)
            if name.endswith("data.pkl"):
                data = pickle.dumps({"format": _payload(marker)}, protocol=2)
            out.writestr(name, data)
    (ck / "text.pt").write_text("this is a text file, not a checkpoint\n")
    (ck / "empty.pt").write_bytes(b"")
    (ck / "truncated.pt").write_bytes(Path(f["ckpt"]).read_bytes()[:3000])
    with zipfile.ZipFile(ck / "plain.zip", "w") as z:
        z.writestr("a.txt", "hello")
    (ck / "image.pt").write_bytes(Path(f["img"]).read_bytes())
    torch.save(torch.zeros(3), ck / "tensor.pt")
    torch.save({"conv.weight": torch.zeros(2, 2)}, ck / "bare_state_dict.pt")
    good = Path(f["ckpt"])

    def config_edit(**changes):
        def edit(d):
            d["config"].update(changes)
        return edit

    attacks = {
        "dim_huge": config_edit(dim=10**9),
        "groups_huge": config_edit(grouping="c", groups=200_000),
        "hidden_huge": config_edit(hidden=10**9),
        "image_size_huge": config_edit(image_size=10**6),
        "flatten_huge": config_edit(pooling="flatten", image_size=30_000),
        "dim_bool": config_edit(dim=True),
        "backbone_list": config_edit(backbone=["small_cnn"]),
        "multilayer_int": config_edit(multilayer=5),
        "gem_nan": config_edit(pooling="gem", gem_p=float("nan")),
        "mean_bad": config_edit(mean=[0.5, "x"]),
        "unknown_key": config_edit(evil=1),
    }
    for name, edit in attacks.items():
        _rewrite_checkpoint(good, ck / f"{name}.pt", edit)

    def int_keys(d):
        d["config"] = {1: 2}

    def nan_weights(d):
        key = next(k for k, v in d["state_dict"].items() if v.is_floating_point())
        d["state_dict"][key] = torch.full_like(d["state_dict"][key], float("nan"))

    def inf_weights(d):
        key = [k for k, v in d["state_dict"].items() if v.is_floating_point()][-1]
        d["state_dict"][key] = torch.full_like(d["state_dict"][key], float("inf"))

    def wrong_shape(d):
        key = next(iter(d["state_dict"]))
        d["state_dict"][key] = torch.zeros(1)

    def non_tensor(d):
        d["state_dict"]["extra.key"] = "text"

    def version2(d):
        d["version"] = 2

    def no_format(d):
        del d["format"]

    def epoch_text(d):
        d["epoch"] = "ten"

    def config_list(d):
        d["config"] = [1, 2, 3]

    for name, edit in {"int_keys": int_keys, "nan_weights": nan_weights, "inf_weights": inf_weights,
                       "wrong_shape": wrong_shape, "non_tensor": non_tensor, "version2": version2,
                       "no_format": no_format, "epoch_text": epoch_text, "config_list": config_list}.items():
        _rewrite_checkpoint(good, ck / f"{name}.pt", edit)
    _fifo(ck / "fifo.pt")
    os.symlink("/dev/zero", ck / "devzero.pt")
    (ck / "folder.pt").mkdir()
    for p in ck.iterdir():
        f[f"ck_{p.stem}"] = p

    # ---- images and datasets
    im = root / "images"
    im.mkdir()
    (im / "bomb_png_20k.png").write_bytes(png_header_only(20_000, 20_000))
    (im / "bomb_png_30k.png").write_bytes(png_header_only(30_000, 30_000))
    (im / "bomb_jpeg.jpg").write_bytes(jpeg_header_only(65_000, 65_000))
    (im / "bomb_hdr.hdr").write_bytes(b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 20000 +X 20000\n" + b"\0" * 64)
    (im / "text.png").write_text(f"{CANARY} not an image\n")
    (im / "truncated.png").write_bytes(Path(f["img"]).read_bytes()[:200])
    _fifo(im / "fifo.png")
    os.symlink("/dev/zero", im / "devzero.png")
    os.symlink(secret, im / "secret_link.png")
    for p in im.iterdir():
        f[f"im_{p.stem}"] = p

    def variant(name: str, change) -> Path:
        path = _cub_copy(Path(demo), root / "datasets" / name)
        change(path)
        f[f"ds_{name}"] = path
        return path

    def swap_image(folder: Path, source: Path, how: str = "copy") -> None:
        target = folder / first
        target.unlink()
        if how == "copy":
            shutil.copyfile(source, target)
        elif how == "fifo":
            os.mkfifo(target)
        else:
            os.symlink(source, target)

    (root / "datasets").mkdir()
    variant("no_images_txt", lambda p: (p / "images.txt").unlink())
    variant("images_txt_folder", lambda p: ((p / "images.txt").unlink(), (p / "images.txt").mkdir()))
    variant("images_txt_fifo", lambda p: ((p / "images.txt").unlink(), os.mkfifo(p / "images.txt")))
    variant("images_txt_devzero", lambda p: ((p / "images.txt").unlink(), os.symlink("/dev/zero", p / "images.txt")))

    def dotdot(p: Path) -> None:
        lines = (p / "images.txt").read_text().splitlines()
        lines[0] = "1 ../../../../../../../../" + str(secret).lstrip("/")
        _write_lines(p / "images.txt", lines)

    def absolute(p: Path) -> None:
        lines = (p / "images.txt").read_text().splitlines()
        lines[0] = f"1 {secret}"
        _write_lines(p / "images.txt", lines)

    variant("dotdot_path", dotdot)
    variant("absolute_path", absolute)
    variant("symlink_out", lambda p: swap_image(p, secret, "link"))
    variant("symlink_devzero", lambda p: swap_image(p, Path("/dev/zero"), "link"))
    variant("fifo_image", lambda p: swap_image(p, p, "fifo"))
    variant("bomb_image", lambda p: swap_image(p, im / "bomb_png_30k.png"))
    variant("text_image", lambda p: swap_image(p, im / "text.png"))
    variant("binary_index", lambda p: (p / "images.txt").write_bytes(b"\xff\xfe\x00garbage\x00" * 20))
    variant("malformed_line", lambda p: (p / "images.txt").write_text("1 a b c d\n2\n"))
    variant("empty_index", lambda p: (p / "images.txt").write_text(""))
    variant("huge_ids", lambda p: (p / "images.txt").write_text("99999999999999999999999 x.png\n"))
    variant("bad_part_names", lambda p: (p / "parts" / "parts.txt").write_text("1 ../../escape\n"))

    def all_unreadable(p: Path) -> None:
        for rel in open_dataset(p).paths:
            (p / rel).write_bytes(b"not an image")

    variant("all_unreadable", all_unreadable)

    # a folder dataset whose classes have one image each (no positive pairs), and one with a FIFO
    single = root / "datasets" / "singletons"
    for k in range(4):
        (single / f"class{k}").mkdir(parents=True)
        shutil.copyfile(ds.abspath(k * 4), single / f"class{k}" / "a.png")
    f["ds_singletons"] = single
    folder_fifo = root / "datasets" / "folder_fifo"
    for k in range(4):
        (folder_fifo / f"class{k}").mkdir(parents=True)
        for j in range(2):
            shutil.copyfile(ds.abspath(k * 4 + j), folder_fifo / f"class{k}" / f"{j}.png")
    os.mkfifo(folder_fifo / "class3" / "2.png")  # a test class
    f["ds_folder_fifo"] = folder_fifo
    sop = root / "datasets" / "sop_dotdot"
    sop.mkdir()
    (sop / "Ebay_train.txt").write_text("image_id class_id super_class_id path\n1 1 1 ../secret.txt\n")
    (sop / "Ebay_test.txt").write_text("image_id class_id super_class_id path\n2 2 1 a/b.jpg\n")
    f["ds_sop_dotdot"] = sop
    inshop = root / "datasets" / "inshop_abs"
    inshop.mkdir()
    (inshop / "list_eval_partition.txt").write_text(f"2\nimage_name item_id evaluation_status\n{secret} id_1 train\n"
                                                    "img/a.jpg id_2 query\n")
    f["ds_inshop_abs"] = inshop
    cars = root / "datasets" / "cars_garbage"
    cars.mkdir()
    (cars / "cars_annos.mat").write_bytes(b"MATLAB 5.0 MAT-file garbage" + b"\x00" * 200)
    f["ds_cars_garbage"] = cars

    # ---- feature files
    rng = np.random.default_rng(0)
    n = len(ds)
    raw = rng.standard_normal((n, 16)).astype(np.float32)
    attrs = {"dataset_root": str(demo), "dataset_format": "cub", "model_config": "{}"}
    arrays = {"embeddings_raw": raw, "labels": ds.labels, "paths": ds.paths, "split": [str(s) for s in ds.split]}
    fe = root / "features"
    fe.mkdir()
    f["feats"] = write_features(fe / "good.h5", arrays, attrs)
    emb = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    str_dt = h5py.string_dtype("utf-8")

    def h5(name: str, build_file) -> Path:
        path = fe / f"{name}.h5"
        with h5py.File(path, "w") as h:
            h.attrs["format_version"] = 1
            for k, v in attrs.items():
                h.attrs[k] = v
            build_file(h)
        f[f"h5_{name}"] = path
        return path

    def standard(h, skip=()):
        values = {"embeddings": emb, "embeddings_raw": raw, "labels": ds.labels,
                  "paths": np.array(ds.paths, dtype=object), "split": np.array([str(s) for s in ds.split], object)}
        for k, v in values.items():
            if k not in skip:
                h.create_dataset(k, data=v, dtype=str_dt if v.dtype == object else v.dtype)

    secret_size = secret.stat().st_size

    def external_paths(h):
        standard(h, skip=("paths",))
        h.create_dataset("paths", shape=(n,), dtype="S8", external=[(str(secret), 0, h5py.h5f.UNLIMITED)])

    def hidden_external(h):
        standard(h)
        h.create_dataset("zz_hidden", shape=(secret_size,), dtype="u1", external=[(str(secret), 0, secret_size)])

    other = fe / "other.h5"
    with h5py.File(other, "w") as h:
        h["labels"] = ds.labels

    def external_link(h):
        standard(h, skip=("labels",))
        h["labels"] = h5py.ExternalLink(str(other), "labels")

    def virtual(h):
        standard(h, skip=("labels",))
        layout = h5py.VirtualLayout(shape=(n,), dtype="i8")
        layout[:] = h5py.VirtualSource(str(other), "labels", shape=(n,))
        h.create_virtual_dataset("labels", layout)

    def soft_link(h):
        standard(h, skip=("split",))
        h["split"] = h5py.SoftLink("/paths")

    def bytes_embeddings(h):
        standard(h, skip=("embeddings",))
        h.create_dataset("embeddings", data=np.zeros((n, 16), "S4"))

    def compound_embeddings(h):
        standard(h, skip=("embeddings",))
        h.create_dataset("embeddings", data=np.zeros((n, 16), [("a", "f4"), ("b", "i4")]))

    def labels_2d(h):
        standard(h, skip=("labels",))
        h.create_dataset("labels", data=np.zeros((n, 2), np.int64))

    def claims_billion_rows(h):
        rows = 10**9
        for k in ("embeddings", "embeddings_raw"):
            h.create_dataset(k, shape=(rows, 16), dtype="f4", chunks=(1024, 16))
        h.create_dataset("labels", shape=(rows,), dtype="i8", chunks=(1024,))
        h.create_dataset("paths", shape=(rows,), dtype=str_dt, chunks=(1024,))
        h.create_dataset("split", shape=(rows,), dtype=str_dt, chunks=(1024,))

    def gzip_bomb(h):
        rows = 4 * 10**6
        for k in ("embeddings", "embeddings_raw"):
            d = h.create_dataset(k, shape=(rows, 64), dtype="f4", chunks=(65536, 64), compression="gzip")
            d[:65536] = 0
        h.create_dataset("labels", shape=(rows,), dtype="i8", chunks=(65536,), compression="gzip")
        h.create_dataset("paths", shape=(rows,), dtype=str_dt, chunks=(65536,), compression="gzip")
        h.create_dataset("split", shape=(rows,), dtype=str_dt, chunks=(65536,), compression="gzip")

    def nan_embeddings(h):
        standard(h, skip=("embeddings",))
        bad = emb.copy()
        bad[1] = np.nan
        bad[2] = -np.inf
        h.create_dataset("embeddings", data=bad)

    def not_normalized(h):
        standard(h, skip=("embeddings",))
        h.create_dataset("embeddings", data=emb * 2)

    def dotdot_paths(h):
        standard(h, skip=("paths",))
        paths = [f"../../../../../../../..{secret}"] + list(ds.paths[1:])
        h.create_dataset("paths", data=np.array(paths, object), dtype=str_dt)

    def no_version(h):
        standard(h)
        del h.attrs["format_version"]

    for name, builder in {"external_paths": external_paths, "hidden_external": hidden_external,
                          "external_link": external_link, "virtual": virtual, "soft_link": soft_link,
                          "bytes_embeddings": bytes_embeddings, "compound_embeddings": compound_embeddings,
                          "labels_2d": labels_2d, "claims_billion_rows": claims_billion_rows,
                          "gzip_bomb": gzip_bomb, "nan_embeddings": nan_embeddings,
                          "not_normalized": not_normalized, "dotdot_paths": dotdot_paths,
                          "no_version": no_version}.items():
        h5(name, builder)
    (fe / "truncated.h5").write_bytes(Path(f["feats"]).read_bytes()[:2000])
    (fe / "not_hdf5.h5").write_text("plain text\n")
    _fifo(fe / "fifo.h5")
    os.symlink("/dev/zero", fe / "devzero.h5")
    for name in ("truncated", "not_hdf5", "fifo", "devzero"):
        f[f"h5_{name}"] = fe / f"{name}.h5"

    # ---- outputs that cannot be written
    out = root / "outputs"
    out.mkdir()
    (out / "a_folder").mkdir()
    (out / "a_file").write_text("x")
    run_cfg = out / "run_config_dir"
    (run_cfg / "config.json").mkdir(parents=True)
    run_metrics = out / "run_metrics_dir"
    (run_metrics / "metrics.jsonl").mkdir(parents=True)
    _fifo(out / "fifo.npz")
    f.update(out_folder=out / "a_folder", out_file=out / "a_file", run_config_dir=run_cfg,
             run_metrics_dir=run_metrics, out_fifo=out / "fifo.npz", outputs=out)
    # resume: the shipped-demo-like checkpoint (no training state) in a run folder
    demo_run = out / "demo_run"
    demo_run.mkdir()
    shutil.copyfile(good, demo_run / "checkpoint.pt")
    f["run_demo_ckpt"] = demo_run
    (root / "fingerprints.json").write_text(json.dumps({k: str(v) for k, v in f.items()}))
    return {k: str(v) for k, v in f.items()}
