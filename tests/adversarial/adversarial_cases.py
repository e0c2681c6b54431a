"""The adversarial cases: every entry point against hostile input (see ``adversarial_runner``).

A case is a :class:`Case`: a category, a name, and what to run:

- ``argv``: a ``dmlviewer`` command line, run in the in-process worker through
  ``dmlviewer.cli.main`` with stdout and stderr captured at the file-descriptor level;
- ``func``: the name of a function below, run in the worker (``api_*``: the Python API,
  ``gui_*``: the app's open actions through real widgets offscreen, ``sim_*``: simulations);
- ``process``: the name of a function below run by the runner itself (``proc_*``: real
  processes killed with SIGKILL mid-write, two trainings on one run folder).

Placeholders ``{name}`` are fixture paths (``adversarial_fixtures.build``) plus ``{tmp}`` (a
fresh folder per case), ``{full}`` (a nearly full small file system) and ``{ro}`` (a read-only
one). ``expect`` is the exit status (CLI) or ``"raise"``/``"ok"`` (functions); ``has`` a text the
one error line must contain (so the message is the right one); ``intact`` files whose bytes
must not change; ``clean_dirs`` folders that must hold no temporary file afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CPU = ["--device", "cpu"]
TINY_TRAIN = ["--epochs", "1", "--image-size", "32", "--classes-per-batch", "2", "--images-per-class", "2",
              "--dim", "8", "--num-workers", "0", "--eval-every", "0", "--log-every", "1"] + CPU


@dataclass
class Case:
    category: str
    name: str
    argv: list[str] | None = None
    func: str | None = None
    process: str | None = None
    args: dict = field(default_factory=dict)
    expect: int | str = 2
    has: str | None = None
    intact: tuple[str, ...] = ()
    clean_dirs: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    setup: str | None = None
    json_stdout: bool = False
    timeout: float = 60.0
    needs: str | None = None  # "mounts": needs the small and read-only file systems

    @property
    def id(self) -> str:
        return f"{self.category}/{self.name}"


def _explain(checkpoint="{ckpt}", query="{img}", reference="{img2}", out="{tmp}/o.npz", *extra):
    return ["explain", "--checkpoint", checkpoint, "--query", query, "--reference", reference, "--out", out,
            *CPU, *extra]


def _evaluate(dataset="{demo}", checkpoint="{ckpt}", out="{tmp}/f.h5", *extra):
    return ["evaluate", "--checkpoint", checkpoint, "--dataset", dataset, "--out", out, "--num-workers", "0",
            *CPU, *extra]


def _retrieve(features, *extra):
    return ["retrieve", "--features", features, "--query", "0", "--json", *extra]


def _region(features, checkpoint="{ckpt}"):
    return _retrieve(features, "--region", "0,0,10,10", "--checkpoint", checkpoint)


def _import(weights, *extra):
    out = [] if "--out" in extra else ["--out", "{tmp}/imported.pt"]
    return ["import-model", weights, *out, *extra]


def _localize(dataset, *extra):
    return ["localize", "--checkpoint", "{ckpt}", "--dataset", dataset, "--method", "decomposition",
            "--thresholds", "0.5", "--limit", "3", "--json", *CPU, *extra]


def _faithfulness(dataset, *extra):
    return ["faithfulness", "--checkpoint", "{ckpt}", "--dataset", dataset, "--method", "decomposition",
            "--pairs", "2", "--steps", "2", "--oracle-pairs", "0", "--json", *CPU, *extra]


def _train(dataset="{demo}", out="{tmp}/run", *extra):
    return ["train", "--dataset", dataset, "--out", out, *TINY_TRAIN, *extra]


def build_cases() -> list[Case]:
    cases: list[Case] = []
    add = cases.append

    # ------------------------------------------------------------------ bad arguments
    bad_args = {
        "thresholds_1e12": (["localize", "--checkpoint", "{ckpt}", "--dataset", "{demo}", "--method", "decomposition",
                             "--thresholds", "0:1:1e-12"], "thresholds"),
        "thresholds_inf": (["localize", "--checkpoint", "{ckpt}", "--dataset", "{demo}", "--method", "decomposition",
                            "--thresholds", "0:inf:0.1"], "thresholds"),
        "thresholds_nan": (["localize", "--checkpoint", "{ckpt}", "--dataset", "{demo}", "--method", "decomposition",
                            "--thresholds", "nan,0.5"], "thresholds"),
        "faithfulness_pairs_0": (_faithfulness("{demo}", "--pairs", "0"), "--pairs"),
        "faithfulness_steps_1e9": (_faithfulness("{demo}", "--steps", "1000000000"), "--steps"),
        "faithfulness_baseline": (_faithfulness("{demo}", "--baseline", "zeros"), "--baseline"),
        "faithfulness_method": (_faithfulness("{demo}", "--method", "saliency"), "saliency"),
        "demo_size_1e6": (["make-demo-data", "{tmp}/d", "--size", "1000000"], "--size"),
        "demo_classes_0": (["make-demo-data", "{tmp}/d", "--classes", "0"], "--classes"),
        "demo_per_class_neg": (["make-demo-data", "{tmp}/d", "--per-class", "-1"], "--per-class"),
        "demo_too_many": (["make-demo-data", "{tmp}/d", "--classes", "200", "--per-class", "10000"], "1,000,000"),
        "train_image_size_1e5": (_train("{demo}", "{tmp}/run", "--image-size", "100000"), "--image-size"),
        "train_dim_1e9": (_train("{demo}", "{tmp}/run", "--dim", "1000000000"), "--dim"),
        "train_seed_neg": (_train("{demo}", "{tmp}/run", "--seed", "-1"), "--seed"),
        "train_seed_2e70": (_train("{demo}", "{tmp}/run", "--seed", str(2**70)), "--seed"),
        "train_lr_nan": (_train("{demo}", "{tmp}/run", "--lr", "nan"), "--lr"),
        "train_lr_zero": (_train("{demo}", "{tmp}/run", "--lr", "0"), "--lr"),
        "train_wd_nan": (_train("{demo}", "{tmp}/run", "--weight-decay", "nan"), "--weight-decay"),
        "train_non_trivial_nan": (_train("{demo}", "{tmp}/run", "--non-trivial", "nan"), "--non-trivial"),
        "train_diversity_nan": (_train("{demo}", "{tmp}/run", "--diversity", "nan"), "--diversity"),
        "train_diversity_inf": (_train("{demo}", "{tmp}/run", "--diversity", "inf"), "--diversity"),
        "train_device_tpu": (_train("{demo}", "{tmp}/run", "--device", "tpu"), "--device"),
        "train_device_cuda7": (_train("{demo}", "{tmp}/run", "--device", "cuda:7"), "--device"),
        "train_device_empty": (_train("{demo}", "{tmp}/run", "--device", ""), "--device"),
        "train_epochs_0": (_train("{demo}", "{tmp}/run", "--epochs", "0"), "--epochs"),
        "train_groups_0": (_train("{demo}", "{tmp}/run", "--groups", "0"), "--groups"),
        "train_cpb_1": (_train("{demo}", "{tmp}/run", "--classes-per-batch", "1"), "--classes-per-batch"),
        "train_workers_neg": (_train("{demo}", "{tmp}/run", "--num-workers", "-1"), "--num-workers"),
        "train_out_is_file": (_train("{demo}", "{out_file}"), "not a folder"),
        "train_resume_nothing": (_train("{demo}", "{tmp}/run", "--resume"), "no checkpoint"),
        "explain_size_1e5": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--size", "100000"), "--size"),
        "explain_size_0": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--size", "0"), "--size"),
        "explain_out_missing_folder": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/no/such/o.npz"), "not found"),
        "explain_out_is_folder": (_explain("{ckpt}", "{img}", "{img2}", "{out_folder}"), "folder"),
        "explain_out_is_fifo": (_explain("{ckpt}", "{img}", "{img2}", "{out_fifo}"), "not a regular file"),
        "explain_features_unused": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--features", "{feats}"),
                                    "--features"),
        "explain_transfer_no_features": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--method",
                                                  "grad_transfer"), "--features"),
        "evaluate_out_folder": (_evaluate("{demo}", "{ckpt}", "{out_folder}"), "folder"),
        "evaluate_batch_0": (_evaluate("{demo}", "{ckpt}", "{tmp}/f.h5", "--batch-size", "0"), "--batch-size"),
        "evaluate_ks_0": (_evaluate("{demo}", "{ckpt}", "{tmp}/f.h5", "--ks", "0"), "--ks"),
        "evaluate_ks_text": (_evaluate("{demo}", "{ckpt}", "{tmp}/f.h5", "--ks", "1,x"), "--ks"),
        "evaluate_device_tpu": (_evaluate("{demo}", "{ckpt}", "{tmp}/f.h5", "--device", "tpu"), "--device"),
        "retrieve_query_neg": (_retrieve("{feats}") + ["--query", "-1"], "--query"),
        "retrieve_query_huge": (["retrieve", "--features", "{feats}", "--query", "999999"], "out of range"),
        "retrieve_k_0": (_retrieve("{feats}", "-k", "0"), "-k"),
        "retrieve_region_inverted": (_retrieve("{feats}", "--region", "5,5,1,1", "--checkpoint", "{ckpt}"), "y1 > y0"),
        "retrieve_region_text": (_retrieve("{feats}", "--region", "a,b,c,d", "--checkpoint", "{ckpt}"), "--region"),
        "correspond_pairs_0": (["correspond", "--checkpoint", "{ckpt}", "--dataset", "{demo}", "--pairs", "0"],
                               "--pairs"),
        "bench_device_tpu": (["bench", "metrics", "--device", "tpu"], "--device"),
        "bench_device_cuda7": (["bench", "metrics", "--device", "cuda:7"], "--device"),
        "explain_imagenet_unknown": (_explain("imagenet:no_such_net"), "no_such_net"),
        "explain_timm_unknown": (_explain("timm:no_such_vit"), "no_such_vit"),
        "gui_dataset_missing": (["gui", "--dataset", "/nonexistent/dataset"], "dataset folder not found"),
        "gui_checkpoint_folder": (["gui", "--checkpoint", "{demo}"], "must be a file"),
        "unknown_command": (["no-such-command"], "invalid choice"),
        "orientation_pairs_0": (["orientation", "--checkpoint", "{ckpt}", "--dataset", "{demo}", "--pairs", "0"],
                                "--pairs"),
        "orientation_not_cross_view": (["orientation", "--checkpoint", "{ckpt}", "--dataset", "{demo}"], "cross-view"),
        "compare_pairs_0": (["compare", "--checkpoint", "{ckpt}", "--checkpoint", "{ckpt}", "--dataset", "{demo}",
                             "--pairs", "0"], "--pairs"),
        "compare_one_model": (["compare", "--checkpoint", "{ckpt}", "--dataset", "{demo}"], "--randomize"),
        "compare_b_and_randomize": (["compare", "--checkpoint", "{ckpt}", "--checkpoint", "{ckpt}", "--randomize",
                                     "--dataset", "{demo}"], "--randomize"),
        "compare_model_args_bad_json": (["compare", "--checkpoint", "{ckpt}", "--model", "{tmp}/m.py:build",
                                         "--model-args", "[1, 2", "--dataset", "{demo}"], "--model-args"),
        "explain_feature_layer_no_model": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--feature-layer",
                                                    "layer4"), "only used with --model"),
        "explain_feature_layer_path": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--feature-layer",
                                                "../../etc/passwd"), "--feature-layer"),
        "explain_feature_layer_three": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--feature-layer",
                                                 "a,b,c"), "--feature-layer"),
        "explain_model_output_huge": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--model-output",
                                               "k" * 5000), "--model-output"),
        "report_failures_0": (["report", "--checkpoint", "{ckpt}", "--dataset", "{demo}", "--failures", "0",
                               "--out", "{tmp}/r.html"], "--failures"),
        "report_pairs_missing": (["report", "--checkpoint", "{ckpt}", "--dataset", "{demo}", "--pairs",
                                  "/nonexistent/pairs.txt", "--out", "{tmp}/r.html"], "--pairs"),
        "report_pairs_secret": (["report", "--checkpoint", "{ckpt}", "--dataset", "{demo}", "--pairs",
                                 "{secret}", "--out", "{tmp}/r.html"], "does not name two images"),
        "report_checkpoint_text": (["report", "--checkpoint", "{ck_text}", "--dataset", "{demo}",
                                    "--out", "{tmp}/r.html"], "text file"),
        "compare_model_output_no_model": (["compare", "--checkpoint", "{ckpt}", "--checkpoint", "{ckpt}",
                                           "--model-output", "0", "--dataset", "{demo}"], "only used with --model"),
    }
    for name, (argv, has) in bad_args.items():
        add(Case("args", name, argv=argv, has=has))

    # ------------------------------------------------------------------ checkpoints
    messages = {"payload_p2": "nothing in it was run", "payload_p5": "nothing in it was run",
                "payload_zip": "nothing in it was run", "text": "text file", "empty": "empty file",
                "truncated": "damaged", "plain": "zip", "image": "image", "tensor": "Tensor",
                "bare_state_dict": "bare state dict", "dim_huge": "dim", "groups_huge": "groups",
                "hidden_huge": "hidden", "image_size_huge": "image_size", "flatten_huge": "image_size",
                "dim_bool": "dim", "backbone_list": "backbone", "multilayer_int": "multilayer",
                "gem_nan": "gem_p", "mean_bad": "mean", "unknown_key": "evil", "int_keys": "keys",
                "nan_weights": "not finite", "inf_weights": "not finite", "wrong_shape": "does not match",
                "non_tensor": "not named tensors", "version2": "version", "no_format": "not a dmlviewer checkpoint",
                "epoch_text": "epoch", "config_list": "config", "fifo": "FIFO", "devzero": "device",
                "folder": "folder"}
    for name, has in messages.items():
        add(Case("checkpoints", f"explain_{name}", argv=_explain(f"{{ck_{name}}}"), has=has,
                 clean_dirs=("{tmp}",), timeout=30))
    for name in ("payload_zip", "nan_weights", "fifo", "dim_huge"):
        add(Case("checkpoints", f"evaluate_{name}", argv=_evaluate("{demo}", f"{{ck_{name}}}"), has=messages[name]))
    for name in ("payload_zip", "text", "fifo"):
        add(Case("checkpoints", f"train_pretrained_{name}",
                 argv=_train("{demo}", "{tmp}/run", "--pretrained", f"{{ck_{name}}}"), has=messages[name]))
    for name in ("payload_p2", "payload_zip", "text", "fifo", "devzero", "folder", "truncated"):
        add(Case("checkpoints", f"import_model_{name}", argv=_import(f"{{ck_{name}}}"), has=messages[name],
                 clean_dirs=("{tmp}",)))
    add(Case("args", "import_model_image_size_1e6", argv=_import("{ck_bare_state_dict}", "--image-size", "1000000"),
             has="--image-size"))
    add(Case("args", "import_model_mean_nan", argv=_import("{ck_bare_state_dict}", "--mean", "nan", "0", "0"),
             has="--mean"))
    add(Case("args", "import_model_std_zero", argv=_import("{ck_bare_state_dict}", "--std", "0", "1", "1"),
             has="--std"))
    add(Case("args", "import_model_out_fifo", argv=_import("{ck_bare_state_dict}", "--out", "{out_fifo}"),
             has="not a regular file"))
    # two-branch imports and the two-branch code door's options (issue 25)
    two_branch_args = {
        "import_two_branch_shape_huge": (_import("{ck_bare_state_dict}", "--image-size", "64x99999"), "--image-size"),
        "import_two_branch_shape_text": (_import("{ck_bare_state_dict}", "--reference-weights", "{ck_bare_state_dict}",
                                                 "--reference-image-size", "1e3x5"), "--reference-image-size"),
        "import_two_branch_option_alone": (_import("{ck_bare_state_dict}", "--reference-arch", "resnet18"),
                                           "--reference-weights"),
        "import_two_branch_non_square_alone": (_import("{ck_bare_state_dict}", "--image-size", "32x128"),
                                               "two-branch"),
        "import_two_branch_ref_missing": (_import("{ck_bare_state_dict}", "--reference-weights", "{tmp}/gone.pth"),
                                          "not found"),
        "import_two_branch_check_missing": (_import("{ck_bare_state_dict}", "--reference-weights",
                                                    "{ck_bare_state_dict}", "--reference-check-against",
                                                    "{tmp}/gone.npz"), "not found"),
        "import_two_branch_ref_unknown_layout": (_import("{ck_bare_state_dict}", "--reference-weights",
                                                         "{ck_bare_state_dict}"), "reference branch"),
        "explain_two_branch_shapes_one": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--input-shapes", "64"),
                                          "--input-shapes"),
        "explain_two_branch_shapes_zero": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--input-shapes",
                                                    "0x5,64"), "--input-shapes"),
        "explain_two_branch_shapes_huge": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--input-shapes",
                                                    "9" * 400 + ",64"), "--input-shapes"),
        "explain_two_branch_ref_weights_no_model": (_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz",
                                                             "--reference-weights", "{ckpt}"),
                                                    "only used with --model"),
        "compare_two_branch_shapes_no_model": (["compare", "--checkpoint", "{ckpt}", "--checkpoint", "{ckpt}",
                                                "--input-shapes", "32x128,64", "--dataset", "{demo}"],
                                               "only used with --model"),
    }
    for name, (argv, has) in two_branch_args.items():
        add(Case("args", name, argv=argv, has=has, clean_dirs=("{tmp}",)))
    for name in ("payload_p2", "payload_zip", "fifo", "devzero", "truncated"):
        add(Case("checkpoints", f"import_two_branch_reference_{name}",
                 argv=_import("{ck_bare_state_dict}", "--reference-weights", f"{{ck_{name}}}"), has=messages[name],
                 clean_dirs=("{tmp}",)))
    add(Case("checkpoints", "retrieve_region_payload",
             argv=_region("{feats}", "{ck_payload_p2}"),
             has="nothing in it was run"))

    # ------------------------------------------------------------------ datasets
    refused = {"no_images_txt": "images.txt", "images_txt_folder": "folder", "images_txt_fifo": "FIFO",
               "images_txt_devzero": "device", "dotdot_path": "may not be used", "absolute_path": "absolute",
               "sop_dotdot": "may not be used", "inshop_abs": "absolute", "cars_garbage": "MATLAB",
               "binary_index": "UTF-8", "malformed_line": "line", "empty_index": "no", "huge_ids": "images.txt"}
    for name, has in refused.items():
        add(Case("datasets", f"evaluate_{name}", argv=_evaluate(f"{{ds_{name}}}"), has=has))
    skipped = {"symlink_out": "outside the dataset folder", "symlink_devzero": "outside the dataset folder",
               "fifo_image": "FIFO", "bomb_image": "pixels", "text_image": "not a decodable image",
               "folder_fifo": "FIFO"}
    for name, has in skipped.items():
        add(Case("datasets", f"evaluate_skips_{name}", argv=_evaluate(f"{{ds_{name}}}"), expect=0, has=has,
                 clean_dirs=("{tmp}",)))
    add(Case("datasets", "localize_skips_fifo_image", argv=_localize("{ds_fifo_image}"), expect=0, has="FIFO",
             json_stdout=True))
    add(Case("datasets", "localize_skips_symlink_out", argv=_localize("{ds_symlink_out}", "--pairing", "nearest"),
             expect=0, has="outside", json_stdout=True))
    add(Case("datasets", "correspond_skips_bomb",
             argv=["correspond", "--checkpoint", "{ckpt}", "--dataset", "{ds_bomb_image}", "--split", "all",
                   "--pairs", "4", "--json", *CPU], expect=0, json_stdout=True))
    add(Case("datasets", "correspond_bad_part_names",
             argv=["correspond", "--checkpoint", "{ckpt}", "--dataset", "{ds_bad_part_names}", *CPU],
             has="part names"))
    add(Case("datasets", "evaluate_all_unreadable_workers",
             argv=_evaluate("{ds_all_unreadable}", "{ckpt}", "{tmp}/f.h5")[:-4] + ["--num-workers", "2", *CPU],
             has="none of the", clean_dirs=("{tmp}",)))
    add(Case("datasets", "evaluate_all_unreadable", argv=_evaluate("{ds_all_unreadable}"), has="none of the"))
    add(Case("datasets", "train_all_unreadable_workers",
             argv=_train("{ds_all_unreadable}", "{tmp}/run", "--num-workers", "1"), has="none of the"))
    add(Case("datasets", "train_singleton_classes", argv=_train("{ds_singletons}"), expect=1, has="two"))
    add(Case("datasets", "localize_missing_images_txt", argv=_localize("{ds_no_images_txt}"), has="images.txt"))
    add(Case("datasets", "faithfulness_skips_fifo_image", argv=_faithfulness("{ds_fifo_image}"), expect=0, has="FIFO",
             json_stdout=True))
    add(Case("datasets", "faithfulness_missing_images_txt", argv=_faithfulness("{ds_no_images_txt}"),
             has="images.txt"))

    # ------------------------------------------------------------------ bombs and special files
    for name, has in {"bomb_png_20k": "pixels", "bomb_png_30k": "pixels", "bomb_jpeg": "pixels",
                      "bomb_hdr": "MAX_IMAGE_PIXELS",
                      "fifo": "FIFO", "devzero": "device", "secret_link": "not a decodable image",
                      "text": "not a decodable image", "truncated": "truncated"}.items():
        add(Case("special", f"explain_query_{name}", argv=_explain("{ckpt}", f"{{im_{name}}}"), has=has,
                 clean_dirs=("{tmp}",), timeout=30))
    add(Case("special", "pixel_limit_setting", argv=_explain(), env={"DMLVIEWER_MAX_IMAGE_PIXELS": "100"},
             has="DMLVIEWER_MAX_IMAGE_PIXELS"))
    add(Case("special", "retrieve_region_dotdot",
             argv=_region("{h5_dotdot_paths}", "{ckpt}"),
             has="may not be used"))

    # ------------------------------------------------------------------ hostile HDF5 files
    hostile = {"external_paths": "external file", "hidden_external": "external file", "external_link": "external link",
               "virtual": "virtual dataset", "soft_link": "soft link", "bytes_embeddings": "floating-point",
               "compound_embeddings": "floating-point", "labels_2d": "dimension", "claims_billion_rows": "stores only",
               "gzip_bomb": "compression bomb", "nan_embeddings": "NaN", "not_normalized": "normalized",
               "no_version": "format_version", "truncated": "HDF5", "not_hdf5": "not an HDF5",
               "fifo": "FIFO", "devzero": "device", "unknown_extra_dir": "folder"}
    for name, has in hostile.items():
        target = "{outputs}" if name == "unknown_extra_dir" else f"{{h5_{name}}}"
        add(Case("hdf5", f"retrieve_{name}", argv=_retrieve(target), has=has, timeout=30))
    add(Case("hdf5", "retrieve_region_external_paths",
             argv=_region("{h5_external_paths}", "{ckpt}"),
             has="external file"))
    add(Case("hdf5", "transfer_hidden_external_refused",
             argv=_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--method", "grad_transfer",
                           "--features", "{h5_hidden_external}", "--save-grad-weights"),
             has="external file", intact=("{h5_hidden_external}",)))
    add(Case("hdf5", "transfer_leaves_features_alone", setup="copy_features",
             argv=_explain("{ckpt}", "{img}", "{img2}", "{tmp}/o.npz", "--method", "grad_transfer",
                           "--features", "{tmp}/f.h5"), expect=0, intact=("{tmp}/f.h5",), timeout=90))
    add(Case("hdf5", "transfer_rewrite_drops_unknown", func="sim_transfer_rewrite_drops_unknown", expect="ok",
             timeout=90))
    add(Case("hdf5", "retrieve_json_strict", argv=_retrieve("{feats}"), expect=0, json_stdout=True))
    # cross-view files (issue 25): a per-row 'branch' that is neither 0 nor 1
    add(Case("hdf5", "retrieve_bad_branch", setup="bad_branch_features", argv=_retrieve("{tmp}/f.h5"),
             has="'branch'"))
    add(Case("hdf5", "retrieve_region_bad_branch", setup="bad_branch_features",
             argv=_region("{tmp}/f.h5"), has="'branch'"))

    # ------------------------------------------------------------------ disks and outputs
    add(Case("disks", "evaluate_full_disk", setup="fill_disk", argv=_evaluate("{demo}", "{ckpt}", "{full}/f.h5"),
             expect=1, has="no space left on", intact=("{full}/f.h5",), clean_dirs=("{full}",), needs="mounts"))
    add(Case("disks", "train_full_disk", setup="fill_disk", argv=_train("{demo}", "{full}/run"), expect=1,
             has="no space left on", clean_dirs=("{full}/run",), needs="mounts"))
    add(Case("disks", "explain_full_disk", setup="fill_disk_tight", argv=_explain("{ckpt}", "{img}", "{img2}",
                                                                              "{full}/o.npz"),
             expect=1, has="no space left on", clean_dirs=("{full}",), needs="mounts"))
    add(Case("disks", "make_demo_data_full_disk", setup="fill_disk", argv=["make-demo-data", "{full}/demo"],
             expect=1, has="no space left on", needs="mounts"))
    add(Case("disks", "evaluate_read_only", argv=_evaluate("{demo}", "{ckpt}", "{ro}/f.h5"), expect=1,
             has="read-only", needs="mounts"))
    add(Case("disks", "train_read_only", argv=_train("{demo}", "{ro}/run"), expect=1, has="read-only",
             needs="mounts"))
    add(Case("disks", "explain_read_only", argv=_explain("{ckpt}", "{img}", "{img2}", "{ro}/o.npz"), expect=1,
             has="read-only", needs="mounts"))
    add(Case("disks", "train_config_json_is_folder", argv=_train("{demo}", "{run_config_dir}"), expect=1,
             has="folder"))
    add(Case("disks", "train_metrics_jsonl_is_folder", argv=_train("{demo}", "{run_metrics_dir}"), expect=1,
             has="folder"))
    add(Case("disks", "store_write_error_simulated", func="sim_store_write_error", expect="ok"))
    add(Case("disks", "checkpoint_write_error_simulated", func="sim_checkpoint_write_error", expect="ok"))

    # ------------------------------------------------------------------ training runs
    add(Case("training", "resume_other_dataset", setup="finished_run",
             argv=_train("{ds_folder_fifo}", "{tmp}/run", "--resume", "--epochs", "2"), expect=1,
             has="another dataset", timeout=120))
    add(Case("training", "resume_finished_run", setup="finished_run", argv=_train("{demo}", "{tmp}/run", "--resume"),
             expect=1, has="already finished", timeout=120))
    add(Case("training", "resume_demo_checkpoint", argv=_train("{demo}", "{run_demo_ckpt}", "--resume"), expect=1,
             has="no training state"))
    add(Case("training", "stale_temp_removed_at_start", setup="stale_temps", argv=_train("{demo}", "{tmp}/run"),
             expect=0, clean_dirs=("{tmp}/run",), timeout=120))
    add(Case("training", "kill9_during_checkpoint", process="proc_kill_train", expect="ok", timeout=240))
    add(Case("training", "concurrent_train_same_out", process="proc_concurrent_train", expect="ok", timeout=180))
    add(Case("disks", "kill9_during_feature_write", process="proc_kill_evaluate", expect="ok", timeout=180))
    # train --branches 2 (issue 25): what does not apply is refused before any work
    two = ["train", "--branches", "2", "--dataset", "{demo}", "--out", "{tmp}/run", "--epochs", "1", *CPU]
    for name, (extra, has) in {"not_cvusa": ([], "CVUSA"), "loss": (["--loss", "ms"], "does not take --loss"),
                               "recipe": (["--recipe", "demo"], "does not take --recipe"),
                               "image_size_3000": (["--image-size", "3000"], "--image-size"),
                               "lr_nan": (["--lr", "nan"], "--lr"),
                               "resume_nothing": (["--resume"], "no checkpoint")}.items():
        add(Case("training", f"train_two_branch_{name}", argv=two + extra, has=has, clean_dirs=("{tmp}",)))
    add(Case("training", "train_two_branch_resume_one_branch_run", setup="finished_run",
             argv=["train", "--branches", "2", "--dataset", "{demo}", "--out", "{tmp}/run", "--resume", "--epochs",
                   "2", *CPU], expect=1, has="no two-branch training state", timeout=120))

    # ------------------------------------------------------------------ GUI open actions (real widgets)
    for name, has in {"no_images_txt": "images.txt", "images_txt_fifo": "FIFO", "dotdot_path": "may not be used",
                      "cars_garbage": "MATLAB"}.items():
        add(Case("gui", f"open_dataset_{name}", func="gui_open", args={"what": "dataset", "path": f"{{ds_{name}}}"},
                 expect="ok", has=has, timeout=60))
    for name in ("fifo_image", "bomb_image", "symlink_out", "text_image"):
        add(Case("gui", f"open_dataset_{name}", func="gui_open", args={"what": "dataset", "path": f"{{ds_{name}}}"},
                 expect="ok", timeout=60))
    for name in ("text", "payload_zip", "fifo", "devzero", "nan_weights", "dim_huge"):
        add(Case("gui", f"open_checkpoint_{name}", func="gui_open",
                 args={"what": "checkpoint", "path": f"{{ck_{name}}}"}, expect="ok", has=messages[name], timeout=60))
    for name in ("external_paths", "hidden_external", "fifo", "nan_embeddings", "claims_billion_rows"):
        add(Case("gui", f"open_features_{name}", func="gui_open", args={"what": "features", "path": f"{{h5_{name}}}"},
                 expect="ok", has=hostile[name], timeout=60))

    # ------------------------------------------------------------------ Python API
    add(Case("api", "load_checkpoint_payload", func="api_call",
             args={"call": "load_checkpoint", "path": "{ck_payload_zip}"}, expect="raise"))
    add(Case("api", "open_dataset_dotdot", func="api_call", args={"call": "open_dataset", "path": "{ds_dotdot_path}"},
             expect="raise"))
    add(Case("api", "read_features_external", func="api_call",
             args={"call": "read_features", "path": "{h5_external_paths}"}, expect="raise"))
    add(Case("api", "load_image_fifo", func="api_call", args={"call": "load_image", "path": "{im_fifo}"},
             expect="raise"))
    add(Case("api", "load_image_devzero", func="api_call", args={"call": "load_image", "path": "{im_devzero}"},
             expect="raise"))
    add(Case("api", "explain_pair_bomb", func="api_call", args={"call": "explain_pair", "path": "{im_bomb_png_30k}"},
             expect="raise"))
    add(Case("api", "dmlviewer_explain", func="api_dmlviewer_explain", expect="ok"))
    add(Case("api", "dmlviewer_view", func="api_dmlviewer_view", expect="ok", timeout=60))
    return cases


# =============================================================================== setups


def setup_copy_features(fx: dict, tmp: Path) -> None:
    shutil.copyfile(fx["feats"], tmp / "f.h5")


def setup_bad_branch_features(fx: dict, tmp: Path) -> None:
    """The demo feature file with a cross-view 'branch' column holding a value other than 0 and 1."""
    import numpy as np

    from dmlviewer.core.evaluate import read_features, write_features

    features = read_features(fx["feats"])
    branch = np.zeros(len(features), np.int8)
    branch[-1] = 7
    write_features(tmp / "f.h5", {**features.arrays, "branch": branch}, features.attrs)


def _fill(folder: Path, leave: int) -> None:
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with open(folder / "filler", "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))


def setup_fill_disk(fx: dict, tmp: Path) -> None:
    """The small file system holding a previous feature file, with about 48 KB free."""
    full = Path(fx["full"])
    for entry in full.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.copyfile(fx["feats"], full / "f.h5")
    _fill(full, 48_000)


def setup_fill_disk_tight(fx: dict, tmp: Path) -> None:
    """The small file system with about 4 KB free."""
    full = Path(fx["full"])
    for entry in full.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    _fill(full, 4_000)


def setup_finished_run(fx: dict, tmp: Path) -> None:
    """A run of one epoch on the demo data in ``{tmp}/run`` (trained once per worker, copied)."""
    from dmlviewer.cli import main

    cached = Path(fx["outputs"]) / "finished_run"
    if not (cached / "checkpoint.pt").exists():
        code = main(_fmt(_train("{demo}", str(cached)), fx))
        assert code == 0, f"the setup run failed ({code})"
    shutil.copytree(cached, tmp / "run")


def setup_stale_temps(fx: dict, tmp: Path) -> None:
    """Temporary files a killed run left: the old naming and the current one with a dead pid."""
    run = tmp / "run"
    run.mkdir()
    (run / ".checkpoint.pt.abcd1234.tmp").write_bytes(b"\0" * 1000)
    from dmlviewer.core.files import temp_path

    dead = temp_path(run / "checkpoint.pt").name.split("-")
    dead[-2] = str(_dead_pid())
    (run / "-".join(dead)).write_bytes(b"\0" * 1000)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _fmt(argv: list[str], fx: dict) -> list[str]:
    return [a.format(**fx) for a in argv]


# =============================================================================== worker functions


def api_call(fx: dict, tmp: Path, call: str, path: str) -> None:
    """Call one core API function on a hostile path; the runner expects a documented error."""
    if call == "load_checkpoint":
        from dmlviewer.core.models import load_checkpoint

        load_checkpoint(path)
    elif call == "open_dataset":
        from dmlviewer.core.data import open_dataset

        open_dataset(path)
    elif call == "read_features":
        from dmlviewer.core.evaluate import read_features

        read_features(path)
    elif call == "load_image":
        from dmlviewer.core.data import load_image

        load_image(path)
    elif call == "explain_pair":
        from dmlviewer.core.explain import explain_pair
        from dmlviewer.core.models import load_checkpoint

        model, _ = load_checkpoint(fx["ckpt"])
        explain_pair(model, path, fx["img"])
    else:
        raise AssertionError(f"unknown call {call}")


def api_dmlviewer_explain(fx: dict, tmp: Path) -> str:
    """``dmlviewer.explain`` (the Python API, once it exists) refuses a payload checkpoint, a
    FIFO image and a bomb with documented errors."""
    import dmlviewer

    explain = getattr(dmlviewer, "explain", None)
    if explain is None:
        return "skipped: dmlviewer.explain does not exist in this version (hook for the Python API)"
    from dmlviewer.core.data import ImageError
    from dmlviewer.core.models import CheckpointError

    for args, error in (((fx["ck_payload_zip"], fx["img"], fx["img2"]), (CheckpointError, ValueError)),
                        ((fx["ckpt"], fx["im_fifo"], fx["img2"]), (ImageError, ValueError)),
                        ((fx["ckpt"], fx["im_bomb_png_30k"], fx["img2"]), (ImageError, ValueError))):
        try:
            explain(*args)
        except error:
            continue
        raise AssertionError(f"dmlviewer.explain{args} did not refuse")
    return "dmlviewer.explain refused a payload, a FIFO and a bomb"


def api_dmlviewer_view(fx: dict, tmp: Path) -> str:
    """``dmlviewer.view`` refuses a payload checkpoint with a documented error, and opens a
    hostile dataset into an error dialog (recorded), the window staying up."""
    import dmlviewer

    view = getattr(dmlviewer, "view", None)
    if view is None:
        return "skipped: dmlviewer.view does not exist in this version (hook for the Python API)"
    from PySide6.QtCore import QSettings

    from dmlviewer.core.models import CheckpointError
    from dmlviewer.gui.common import errors

    QSettings.setPath(QSettings.IniFormat, QSettings.UserScope, str(tmp / "settings"))
    dialogs: list = []
    saved = errors.show_error
    errors.show_error = lambda parent, title, message, details=None, **_options: dialogs.append((title, message, details))
    try:
        try:
            view(fx["ck_payload_zip"], block=False).close()
            raise AssertionError("dmlviewer.view opened a payload checkpoint")
        except CheckpointError:
            pass
        window = view(dataset=fx["ds_dotdot_path"], block=False).window  # view returns the session
        try:
            assert window.isVisible() and len(dialogs) == 1 and "may not be used" in dialogs[0][1], dialogs
        finally:
            window.shutdown()
            window.close()
    finally:
        errors.show_error = saved
    return "dmlviewer.view refused a payload checkpoint; a hostile dataset gave one dialog"


def sim_store_write_error(fx: dict, tmp: Path) -> str:
    """A write error inside HDF5's chunk cache (simulated with a file-size limit: EFBIG, the
    same code path as a full disk) ends in one OSError, the previous file intact, no temp file."""
    import resource

    import numpy as np

    from dmlviewer.core.evaluate import read_features, write_features
    from dmlviewer.core.evaluate.store import FeatureWriter

    target = tmp / "f.h5"
    write_features(target, {"embeddings_raw": np.ones((4, 8), np.float32), "labels": np.arange(4),
                            "paths": list("abcd"), "split": "test"})
    before = target.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, hard))
    try:
        with FeatureWriter(target) as w:
            for _ in range(100):
                w.append(embeddings_raw=np.ones((512, 64), np.float32), labels=np.zeros(512, np.int64),
                         paths=["p"] * 512, split="test")
        raise AssertionError("no write error")
    except OSError as exc:
        message = str(exc)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert target.read_bytes() == before and len(read_features(target)) == 4
    assert [p.name for p in tmp.iterdir()] == ["f.h5"], list(tmp.iterdir())
    return f"write error reported as OSError ({message[:60]}), previous file intact"


def sim_checkpoint_write_error(fx: dict, tmp: Path) -> str:
    import resource

    from dmlviewer.core.models import load_checkpoint, save_checkpoint

    model, _ = load_checkpoint(fx["ckpt"])
    target = tmp / "checkpoint.pt"
    save_checkpoint(target, model, epoch=1)
    before = target.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, hard))
    try:
        save_checkpoint(target, model, epoch=2)
        raise AssertionError("no write error")
    except OSError:
        pass
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert target.read_bytes() == before and load_checkpoint(target)[1]["epoch"] == 1
    assert [p.name for p in tmp.iterdir()] == ["checkpoint.pt"], list(tmp.iterdir())
    return "checkpoint write error: OSError, previous checkpoint intact, no temp file"


def sim_transfer_rewrite_drops_unknown(fx: dict, tmp: Path) -> str:
    """``--save-grad-weights`` rewrites the file with the schema and grad_weights only: an unknown
    dataset of the original is not carried."""
    import h5py
    import numpy as np

    from dmlviewer.cli import main

    target = tmp / "f.h5"
    shutil.copyfile(fx["feats"], target)
    with h5py.File(target, "r+") as h:
        h["zz_unknown"] = np.arange(len(h["labels"]))
    code = main(_fmt(_explain("{ckpt}", "{img}", "{img2}", str(tmp / "o.npz"), "--method", "grad_transfer",
                              "--features", str(target), "--save-grad-weights"), fx))
    assert code == 0, code
    with h5py.File(target, "r") as h:
        names = sorted(h)
    assert "grad_weights" in names and "zz_unknown" not in names, names
    return f"rewritten with {names}"


_WINDOW: list = []  # one main window for every GUI case of a worker: a user's session


def _main_window(tmp: Path):
    from PySide6.QtCore import QSettings

    from dmlviewer.gui.window import app as gui_app
    from dmlviewer.gui.window.main_window import MainWindow

    qapp = gui_app.create_app()
    if not _WINDOW:
        QSettings.setPath(QSettings.IniFormat, QSettings.UserScope, str(tmp / "settings"))
        window = MainWindow()
        window.resize(1200, 800)
        window.show()
        _WINDOW.append(window)
    return qapp, _WINDOW[0]


def gui_open(fx: dict, tmp: Path, what: str, path: str) -> dict:
    """Open ``path`` through the File menu of the real main window (offscreen; one window for
    all GUI cases, as in a user's session), the file dialog answering ``path``; wait until the
    window is idle. Returns the dialogs shown, the problems listed, whether an exception escaped
    to Qt, and whether the window still works (it opens the demo dataset afterwards)."""
    from PySide6.QtWidgets import QFileDialog

    from dmlviewer.gui.common import errors

    qapp, window = _main_window(tmp)
    dialogs: list = []
    escaped: list = []
    saved = (errors.show_error, QFileDialog.getExistingDirectory, QFileDialog.getOpenFileName, sys.excepthook)
    errors.show_error = lambda parent, title, message, details=None, **_options: dialogs.append((title, message, details))
    QFileDialog.getExistingDirectory = staticmethod(lambda *a, **k: path)
    QFileDialog.getOpenFileName = staticmethod(lambda *a, **k: (path, ""))
    sys.excepthook = lambda *exc: escaped.append("".join(__import__("traceback").format_exception(*exc)))

    def settle(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            qapp.processEvents()
            if not window.loader.busy and not window.runner.busy:
                break
            time.sleep(0.02)
        for _ in range(10):
            qapp.processEvents()
            time.sleep(0.01)
        return not window.loader.busy

    try:
        problems_before = len(window.problems.problems())
        action = {"dataset": window.open_dataset_action, "checkpoint": window.model_menus.open_checkpoint_action,
                  "features": window.open_features_action}[what]
        action.trigger()
        idle = settle(20)
        problems = window.problems.problems()[problems_before:] if what == "dataset" else []
        works = window.isVisible() and window.open_dataset(fx["demo"]) and settle(20)
    finally:
        errors.show_error, QFileDialog.getExistingDirectory, QFileDialog.getOpenFileName, sys.excepthook = saved
    return {"dialogs": dialogs, "problems": problems, "escaped": escaped, "idle": idle and works}


# =============================================================================== real processes


def _dmlviewer(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dmlviewer", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _wait_for(predicate, timeout: float, interval: float = 0.002) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def _temps(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".") and ".tmp" in p.name] if folder.exists() else []


def _main_capturing(argv: list[str]) -> tuple[int, str]:
    """``dmlviewer.cli.main`` in this process, with what it writes to ``sys.stderr``."""
    import contextlib
    import io

    from dmlviewer.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def _probe(report: dict, when: str, check) -> None:
    """``check()`` (a note, or an exception for a corrupt file) recorded in ``report``."""
    try:
        report["notes"].append(f"{when}: {check()}")
    except Exception as exc:  # noqa: BLE001 - a corrupt file is what this looks for
        report["corrupt"].append(f"{when}: {exc}")


def _kill_then_rerun(argv: list[str], folder: Path, ready, check, rerun: list[str], after_kill=None) -> dict:
    """Start ``dmlviewer argv`` in a process, SIGKILL it as soon as ``ready()`` (a write is under
    way), check what it left (``after_kill``, default ``check``), run ``rerun`` in this process
    and ``check`` again: no temporary file may be left in ``folder`` after it."""
    report = {"corrupt": [], "notes": []}
    proc = _dmlviewer(argv)
    report["killed_during_write"] = _wait_for(ready, 150)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    report["notes"].append(f"temporary files after SIGKILL: {[p.name for p in _temps(folder)]}")
    _probe(report, "after SIGKILL", after_kill or check)
    code, err = _main_capturing(rerun)
    report["resume_rc"], report["resume_stderr"] = code, err[-2000:]
    if _temps(folder):
        report["corrupt"].append(f"temporary files left after the next run: {[p.name for p in _temps(folder)]}")
    _probe(report, "after the next run", check)
    report["ok"] = report["killed_during_write"] and code == 0 and not report["corrupt"]
    return report


def proc_kill_train(fx: dict, tmp: Path) -> dict:
    """SIGKILL a real ``train`` process while it writes a checkpoint (a temporary file of its
    naming exists): the checkpoint left is whole (loads); ``--resume`` removes the temporary
    file and finishes; its final checkpoint loads."""
    from dmlviewer.core.models import load_checkpoint

    run = tmp / "run"
    argv = _fmt(_train("{demo}", str(run), "--epochs", "3", "--steps-per-epoch", "2"), fx)
    return _kill_then_rerun(argv, run, lambda: (run / "checkpoint.pt").exists() and bool(_temps(run)),
                            lambda: f"epoch {load_checkpoint(run / 'checkpoint.pt')[1]['epoch']}", argv + ["--resume"])


def proc_kill_evaluate(fx: dict, tmp: Path) -> dict:
    """SIGKILL a real ``evaluate`` process while its temporary feature file exists: the previous
    file is intact and readable; the next extraction removes the leftover and writes a good file."""
    from dmlviewer.core.evaluate import read_features

    target = tmp / "f.h5"
    shutil.copyfile(fx["feats"], target)
    before = target.read_bytes()
    argv = _fmt(_evaluate("{demo}", "{ckpt}", str(target)), fx)

    def unchanged() -> str:
        if target.read_bytes() != before:
            raise AssertionError("the previous feature file changed")
        return f"previous file intact, {len(read_features(target))} rows"

    return _kill_then_rerun(argv, tmp, lambda: bool(_temps(tmp)), lambda: f"{len(read_features(target))} rows", argv,
                            after_kill=unchanged)


def proc_concurrent_train(fx: dict, tmp: Path) -> dict:
    """Two ``train`` on one ``--out``: the second is refused (exit 1) naming the first's process."""
    run = tmp / "run"
    first = _dmlviewer(_fmt(_train("{demo}", str(run), "--epochs", "50", "--steps-per-epoch", "100000"), fx))
    report = {"corrupt": [], "notes": []}
    try:
        lock = run / ".dmlviewer.lock"
        locked = _wait_for(lambda: lock.exists() and str(first.pid) in lock.read_text(errors="replace"), 150, 0.05)
        report["notes"].append(f"first run (pid {first.pid}) holds the lock: {locked}")
        code, err = _main_capturing(_fmt(_train("{demo}", str(run)), fx))
        report["resume_rc"], report["resume_stderr"] = code, err[-2000:]
        report["notes"].append(err.strip().splitlines()[-1][:200] if err.strip() else "no message")
        report["ok"] = locked and code == 1 and f"process {first.pid}" in err
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    return report
