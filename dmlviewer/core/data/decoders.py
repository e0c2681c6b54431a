"""Where a feature extraction decodes its JPEGs, by name: one list for the command line, the
Python functions and the benchmarks, importable without numpy or torch (the decoding itself:
:mod:`.device_input` and :func:`dmlviewer.core.evaluate.extract.decodes_on_device`).

- ``cpu``: OpenCV in the loader workers;
- ``device``: the workers read the files, the decode stage's thread decodes each batch's JPEGs
  in one call on the model's device (nvJPEG on CUDA; :mod:`.decode_stage`);
- ``auto``: ``device`` on a CUDA device when torchvision can decode there, else ``cpu``.
"""

DECODES = ("auto", "cpu", "device")

#: the default: the workers' OpenCV decoding, measured on a GPU (issue 32). Decoding on the device
#: was written in a session without a GPU (2026-11-27): it becomes the default (``"auto"``) once
#: ``tests/gpu`` and ``bench extract --device cuda`` (which times both) have shown it correct and
#: faster there (pytorch/vision#9606 reports nvJPEG corrupting memory on an H100).
DEFAULT_DECODE = "cpu"
