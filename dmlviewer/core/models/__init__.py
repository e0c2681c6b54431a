"""Backbones, pooling and grouping heads, attention modules, checkpoints (see docs/internals.md)."""

from .attention import attention_box, crop_and_zoom, random_walk_attention, transition_matrix
from .backbones import BACKBONES, Backbone, build_backbone, imagenet_weights_path
from .checkpoint import CHECKPOINT_VERSION, load_checkpoint, save_checkpoint
from .device import available_devices, resolve_device
from .errors import CheckpointError
from .model import GROUPINGS, EmbeddingModel, build_model, check_config, default_config
from .output import Linearization, ModelOutput
from .pooling import POOLINGS

__all__ = [
    "BACKBONES", "CHECKPOINT_VERSION", "GROUPINGS", "POOLINGS",
    "Backbone", "CheckpointError", "EmbeddingModel", "Linearization", "ModelOutput",
    "attention_box", "available_devices", "build_backbone", "build_model", "check_config",
    "crop_and_zoom", "default_config", "imagenet_weights_path", "load_checkpoint",
    "random_walk_attention", "resolve_device", "save_checkpoint", "transition_matrix",
]
