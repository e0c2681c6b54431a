"""Backbones, pooling and grouping heads, attention modules, checkpoints (see docs/internals.md)."""

from .attention import attention_box, crop_and_zoom, random_walk_attention, transition_matrix
from .backbones import BACKBONES, Backbone, build_backbone, imagenet_weights_path
from .checkpoint import CHECKPOINT_VERSION, load_checkpoint, save_checkpoint
from .device import available_devices, resolve_device
from .errors import CheckpointError, ModelError
from .model import GROUPINGS, EmbeddingModel, build_model, check_config, default_config
from .module_model import ModuleModel
from .opening import PRETRAINED_PREFIX, as_preprocess, describe_rule, model_fingerprint, open_model
from .output import EXACT, FIRST_ORDER, Linearization, ModelOutput
from .pooling import POOLINGS

__all__ = [
    "BACKBONES", "CHECKPOINT_VERSION", "EXACT", "FIRST_ORDER", "GROUPINGS", "POOLINGS", "PRETRAINED_PREFIX",
    "Backbone", "CheckpointError", "EmbeddingModel", "Linearization", "ModelError", "ModelOutput", "ModuleModel",
    "as_preprocess", "describe_rule", "model_fingerprint", "open_model",
    "attention_box", "available_devices", "build_backbone", "build_model", "check_config",
    "crop_and_zoom", "default_config", "imagenet_weights_path", "load_checkpoint",
    "random_walk_attention", "resolve_device", "save_checkpoint", "transition_matrix",
]
