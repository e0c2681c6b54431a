"""Choices and defaults of the perturbation methods (occlusion, deletion and insertion curves),
shared by the core, the command line and the GUI; no torch import, so the command's parser and
the windows read them before a model is loaded."""

from __future__ import annotations

#: what a removed cell shows (:mod:`.perturb`): the blurred image, its mean colour, or noise
BASELINES = ("blur", "mean", "noise")
#: points of each deletion/insertion curve after the first
DEFAULT_STEPS = 16
#: pairs the greedy oracle runs on by default: it costs about seven times the rest of a pair
#: (the demo model: 4,100 forward passes against 610), so a twentieth of a 200-pair run
DEFAULT_ORACLE_PAIRS = 10
#: perturbed copies per forward pass on the CPU: small batches keep each activation in the
#: caches and out of fresh memory maps (small_cnn at 256 px on this project's 2-core CPU: 1.3 ms
#: an image at 4-8 a batch against 3.2 ms at 32; torchvision resnet18/50 at 224 px: best at 4-8,
#: 10-20 % slower at 32)
CPU_BATCH = 8
#: the same on a GPU, where larger batches fill the device
GPU_BATCH = 64
