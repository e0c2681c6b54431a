"""How the pair is shown (issue 30 item 2): every display option as one evented, headless
object that the session holds, the widgets bind to and the last session saves.

Each field announces its change on ``options.events.<field>`` (psygnal, as napari's and
magicgui's models do), after the value has changed. Every assignment is checked first
(:func:`check`, in ``DisplayOptions.__setattr__``, which psygnal's evented ``__setattr__``
wraps): a bad value raises :class:`DisplayError` naming the field, and the option keeps its
value and announces nothing. The app's toolbar writes the fields and
follows them; a notebook sets ``session.display.sign = "signed"`` and the open window redraws.

No Qt and no torch here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from psygnal import evented

from dmlviewer.core.explain.methods import methods

#: Sign choices: contributions that support the similarity, oppose it, or both.
SIGNS = ("positive", "negative", "signed")
#: Partial-map scale: each map stretched to its own maximum, or one scale for the whole pair.
SCALES = ("map", "pair")
#: Colour maps of the overlays (the signed display uses a diverging map of its own).
COLORMAPS = ("jet", "inferno", "viridis", "turbo", "plasma")
#: What the second model's row shows: its own maps, or A's minus B's.
ROW_B = ("model", "difference")


class DisplayError(ValueError):
    """A display option that cannot be used (the message names the field)."""


@evented
@dataclass
class DisplayOptions:
    """The pair view's options; ``input_size`` None means the model's own size. Assigning a
    field checks the value (:func:`check`): ``options.sign = "both"`` raises
    :class:`DisplayError` ("sign: 'both' is not one of …") and changes nothing."""

    method: str = "decomposition"
    sign: str = "positive"
    scale: str = "map"
    colormap: str = "jet"
    opacity: float = 0.6
    input_size: int | None = None
    row_b: str = "model"
    shared_scale: bool = False
    matches: bool = False
    match_count: int = 8
    neighbours: int = 12

    def __setattr__(self, name: str, value: Any) -> None:
        # Validation on assignment (psygnal's EventedModel needs pydantic, which the app does not
        # ship): psygnal wraps this method, so a refused value raises before any event is emitted.
        if name in _FIELDS:
            value = check(name, value)
        object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """Plain values, for the last session."""
        return asdict(self)

    def update(self, values: Any) -> list[str]:
        """Set every valid field of ``values`` (untrusted: settings text); returns the names of
        the fields it skipped because their value could not be used."""
        skipped = []
        if not isinstance(values, dict):
            return [f.name for f in fields(self)]
        for f in fields(self):
            if f.name not in values:
                continue
            try:
                setattr(self, f.name, values[f.name])  # checked on assignment
            except DisplayError:
                skipped.append(f.name)
        return skipped


#: The fields checked on assignment.
_FIELDS = frozenset(f.name for f in fields(DisplayOptions))


def check(name: str, value: Any) -> Any:
    """``value`` as field ``name`` holds it, or :class:`DisplayError` naming the field."""
    choices = {"method": methods("pair_view"), "sign": SIGNS, "scale": SCALES, "colormap": COLORMAPS,
               "row_b": ROW_B}
    if name in choices:
        if value not in choices[name]:
            raise DisplayError(f"{name}: {value!r} is not one of {', '.join(choices[name])}")
        return value
    if name == "opacity":
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise DisplayError(f"opacity: {value!r} is not a number") from None
        if not 0.0 <= number <= 1.0:
            raise DisplayError(f"opacity: {number} is outside 0 to 1")
        return number
    if name in ("shared_scale", "matches"):
        if isinstance(value, str):
            value = value.lower() in ("1", "true", "yes")
        return bool(value)
    if name in ("input_size", "match_count", "neighbours"):
        if value is None and name == "input_size":
            return None
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise DisplayError(f"{name}: {value!r} is not a whole number") from None
        low, high = {"input_size": (16, 4096), "match_count": (1, 50), "neighbours": (1, 1000)}[name]
        if not low <= number <= high:
            raise DisplayError(f"{name}: {number} is outside {low} to {high}")
        return number
    raise DisplayError(f"{name}: not a display option")
