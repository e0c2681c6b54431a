"""Figures of plots drawn from the data (issue 33): the report's and Export View's curves and
bar charts and their writers (SVG, HTML). No Qt, no matplotlib. The report's pair figures are
scenes (:mod:`dmlviewer.core.scene`)."""

from .figure import Bars, Figure, Plot, data_uri
from .svg import figure_svg, plot_svg

__all__ = ["Bars", "Figure", "Plot", "data_uri", "figure_svg", "plot_svg"]
