"""The headless scene of the pair view (issue 39): one colour-map table, one levels function,
the scene made from the session and the explanations, and its matplotlib drawing (:mod:`.draw`,
imported on use only)."""

from .colormaps import NAMES as COLORMAP_NAMES, overlay_lut, rgb
from .levels import levels, sign_part
from .scene import (Guide, Match, Overlay, Pane, Row, RowSource, Scene, SceneError, build_scene, map_unit,
                    scene_from_session, similarity_split)

__all__ = ["COLORMAP_NAMES", "Guide", "Match", "Overlay", "Pane", "Row", "RowSource", "Scene", "SceneError",
           "build_scene", "levels", "map_unit", "overlay_lut", "rgb", "scene_from_session", "sign_part",
           "similarity_split"]
