"""Input resolutions a model can be explained at (issue 11, "a pretrained backbone without
training"): real backbones at 224 px give 7 x 7 maps, too coarse on photographs; the same
backbone at 768 px gives 24 x 24. The pair view offers the model's own size, 1.5x, 2x and the
image's own size, up to :data:`MAX_SIZE`, each rounded to a multiple of the backbone's stride
(a vision transformer needs whole patches). Heads fixed to one grid (flatten pooling) keep the
model's size only.
"""

from __future__ import annotations

MAX_SIZE = 1024
FACTORS = (("model", 1.0), ("1.5x", 1.5), ("2x", 2.0))


def stride_of(model) -> int:
    """The network's total stride (the feature map's cell size in input pixels)."""
    backbone = getattr(model, "backbone", None)
    if backbone is not None and hasattr(backbone, "stride"):
        return int(backbone.stride)
    return int(getattr(model, "stride", 1) or 1)


def fixed_size(model) -> bool:
    """True when the head only accepts the model's own input size (flatten pooling)."""
    return model.config.get("pooling") == "flatten"


def input_sizes(model, image_shape: tuple[int, int] | None = None, limit: int = MAX_SIZE) -> list[tuple[str, int]]:
    """``(label, size)`` choices, smallest first, without repeats: the model's size, 1.5x, 2x
    and the image's own size (its longer side), each a multiple of the stride and at most
    ``limit``."""
    base = int(model.preprocess.size)
    if fixed_size(model):
        return [(f"model ({base} px)", base)]
    stride = max(1, stride_of(model))

    def snap(value: float) -> int:
        return max(stride, min(int(limit) // stride * stride, int(value / stride + 0.5) * stride))

    choices = [(name, snap(base * factor)) for name, factor in FACTORS]
    if image_shape is not None:
        choices.append(("image", snap(max(image_shape))))
    seen, out = set(), []
    for name, size in sorted(choices, key=lambda c: c[1]):
        if size not in seen:
            seen.add(size)
            out.append((f"{name} ({size} px)", size))
    return out
