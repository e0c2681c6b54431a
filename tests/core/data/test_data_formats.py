"""Dataset readers: every format read from small folders written here, protocols, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from dataset_builders import make_cars196, make_cub, make_inshop, make_sop, textured, write_lines, write_png

from dmlviewer.core.data import DatasetError, detect_format, open_dataset
from dmlviewer.core.data.tables import read_table

# ----------------------------------------------------------------------------------- CUB


def test_cub_joins_files_by_id_and_splits_zero_shot(tmp_path):
    truth = make_cub(tmp_path, classes=4, per_class=3)
    assert detect_format(tmp_path) == "cub"
    d = open_dataset(tmp_path)
    assert d.format == "cub" and d.protocol == "zero-shot" and len(d) == 12
    assert d.class_names == [f"{c:03d}.Bird_{c}" for c in range(1, 5)]
    for k in range(len(d)):
        image_id = k + 1  # rows come in image-id order
        assert d.paths[k] == "images/" + truth["images"][image_id]
        assert d.labels[k] == truth["labels"][image_id] - 1
        np.testing.assert_allclose(d.boxes[k], truth["boxes"][image_id])
        assert d.split[k] == ("train" if truth["labels"][image_id] <= 2 else "test")
    assert d.labels.dtype == np.int64 and d.boxes.dtype == np.float32
    assert d.parts_root is None and d.part_names == []


def test_cub_official_split_comes_from_train_test_split(tmp_path):
    truth = make_cub(tmp_path)
    d = open_dataset(tmp_path, protocol="official")
    assert d.protocol == "official"
    expected = ["train" if truth["is_train"][k + 1] else "test" for k in range(len(d))]
    assert d.split.tolist() == expected


def test_zero_shot_halves_for_cub_200_and_cars_196(tmp_path):
    make_cub(tmp_path / "cub", classes=200, per_class=1)
    d = open_dataset(tmp_path / "cub")
    train_classes = np.unique(d.labels[d.split == "train"])
    assert train_classes.tolist() == list(range(100))
    assert np.unique(d.labels[d.split == "test"]).tolist() == list(range(100, 200))

    make_cars196(tmp_path / "cars", classes=196, per_class=1)
    c = open_dataset(tmp_path / "cars")
    assert np.unique(c.labels[c.split == "train"]).tolist() == list(range(98))
    assert np.unique(c.labels[c.split == "test"]).tolist() == list(range(98, 196))


def test_cub_without_boxes_has_nan_boxes_and_needs_no_split_file_for_zero_shot(tmp_path):
    make_cub(tmp_path)
    (tmp_path / "bounding_boxes.txt").unlink()
    (tmp_path / "train_test_split.txt").unlink()
    d = open_dataset(tmp_path)
    assert np.isnan(d.boxes).all()
    with pytest.raises(DatasetError, match="train_test_split.txt"):
        open_dataset(tmp_path, protocol="official")


# --------------------------------------------------------------------------------- Cars196


def test_cars196_reads_mat_boxes_names_and_official_split(tmp_path):
    truth = make_cars196(tmp_path, classes=4, per_class=2)
    assert detect_format(tmp_path) == "cars196"
    d = open_dataset(tmp_path, protocol="official")
    assert d.class_names == truth["names"]
    for k, (rel, cls, x1, y1, x2, y2, test) in enumerate(truth["rows"]):
        assert d.paths[k] == rel
        assert d.labels[k] == cls - 1
        np.testing.assert_allclose(d.boxes[k], [x1 - 1, y1 - 1, x2 - x1 + 1, y2 - y1 + 1])
        assert d.split[k] == ("test" if test else "train")
    z = open_dataset(tmp_path)
    assert z.split.tolist() == ["train" if lab < 2 else "test" for lab in z.labels]


def test_cars196_mat_without_needed_fields_names_them(tmp_path):
    import scipy.io

    ann = np.zeros((1, 1), dtype=[("relative_im_path", "O"), ("class", "O")])
    ann[0, 0] = (np.array(["car_ims/1.jpg"]), np.array([[1]]))
    scipy.io.savemat(tmp_path / "cars_annos.mat", {"annotations": ann})
    with pytest.raises(DatasetError, match="bbox_x1.*test"):
        open_dataset(tmp_path)
    (tmp_path / "cars_annos.mat").write_text("not a mat file")
    with pytest.raises(DatasetError, match="cars_annos.mat"):
        open_dataset(tmp_path)


# ------------------------------------------------------------------------------------- SOP


def test_sop_labels_names_and_official_split(tmp_path):
    listing = make_sop(tmp_path, train_classes=4, test_classes=3, per_class=2)
    assert detect_format(tmp_path) == "sop"
    d = open_dataset(tmp_path)
    assert d.protocol == "official" and len(d) == 14 and d.num_classes == 7
    rows = listing["Ebay_train.txt"] + listing["Ebay_test.txt"]
    assert d.paths == [r.split()[3] for r in rows]
    assert d.labels.tolist() == [int(r.split()[1]) - 1 for r in rows]
    assert d.split.tolist() == ["train"] * 8 + ["test"] * 6
    assert d.class_names[0] == "chair_final/1001"
    assert np.isnan(d.boxes).all()
    # zero-shot: first ceil(7 / 2) = 4 classes train
    z = open_dataset(tmp_path, protocol="zero-shot")
    assert z.split.tolist() == ["train" if lab < 4 else "test" for lab in z.labels]


def test_sop_missing_second_file_is_named(tmp_path):
    make_sop(tmp_path)
    (tmp_path / "Ebay_test.txt").unlink()
    with pytest.raises(DatasetError, match="Ebay_test.txt"):
        open_dataset(tmp_path)


# ---------------------------------------------------------------------------------- In-Shop


@pytest.mark.parametrize("in_subfolders", [True, False])
def test_inshop_roles_split_and_boxes(tmp_path, in_subfolders):
    rows = make_inshop(tmp_path, in_subfolders=in_subfolders)
    assert detect_format(tmp_path) == "inshop"
    d = open_dataset(tmp_path)
    assert d.protocol == "official"
    assert d.paths == [p for p, _, _ in rows]
    assert d.roles.tolist() == [s for _, _, s in rows]
    assert d.split.tolist() == ["train" if s == "train" else "test" for _, _, s in rows]
    assert d.class_names == sorted({i for _, i, _ in rows})
    assert [d.class_names[lab] for lab in d.labels] == [i for _, i, _ in rows]
    for k in range(len(rows) - 1):
        np.testing.assert_allclose(d.boxes[k], [10 + k, 20, 40, 70])
    assert np.isnan(d.boxes[-1]).all()  # no line for the last image in list_bbox_inshop.txt
    test = d.select_split("test")
    assert set(test.roles.tolist()) == {"query", "gallery"}
    assert open_dataset(tmp_path, protocol="zero-shot").roles is None


def test_inshop_without_box_file_and_bad_status_line(tmp_path):
    make_inshop(tmp_path, boxes=False)
    assert np.isnan(open_dataset(tmp_path).boxes).all()
    path = tmp_path / "Eval" / "list_eval_partition.txt"
    lines = path.read_text().splitlines()
    lines[5] = lines[5].rsplit(" ", 1)[0] + " validation"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"list_eval_partition.txt, line 6: .*'validation'") as info:
        open_dataset(tmp_path)
    assert info.value.line == 6


# ----------------------------------------------------------------------------------- folder


def test_folder_classes_sorted_hidden_and_other_files_ignored(tmp_path):
    for name, files in {"b_class": ["x.png", "sub/y.PNG"], "a_class": ["1.jpg", "2.jpeg", "notes.txt"],
                        "c_class": ["z.bmp"], "d_empty": ["readme.md"], ".hidden": ["h.png"]}.items():
        for f in files:
            target = tmp_path / name / f
            if f.lower().endswith((".png", ".jpg", ".jpeg", ".bmp")):
                write_png(target, textured(1, 8))  # content does not matter for indexing
            else:
                write_lines(target, ["text"])
    write_png(tmp_path / "a_class" / ".DS_hidden.png", textured(2, 8))
    assert detect_format(tmp_path) == "folder"
    d = open_dataset(tmp_path)
    assert d.class_names == ["a_class", "b_class", "c_class"]
    assert d.paths == ["a_class/1.jpg", "a_class/2.jpeg", "b_class/sub/y.PNG", "b_class/x.png", "c_class/z.bmp"]
    assert d.labels.tolist() == [0, 0, 1, 1, 2]
    assert d.split.tolist() == ["train", "train", "train", "train", "test"]  # ceil(3 / 2) = 2 classes train
    with pytest.raises(DatasetError, match="no official split"):
        open_dataset(tmp_path, protocol="official")


def test_format_override_and_detection_failures(tmp_path):
    write_png(tmp_path / "cats" / "1.png", textured(1, 8))
    write_png(tmp_path / "dogs" / "1.png", textured(2, 8))
    write_lines(tmp_path / "images.txt", ["1 cats/1.png"])  # looks like a (broken) CUB folder
    assert detect_format(tmp_path) == "cub"
    with pytest.raises(DatasetError, match="image_class_labels.txt"):
        open_dataset(tmp_path)
    d = open_dataset(tmp_path, format="folder")
    assert d.format == "folder" and d.class_names == ["cats", "dogs"]
    with pytest.raises(DatasetError, match="unknown dataset format 'imagenet'"):
        open_dataset(tmp_path, format="imagenet")
    with pytest.raises(DatasetError, match="unknown split protocol"):
        open_dataset(tmp_path, format="folder", protocol="random")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match="cannot tell the dataset format"):
        detect_format(empty)
    with pytest.raises(DatasetError, match="not found"):
        open_dataset(tmp_path / "missing")


# ------------------------------------------------------------------------------ bad input


def test_missing_index_file_is_named(tmp_path):
    make_cub(tmp_path)
    (tmp_path / "classes.txt").unlink()
    with pytest.raises(DatasetError, match="missing index file: .*classes.txt") as info:
        open_dataset(tmp_path)
    assert info.value.path.endswith("classes.txt")


def test_malformed_lines_name_file_and_line(tmp_path):
    make_cub(tmp_path)
    labels = tmp_path / "image_class_labels.txt"
    lines = labels.read_text().splitlines()
    lines[3] = lines[3] + " extra"
    labels.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"image_class_labels.txt, line 4: expected 2 columns") as info:
        open_dataset(tmp_path)
    assert info.value.line == 4

    lines[3] = "7 seven"
    labels.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"image_class_labels.txt, line 4: column 'class_id' is not an integer"):
        open_dataset(tmp_path)


def test_inconsistent_ids_are_reported(tmp_path):
    make_cub(tmp_path)
    labels = tmp_path / "image_class_labels.txt"
    lines = labels.read_text().splitlines()
    labels.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(DatasetError, match="image_class_labels.txt: no entry for image ids"):
        open_dataset(tmp_path)
    labels.write_text("\n".join(lines + [lines[0]]) + "\n")
    with pytest.raises(DatasetError, match="duplicate image ids"):
        open_dataset(tmp_path)
    labels.write_text("\n".join(lines[:-1] + ["999 1", lines[-1]]) + "\n")
    with pytest.raises(DatasetError, match="unknown image ids \\[999\\]"):
        open_dataset(tmp_path)
    labels.write_text("\n".join(lines[:-1] + [lines[-1].split()[0] + " 77"]) + "\n")
    with pytest.raises(DatasetError, match="class ids \\[77\\] are not in .*classes.txt"):
        open_dataset(tmp_path)


def test_table_slow_path_matches_fast_path_and_handles_spaces_crlf_bom(tmp_path):
    fast = tmp_path / "fast.txt"
    fast.write_text("1 a/b.jpg\n2 c/d.jpg\n\n3 e/f.jpg\n")
    slow = tmp_path / "slow.txt"
    slow.write_bytes("\ufeff1 a/b.jpg\r\n  \r\n2 c/d.jpg\r\n3 e/f g.jpg  \r\n".encode())
    a = read_table(fast, ("id", "path"), ints=("id",))
    b = read_table(slow, ("id", "path"), ints=("id",))
    assert a["id"].tolist() == b["id"].tolist() == [1, 2, 3]
    assert a["path"] == ["a/b.jpg", "c/d.jpg", "e/f.jpg"]
    assert b["path"] == ["a/b.jpg", "c/d.jpg", "e/f g.jpg"]


def test_subset_keeps_every_field(tmp_path):
    make_inshop(tmp_path)
    d = open_dataset(tmp_path)
    idx = np.array([7, 2, 9])
    s = d.subset(idx)
    assert s.paths == [d.paths[i] for i in idx]
    assert s.labels.tolist() == d.labels[idx].tolist()
    assert s.roles.tolist() == d.roles[idx].tolist()
    np.testing.assert_array_equal(s.boxes, d.boxes[idx])
    assert s.class_names == d.class_names
