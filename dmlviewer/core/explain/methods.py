"""The one list of explanation methods (issue 30 item 5): every overall map the tool computes,
with its label and the places it is offered. The command line's choices, the app's menus, the
compare row, faithfulness, the randomization check, localization and the Python door all read
this table; a new method is one row here.

Uses (a method is offered where its row lists the use):

- ``explain``: ``explain --method``, :func:`~dmlviewer.core.explain.pair.explain_pair`, localization.
- ``pair_view``: the pair view's *Map* choices.
- ``compare_row``: maps model B's row shows (those that come with the pair, the Grad-CAM family).
- ``sanity_check``: maps the randomization check scores (seed 000's sanity checks).
- ``faithfulness``: maps deletion and insertion curves score.
- ``python``: ``dmlviewer.explain(method=...)`` (grad-weight transfer needs a feature file's bank).
- ``diagnosis``: maps ``compare`` measures localization of (those of the decomposition, Eq. 3/4).
- ``compare``: ``compare --method`` (two models): the map whose agreement is measured.
- ``gradcam``: the Grad-CAM family, computed together from one backward pass (:mod:`.gradcam`).
- ``two_branch``: maps a two-branch (cross-view) model has (grad-weight transfer's bank holds
  one network's Grad-CAM weights: street and aerial images go through different branches).
- ``localization_checked``: the maps the app's localization window checks at first.

No torch here: the GUI imports this table before torch is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One explanation method: ``key`` (the command line's and the files' name), ``label`` (the
    app's name), ``uses`` (where it is offered, see the module docstring)."""

    key: str
    label: str
    uses: frozenset[str]
    #: One line on what the map is, for tooltips and reports.
    summary: str = ""


def _m(key: str, label: str, uses: str, summary: str) -> Method:
    return Method(key, label, frozenset(uses.split()), summary)


#: Every method, in the order menus list them.
REGISTRY: tuple[Method, ...] = (
    _m("decomposition", "Decomposition",
       "explain pair_view compare_row sanity_check faithfulness python diagnosis compare two_branch "
       "localization_checked",
       "sum of the point-to-point contributions over the other image (seed 000 Eq. 3)"),
    _m("decomposition_bias", "Decomposition+Bias",
       "explain pair_view compare_row sanity_check faithfulness python diagnosis compare two_branch "
       "localization_checked",
       "each position's contribution against the other image's whole embedding (seed 000 Eq. 4)"),
    _m("gradcam", "Grad-CAM",
       "explain pair_view compare_row sanity_check faithfulness python compare gradcam two_branch "
       "localization_checked",
       "Grad-CAM with the cosine similarity as target"),
    _m("gradcam_nonorm", "Grad-CAM (no norm)",
       "explain pair_view compare_row sanity_check faithfulness python compare gradcam two_branch",
       "Grad-CAM with the dot product as target"),
    _m("rgradcam", "RGrad-CAM",
       "explain pair_view compare_row sanity_check faithfulness python compare gradcam two_branch "
       "localization_checked",
       "gradient times activation without the spatial average of the gradient"),
    _m("grad_transfer", "Grad-weight transfer",
       "explain pair_view faithfulness",
       "Grad-CAM weights transferred from the training set (seed 000 Sec. 4.3, seed 002)"),
    _m("occlusion", "Occlusion",
       "pair_view sanity_check faithfulness two_branch",
       "model-agnostic: the similarity's drop when a cell is occluded"),
    _m("point_to_point", "Point-to-point",
       "faithfulness two_branch",
       "the strongest point-to-point contributions, each image's cells ordered by them"),
)

_BY_KEY = {m.key: m for m in REGISTRY}


def methods(use: str) -> tuple[str, ...]:
    """Keys of the methods offered for ``use``, in menu order."""
    keys = tuple(m.key for m in REGISTRY if use in m.uses)
    if not keys:
        raise KeyError(f"no method is offered for use {use!r}")
    return keys


def method(key: str) -> Method:
    """The registry row of ``key`` (``KeyError`` names the known keys)."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"unknown method {key!r}; known: {', '.join(_BY_KEY)}") from None


def label(key: str) -> str:
    """The app's name of method ``key`` (the key itself, spaced, for one outside the table)."""
    row = _BY_KEY.get(key)
    return row.label if row is not None else key.replace("_", " ")
