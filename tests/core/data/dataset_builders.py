"""Small dataset folders of each supported layout, written by the tests themselves."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def write_png(path: Path, rgb: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buf = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR) if rgb.ndim == 3 else rgb)
    assert ok
    path.write_bytes(buf.tobytes())
    return path


def write_jpeg(path: Path, rgb: np.ndarray, quality: int = 95) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    path.write_bytes(buf.tobytes())
    return path


def textured(seed: int, size: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def make_cub(root: Path, classes: int = 4, per_class: int = 3, with_images: bool = False) -> dict:
    """A CUB-200-2011 folder. Image ids are listed out of order in each file (different orders)
    and classes.txt is shuffled, so readers must join by id. Returns what was written."""
    rng = np.random.default_rng(0)
    images, labels, is_train, boxes = {}, {}, {}, {}
    k = 0
    for c in range(1, classes + 1):
        for i in range(per_class):
            k += 1
            images[k] = f"{c:03d}.Bird_{c}/Bird_{c}_{i:04d}.jpg"
            labels[k] = c
            is_train[k] = int(i % 2 == 0)
            boxes[k] = (float(c), float(i), 10.0 + c, 20.5 + i)
            if with_images:
                write_jpeg(root / "images" / images[k], textured(k))
    ids = list(images)

    def shuffled() -> list[int]:
        return [int(x) for x in rng.permutation(ids)]

    write_lines(root / "images.txt", [f"{i} {images[i]}" for i in shuffled()])
    write_lines(root / "image_class_labels.txt", [f"{i} {labels[i]}" for i in shuffled()])
    write_lines(root / "classes.txt", [f"{c} {c:03d}.Bird_{c}" for c in rng.permutation(range(1, classes + 1))])
    write_lines(root / "train_test_split.txt", [f"{i} {is_train[i]}" for i in shuffled()])
    write_lines(root / "bounding_boxes.txt", [f"{i} {' '.join(map(str, boxes[i]))}" for i in shuffled()])
    return {"images": images, "labels": labels, "is_train": is_train, "boxes": boxes}


def make_cars196(root: Path, classes: int = 4, per_class: int = 2) -> dict:
    import scipy.io

    fields = ["relative_im_path", "class", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "test"]
    n = classes * per_class
    ann = np.zeros((1, n), dtype=[(f, "O") for f in fields])
    rows = []
    for k in range(n):
        c = k % classes + 1
        row = (f"car_ims/{k + 1:06d}.jpg", c, 11 + k, 21, 60 + k, 80, k % 2)
        rows.append(row)
        ann[0, k] = tuple(np.array([[v]]) if not isinstance(v, str) else np.array([v]) for v in row)
    names = np.empty((1, classes), dtype=object)
    for c in range(classes):
        names[0, c] = np.array([f"Car Model {c + 1} 2012"])
    root.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(root / "cars_annos.mat", {"annotations": ann, "class_names": names})
    return {"rows": rows, "names": [f"Car Model {c + 1} 2012" for c in range(classes)]}


SUPER = ("bicycle", "chair", "lamp")


def make_sop(root: Path, train_classes: int = 4, test_classes: int = 3, per_class: int = 2) -> dict:
    """SOP listing; class ids are contiguous (train first) as in the real files."""
    k, cid = 0, 0
    listing = {}
    for name, count in (("Ebay_train.txt", train_classes), ("Ebay_test.txt", test_classes)):
        lines = ["image_id class_id super_class_id path"]
        for _ in range(count):
            cid += 1
            sc = cid % len(SUPER)
            for i in range(per_class):
                k += 1
                lines.append(f"{k} {cid} {sc + 1} {SUPER[sc]}_final/{1000 + cid}_{i}.JPG")
        listing[name] = lines[1:]
        write_lines(root / name, lines)
    return listing


def make_inshop(root: Path, in_subfolders: bool = True, boxes: bool = True) -> list[tuple[str, str, str]]:
    rows = []
    statuses = ("train", "train", "query", "gallery", "gallery")
    for item in range(1, 5):
        for j, status in enumerate(statuses if item > 2 else ("train",) * 3):
            st = status if item > 2 else "train"
            rows.append((f"img/WOMEN/Dresses/id_{item:08d}/{j:02d}_1_front.jpg", f"id_{item:08d}", st))
    eval_dir = root / "Eval" if in_subfolders else root
    write_lines(
        eval_dir / "list_eval_partition.txt",
        [str(len(rows)), "image_name item_id evaluation_status"] + [f"{p}    {i} {s}" for p, i, s in rows],
    )
    if boxes:
        anno = root / "Anno" if in_subfolders else root
        # one image deliberately has no box line
        write_lines(
            anno / "list_bbox_inshop.txt",
            [str(len(rows) - 1), "image_name  clothes_type  pose_type  x_1  y_1  x_2  y_2"]
            + [f"{p}  1  1  {10 + k}  20  {50 + k}  90" for k, (p, _, _) in enumerate(rows[:-1])],
        )
    return rows
