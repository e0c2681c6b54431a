"""The doors a model comes in by: checkpoints, imports, pretrained backbones, code, model B."""
